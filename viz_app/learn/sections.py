"""The Learn page's numbered steps, each drawn for one query of one head: 1 · the input x, 2 · q = x·W_Q + b,
3 · the keys and values, 4 · scores, mask and softmax, 5 · the head's output, 6 · every head joined and projected
by W_O. Steps 1, 2 and 6 need the model's weights (a ``Walkthrough``); the rest read the recorded trace."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

import core
from core.sites import attention_site
from viz_app.figures import learn, masking, style
from viz_app.learn.tables import DIGITS, check, frame, matrix_excerpt, vector_table
from viz_app.learn.walkthrough import Softmax, Walkthrough, as_numpy
from viz_app.session import params, selection
from viz_app.widgets import export, markup


@dataclass(frozen=True)
class Focus:
    """What the page follows: one query (0-based ``query``, its piece ``token``) of one head of one layer of
    ``run``, and the key tokens it attends over (``key_labels``: '1 ▁The' …)."""

    run: core.Translation
    kind: str
    layer: int
    head: int
    query: int
    token: str
    key_tokens: list[str]
    key_labels: list[str]


def input_vector(walk: Walkthrough, focus: Focus) -> np.ndarray:
    """1 · The input x of the query token, and where it comes from; returns x (D,)."""
    kind, layer, i = focus.kind, focus.layer, focus.query
    x_q, _ = walk.inputs()
    x = x_q[i]
    st.markdown(f"##### 1 · The input vector x of “{markup.md(focus.token)}” (d_model = {x.shape[0]})")
    norm_note = (
        " This model is **pre-norm**: the sub-layer reads the stream after a LayerNorm, "
        r"$x = \mathrm{LayerNorm}(h)$."
        if walk.pre
        else " This model is **post-norm** (as in the paper): the sub-layer reads the stream h itself, x = h."
    )
    if kind == "cross":
        st.markdown(
            "The cross-attention's query comes from the decoder: the stream h after this layer's "
            f"{'SSRU' if walk.cfg.decoder_self == 'ssru' else 'masked self-attention'} sub-layer (recomputed here "
            "from the recorded stream with the model's weights). Its keys and values come from the encoder's "
            "final output, the same for every decoder layer." + norm_note
        )
    elif layer == 0:
        _embedding_plus_pe(walk, focus, x.shape[0])
        st.markdown(norm_note.strip())
    else:
        st.markdown(f"In layer {layer + 1} the stream h is the output of layer {layer}." + norm_note)
    if kind != "cross" and layer == 0 and not walk.pre:
        return x
    vector_table({"x": x})
    return x


def _embedding_plus_pe(walk: Walkthrough, focus: Focus, d_model: int) -> None:
    """Layer 1's stream: the token's embedding (scaled or not) plus its positional encoding, checked."""
    side = "src" if focus.kind == "encoder" else "tgt"
    i = focus.query
    scale = "\\sqrt{d_{model}}" if walk.cfg.scale_embedding else "1"
    st.markdown(f"In layer 1 the stream h is the token's embedding (times ${scale}$) plus its positional encoding:")
    st.latex(rf"h_i = E[\text{{token}}_i] \cdot {scale} + PE_i")
    ids = walk.trace["ids.src" if side == "src" else "ids.tgt"]
    table = walk.model.src_embed if side == "src" else walk.model.tgt_embed
    emb = as_numpy(table.weight[int(ids[i])], d_model) * walk.model.embed_scale
    if side == "tgt" and i == 0 and walk.cfg.start == "zeros":
        emb = np.zeros_like(emb)  # this model starts the decoder from a zero vector
    pe = np.asarray(walk.trace.positional_encoding(side)[i], dtype=np.float64)
    recorded = walk.stream("encoder" if side == "src" else "decoder", 0)[i]
    vector_table(
        {
            "embedding E·" + ("√d" if walk.cfg.scale_embedding else "1"): emb,
            "positional encoding PE": pe,
            "their sum (by hand)": emb + pe,
            "h as recorded": recorded,
        }
    )
    check("embedding + PE equals the stream the model recorded", learn.max_difference(emb + pe, recorded))


def query_projection(walk: Walkthrough, focus: Focus, x: np.ndarray, q_recorded: np.ndarray) -> None:
    """2 · q = x · W_Q + b_Q for the chosen head, checked against the recorded query."""
    d_k, head = walk.d_head, focus.head
    st.markdown(f"##### 2 · Its query q = x · W_Q + b_Q (head {head + 1}, d_k = {d_k})")
    st.latex(r"q = x\, W_Q^{(h)} + b_Q^{(h)} \qquad (1 \times d_{model}) \cdot (d_{model} \times d_k) \to 1 \times d_k")
    w, b = walk.projection("q", head)
    matrix_excerpt(w, f"W_Q of head {head + 1}")
    st.caption(
        "PyTorch stores the weight transposed (out × in) with all heads stacked; this is head "
        f"{head + 1}'s slice, rows {head * d_k + 1}–{(head + 1) * d_k}, written as the paper does (d_model × d_k)."
    )
    q = x @ w + b
    st.dataframe(frame(np.stack([q, q_recorded]), ["x·W_Q + b (by hand)", "q (recorded)"]), width="stretch")
    check("x · W_Q + b equals the query the model computed", learn.max_difference(q, q_recorded))


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
    st.latex(r"K = X\, W_K^{(h)} + b_K^{(h)} \qquad V = X\, W_V^{(h)} + b_V^{(h)}")
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
        check("X · W_K + b equals the recorded keys", learn.max_difference(x_kv @ wk + bk, keys))
        check("X · W_V + b equals the recorded values", learn.max_difference(x_kv @ wv + bv, values))


def scores_and_softmax(focus: Focus, hand: Softmax, mask: np.ndarray, recorded: np.ndarray) -> None:
    """4 · Each key's score, mask, softmax weight by hand beside the recorded weight; the stages as a chart."""
    d_k = hand.output.shape[0]
    st.markdown("##### 4 · Scores, mask and softmax, one row per key")
    st.latex(
        rf"s_j = \frac{{q \cdot k_j}}{{\sqrt{{{d_k}}}}} \qquad "
        r"w_j = \frac{e^{s_j + M_j}}{\sum_l e^{s_l + M_l}}"
    )
    table = pd.DataFrame(
        {
            "q·k": np.round(hand.dots, DIGITS),
            f"÷ √{d_k}": np.round(hand.scaled, DIGITS),
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
    if diff < 1e-4:
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
    if f"{site}.heads" not in trace:
        st.caption("The heads' outputs were not recorded for this run, so the W_O step is not shown.")
        return
    heads = np.asarray(trace[f"{site}.heads"], dtype=np.float64)  # (H, Tq, dh) after any switch-off
    n_heads, d_k = heads.shape[0], heads.shape[-1]
    st.markdown(f"##### 6 · All {n_heads} heads joined, then projected by W_O")
    st.latex(
        r"\mathrm{MultiHead}(x) = \big[\,\mathrm{head}_1 \,\|\, \mathrm{head}_2 \,\|\, \cdots \,\|\, "
        r"\mathrm{head}_H\,\big]\; W_O + b_O"
    )
    chosen = f"head {head + 1}"
    st.caption(
        f"Every head did steps 2–5 with its own weights. Their outputs ({n_heads} × {d_k} numbers) are laid "
        f"side by side into one vector of {n_heads * d_k} = d_model numbers, which W_O mixes back into the "
        f"stream's space. The rows below are the heads' outputs the model recorded at this query ({chosen}, "
        "the one followed above, highlighted)."
    )
    table = frame(heads[:, i], [f"head {h + 1}" for h in range(n_heads)])
    styled = table.style.format(f"{{:.{DIGITS}f}}").apply(
        lambda row: ["background-color: #fff3cd" if row.name == chosen else "" for _ in row], axis=1
    )
    st.dataframe(styled, width="stretch")
    if (focus.kind, focus.layer, head) not in focus.run.options.ablate:
        check(f"head {head + 1}'s recorded output equals step 5's", learn.max_difference(heads[head, i], output))
    y = walk.project_heads(walk.attn, heads)  # (Tq, D)
    matrix_excerpt(as_numpy(walk.attn.out_proj.weight, n_heads * d_k).T, "W_O, the output projection")
    vector_table({"y = [heads] · W_O + b_O": y[i]})
    what, by_hand, model_value = walk.after(y)
    st.markdown(
        "The sub-layer's output is added back to the stream "
        + (r"($h + y$)" if walk.pre else r"($\mathrm{LayerNorm}(h + y)$)")
        + f"; carrying on by hand with the model's weights gives {what}:"
    )
    check(f"it equals the value the model recorded at query {i + 1}", learn.max_difference(by_hand[i], model_value[i]))
