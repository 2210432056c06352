"""The Learn page's numbered steps, each drawn for one query of one head: 1 · the input x, 2 · q = x·W_Q + b,
3 · the keys and values, 4 · scores, mask and softmax, 5 · the head's output, 6 · every head joined and projected
by W_O. Steps 1, 2 and 6 need the model's weights (a ``Walkthrough``); the rest read the recorded trace."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

import core
from core.sites import AttentionKind, Side, array_of, attention_site
from viz_app.figures import learn, masking, style
from viz_app.learn import arithmetic, tables
from viz_app.learn.arithmetic import Arithmetic
from viz_app.learn.tables import DIGITS, check, frame, matrix_excerpt, vector_table
from viz_app.learn.walkthrough import Softmax, Walkthrough
from viz_app.session import params, selection
from viz_app.widgets import export, markup


@dataclass(frozen=True)
class Focus:
    """What the page follows: one query (0-based ``query``, its piece ``token``) of one head of one layer of
    ``run``, and the key tokens it attends over (``key_labels``: '1 ▁The' …)."""

    run: core.Translation
    kind: AttentionKind
    layer: int
    head: int
    query: int
    token: str
    key_tokens: list[str]
    key_labels: list[str]
    scaled: bool = True  # the scores are q·k / √d_k (False: q·k, T5)
    biased: bool = False  # the scores add a relative position bias (T5's self-attention)


def input_vector(walk: Walkthrough, focus: Focus) -> np.ndarray:
    """1 · The input x of the query token, and where it comes from; returns x (D,)."""
    kind, layer, i = focus.kind, focus.layer, focus.query
    x_q, _ = walk.inputs()
    x = x_q[i]
    st.markdown(f"##### 1 · The input vector x of “{markup.md(focus.token)}” (d_model = {x.shape[0]})")
    norm = Arithmetic.of(walk.cfg).norm
    norm_note = (
        f" This model is **pre-norm**: the sub-layer reads the stream after a{'n' if norm == 'RMSNorm' else ''} "
        rf"{norm}, $x = \mathrm{{{norm}}}(h)$."
        if walk.pre
        else " This model is **post-norm** (as in the paper): the sub-layer reads the stream h itself, x = h."
    )
    if kind == "cross":
        st.markdown(
            "The cross-attention's query comes from the decoder: the stream h after this layer's "
            f"{'SSRU' if walk.cfg.decoder_self == 'ssru' else 'masked self-attention'} sub-layer, as the model "
            "recorded it. Its keys and values come from the encoder's final output, the same for every decoder "
            "layer." + norm_note
        )
    elif layer == 0:
        _embedding_plus_pe(walk, focus)
        st.markdown(norm_note.strip())
    else:
        st.markdown(f"In layer {layer + 1} the stream h is the output of layer {layer}." + norm_note)
    if kind != "cross" and layer == 0 and not walk.pre:
        return x
    vector_table({"x as recorded": x})
    if walk.pre:  # the norm by hand, from the recorded stream
        norm_of_h = walk.input_by_hand()[i]
        check(f"{norm}(h) by hand equals the input x the model recorded", learn.max_difference(norm_of_h, x))
    return x


def _embedding_plus_pe(walk: Walkthrough, focus: Focus) -> None:
    """Layer 1's stream: the token's embedding (scaled or not), plus its position vector when the model adds one,
    through the embedding norm when it has one; checked against the recorded stream."""
    a = Arithmetic.of(walk.cfg)
    side: Side = "src" if focus.kind == "encoder" else "tgt"
    i = focus.query
    scale = "times $\\sqrt{d_{model}}$" if a.scale_embedding else "not scaled"
    if a.absolute_positions:
        what = f"the token's embedding ({scale}) plus its positional encoding"
    else:
        what = (
            f"the token's embedding ({scale}) alone: this model adds no position vector (its positions enter the "
            "scores as a bias, step 4)"
        )
    norm = f", then a {a.norm} (layernorm_embedding)" if a.embed_norm else ""
    st.markdown(f"In layer 1 the stream h is {what}{norm}:")
    st.latex(a.embedding())
    emb = walk.embedding(side, i)  # zeros where the decoder starts from a zero vector
    rows = {"embedding E·" + ("√d" if a.scale_embedding else "1"): emb}
    total = emb
    if a.absolute_positions:
        pe = np.asarray(walk.trace.positional_encoding(side)[i], dtype=np.float64)
        total = emb + pe
        rows |= {"positional encoding PE": pe, "their sum (by hand)": total}
    if a.embed_norm:
        total = walk.embedding_norm(side, total)
        rows[f"{a.norm} of it (by hand)"] = total
    recorded = walk.stream("encoder" if side == "src" else "decoder", 0)[i]
    vector_table({**rows, "h as recorded": recorded})
    steps = "embedding" + (" + PE" if a.absolute_positions else "") + (f", {a.norm}'d," if a.embed_norm else "")
    check(f"{steps} equals the stream the model recorded", learn.max_difference(total, recorded))


def query_projection(walk: Walkthrough, focus: Focus, x: np.ndarray, q_recorded: np.ndarray) -> None:
    """2 · q = x · W_Q + b_Q for the chosen head, checked against the recorded query."""
    d_k, head, a = walk.d_head, focus.head, Arithmetic.of(walk.cfg)
    bias = " + b_Q" if a.biases else ""
    st.markdown(f"##### 2 · Its query q = x · W_Q{bias} (head {head + 1}, d_k = {d_k})")
    st.latex(a.projection("q") + r" \qquad (1 \times d_{model}) \cdot (d_{model} \times d_k) \to 1 \times d_k")
    if not a.biases:
        st.caption("This model's projections have no bias terms (b = 0).")
    w, b = walk.projection("q", head)
    matrix_excerpt(w, f"W_Q of head {head + 1}")
    st.caption(
        "PyTorch stores the weight transposed (out × in) with all heads stacked; this is head "
        f"{head + 1}'s slice, rows {head * d_k + 1}–{(head + 1) * d_k}, written as the paper does (d_model × d_k)."
    )
    q = x @ w + b
    by_hand = f"x·W_Q{a.plus_bias}"
    st.dataframe(frame(np.stack([q, q_recorded]), [f"{by_hand} (by hand)", "q (recorded)"]), width="stretch")
    check(f"x · W_Q{a.plus_bias} equals the query the model computed", learn.max_difference(q, q_recorded))


def recorded_query(focus: Focus, q: np.ndarray) -> None:
    """Step 1-2 without the model's weights (a saved trace): the recorded query only."""
    st.caption(
        "Where q, k and v come from (x · W_Q …) needs the model's weights and is shown when the page runs "
        "the model (close a saved trace in the sidebar)."
    )
    st.markdown(f"##### The query vector q of “{markup.md(focus.token)}” (d_k = {q.shape[0]})")
    st.dataframe(frame(q[None], ["q"]), width="stretch")


def keys_and_values(focus: Focus, keys: np.ndarray, values: np.ndarray, walk: Walkthrough | None) -> None:
    """3 · The head's keys and values (Tk, d_k), checked against X · W_K + b and X · W_V + b when the model's
    weights are at hand."""
    source = "the source tokens (the encoder's output)" if focus.kind == "cross" else "every token of the same sequence"
    st.markdown(f"##### 3 · The keys K and values V ({len(focus.key_tokens)} × {keys.shape[1]}), one row per key token")
    if walk is not None:
        a = Arithmetic.of(walk.cfg)
        st.latex(rf"{a.projection('k', matrix=True)} \qquad {a.projection('v', matrix=True)}")
    st.caption(f"Made the same way as q, from the input vectors of {source}, with the head's own W_K and W_V.")
    c1, c2 = st.columns(2)
    with c1:
        st.markdown("**K**")
        st.dataframe(frame(keys, focus.key_labels), width="stretch", height=260)
    with c2:
        st.markdown("**V**")
        st.dataframe(frame(values, focus.key_labels), width="stretch", height=260)
    if walk is not None:
        _, x_kv = walk.inputs()
        (wk, bk), (wv, bv) = walk.projection("k", focus.head), walk.projection("v", focus.head)
        b = Arithmetic.of(walk.cfg).plus_bias
        check(f"X · W_K{b} equals the recorded keys", learn.max_difference(x_kv @ wk + bk, keys))
        check(f"X · W_V{b} equals the recorded values", learn.max_difference(x_kv @ wv + bv, values))


def scores_and_softmax(
    focus: Focus, hand: Softmax, mask: np.ndarray, recorded: np.ndarray, looked_up: np.ndarray | None = None
) -> None:
    """4 · Each key's score, mask, softmax weight by hand beside the recorded weight; the stages as a chart.
    ``looked_up``: the position bias read from the model's learned table (checked against the one added)."""
    d_k = hand.output.shape[0]
    st.markdown("##### 4 · Scores, mask and softmax, one row per key")
    st.latex(arithmetic.score_formula(focus.scaled, focus.biased, d_k))
    if not focus.scaled:
        st.caption("This model does not divide the scores by √d_k: a score is q·k itself.")
    if focus.biased:
        st.caption(
            f"$B_h(j - i)$ is the relative position bias: head {focus.head + 1}'s learned number for the distance "
            "from this query to key j (the Positional-encoding page shows them all)."
        )
        if looked_up is not None:
            check(
                "the bias looked up in the learned table by distance equals the bias the model added",
                learn.max_difference(looked_up, hand.bias),
            )
    columns: dict[str, object] = {"q·k": np.round(hand.dots, DIGITS)}
    if focus.scaled:
        columns[f"÷ √{d_k}"] = np.round(hand.dots / np.sqrt(d_k), DIGITS)
    if focus.biased:
        columns["+ bias B"] = np.round(hand.bias, DIGITS)
        columns["score s"] = np.round(hand.scaled, DIGITS)
    table = pd.DataFrame(
        {
            **columns,
            "mask M": np.where(mask, "0", "−∞"),
            "s + M": [f"{v:.{DIGITS}f}" if np.isfinite(v) else "−∞" for v in hand.masked],
            "softmax w": np.round(hand.weights, 4),
            "recorded w": np.round(recorded.astype(np.float64), 4),
        },
        index=focus.key_labels,
    )
    st.dataframe(table, width="stretch", height=min(420, 36 * len(focus.key_labels) + 40))
    run = focus.run
    fig = masking.mask_stages(
        hand.scaled,
        mask,
        hand.weights,
        focus.key_tokens,
        scores=masking.score_label(focus.scaled, focus.biased),
        title=style.titled(
            f"{params.KINDS[focus.kind].capitalize()} · layer {focus.layer + 1} · head {focus.head + 1} · "
            f"query {focus.query + 1}",
            selection.options_note(run.options, run.beam_size),
        ),
    )
    export.chart(fig, "learn_stages", key="learn_stages")


def head_output(focus: Focus, hand: Softmax, mask: np.ndarray, recorded: np.ndarray) -> None:
    """5 · weights × V, and the verdict that the softmax by hand equals the recorded weights."""
    st.markdown("##### 5 · The head's output: weights × V")
    st.latex(r"\mathrm{head}_h = \sum_j w_j\, v_j")
    st.dataframe(frame(hand.output[None], [f"head {focus.head + 1}"]), width="stretch")
    if (focus.kind, focus.layer, focus.head) in focus.run.options.ablate:
        st.caption("This head is switched off: the model multiplies this output by 0.")
    diff = float(np.max(np.abs(hand.weights - recorded))) if hand.weights.size else 0.0
    scores = focus.run.trace.scores(focus.kind, focus.layer)[focus.head, focus.query]
    score_diff = float(np.max(np.abs(np.where(mask, hand.scaled - scores, 0.0)), initial=0.0))
    if diff < tables.TOLERANCE:  # the page's one 'equal' threshold, as every other check on it
        st.success(
            f"✓ The recomputed softmax equals the weights the model recorded (largest difference "
            f"{diff:.1e}; scores differ by at most {score_diff:.1e})."
        )
    else:
        st.error(f"✗ The recomputed weights differ from the recorded ones by up to {diff:.2e}.")


def heads_joined(walk: Walkthrough, focus: Focus, output: np.ndarray) -> None:
    """6 · Every head's recorded output at this query joined and projected by W_O, then carried on by hand to the
    next value the model recorded."""
    trace, i, head = focus.run.trace, focus.query, focus.head
    site = attention_site(focus.kind, focus.layer)
    if array_of(site, "heads") not in trace:
        st.caption("The heads' outputs were not recorded for this run, so the W_O step is not shown.")
        return
    heads = np.asarray(trace[array_of(site, "heads")], dtype=np.float64)  # (H, Tq, dh) after any switch-off
    n_heads, d_k = heads.shape[0], heads.shape[-1]
    a = Arithmetic.of(walk.cfg)
    st.markdown(f"##### 6 · All {n_heads} heads joined, then projected by W_O")
    st.latex(
        r"\mathrm{MultiHead}(x) = \big[\,\mathrm{head}_1 \,\|\, \mathrm{head}_2 \,\|\, \cdots \,\|\, "
        r"\mathrm{head}_H\,\big]\; W_O" + (" + b_O" if a.biases else "")
    )
    chosen = f"head {head + 1}"
    joined = (
        f"{n_heads * d_k} = d_model numbers"
        if n_heads * d_k == a.d_model
        else f"{n_heads * d_k} numbers (this model's heads are d_kv = {d_k} wide, so this is not d\\_model = "
        f"{a.d_model}; W\\_O is {n_heads * d_k} × {a.d_model})"
    )
    st.caption(
        f"Every head did steps 2–5 with its own weights. Their outputs ({n_heads} × {d_k} numbers) are laid "
        f"side by side into one vector of {joined}, which W_O mixes back into the stream's space. The rows below "
        f"are the heads' outputs the model recorded at this query ({chosen}, the one followed above, highlighted)."
    )
    table = frame(heads[:, i], [f"head {h + 1}" for h in range(n_heads)])
    styled = table.style.format(f"{{:.{DIGITS}f}}").apply(
        lambda row: ["background-color: #fff3cd" if row.name == chosen else "" for _ in row], axis=1
    )
    st.dataframe(styled, width="stretch")
    if (focus.kind, focus.layer, head) not in focus.run.options.ablate:
        check(f"head {head + 1}'s recorded output equals step 5's", learn.max_difference(heads[head, i], output))
    y = walk.project_heads(heads)  # (Tq, D)
    matrix_excerpt(walk.output_projection()[0], "W_O, the output projection")
    vector_table({f"y = [heads] · W_O{' + b_O' if a.biases else ''}": y[i]})
    what, by_hand, model_value = walk.after(y)
    st.markdown(f"The sub-layer's output is added back to the stream h (${a.residual()}$); by hand that gives {what}:")
    vector_table({"by hand": by_hand[i], "as recorded": model_value[i]})
    check(f"it equals the value the model recorded at query {i + 1}", learn.max_difference(by_hand[i], model_value[i]))
    if focus.kind == "decoder":
        st.caption("Next, this layer's cross-attention reads this stream (pick it above to follow it).")
        return
    st.markdown("Next, the feed-forward sub-layer reads this stream:")
    st.latex(a.ffn())
    if a.gated:
        st.caption(
            "A gated feed-forward: two projections of x, one through the activation, multiplied element by "
            "element (⊙) before W_2."
        )
