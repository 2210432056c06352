"""Learn: one attention sub-layer followed by hand with the model's real numbers — the input x, its projections
q = x·W_Q + b, k, v, the scores, the mask, the softmax, the weighted sum, then every head joined and projected by
W_O — each checked against what the model recorded."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import streamlit as st
import torch

import core
from core.sites import Stack, attention_array, attention_site, gate_site, layer_input_site
from viz_app.cache import cached
from viz_app.figures import learn, masking, style
from viz_app.session import checkpoints, errors, params, runs, selection, server, trace_replay, url
from viz_app.widgets import export, header, markup, pickers, sentence_bar

DIGITS = 3
SHOWN = 12  # dimensions of a d_model-long vector shown in a table
CORNER = 8  # rows and columns of a weight matrix shown
TOLERANCE = 1e-3  # float32 arithmetic, summed in another order: differences of about 1e-6 are expected

st.title("Learn: attention by hand")
st.caption(
    "Pick one query token and follow one attention sub-layer with the numbers this model really used: the "
    "token's input vector x, its query q = x·W_Q, the keys K and values V of one head, the scores, the mask, "
    "the softmax, the weighted sum of the values, and finally every head joined and projected by W_O. Each "
    "step is checked against what the model recorded."
)
st.latex(
    r"\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^{\top}}{\sqrt{d_k}} + M\right) V"
    r"\qquad M_{ij} = \begin{cases} 0 & \text{may attend} \\ -\infty & \text{blocked} \end{cases}"
)


@cached("Recording every activation of this translation …")
def learn_run(path: str, text: str, key: runs.OptionsKey, beam: int) -> core.Translation:
    """The translation with q/k/v, the residual stream and each head's output recorded (this page only): the
    page's translation again as one teacher-forced pass, not decoded a second time."""
    return server.load_bundle(path).record_more(runs.translate(path, text, key, beam))


def _frame(matrix: np.ndarray, rows: list[str], prefix: str = "d", digits: int = DIGITS) -> pd.DataFrame:
    matrix = np.atleast_2d(matrix)
    return pd.DataFrame(
        np.round(matrix, digits), index=rows, columns=[f"{prefix}{j + 1}" for j in range(matrix.shape[1])]
    )


def _check(what: str, diff: float) -> None:
    """A one-line verdict: the by-hand numbers equal the model's (largest |difference| shown)."""
    if diff < TOLERANCE:
        st.markdown(f":green-badge[✓ equal] {what} — largest |difference| {diff:.1e}")
    else:
        st.markdown(f":red-badge[✗ differ] {what} — largest |difference| {diff:.2e}")


def _np(t: torch.Tensor | None, n: int) -> np.ndarray:
    """A parameter as float64 numpy (zeros of length n for a missing bias)."""
    return np.zeros(n) if t is None else t.detach().float().cpu().numpy().astype(np.float64)


def _norm(module: torch.nn.Module) -> tuple[np.ndarray, np.ndarray, float]:
    d = int(module.weight.shape[0])
    return _np(module.weight, d), _np(module.bias, d), float(module.eps)


class Walkthrough:
    """Where one attention sub-layer's inputs come from, recomputed with the model's weights from the recorded
    residual stream (pre-norm: the sub-layer reads LayerNorm(stream); post-norm: the stream itself)."""

    def __init__(self, bundle: core.Bundle, trace: core.Trace, kind: str, layer: int) -> None:
        self.model, self.cfg, self.trace = bundle.model, bundle.config, trace
        self.kind, self.layer, self.pre = kind, layer, bundle.config.norm == "pre"
        self.n_tgt = len(trace["ids.tgt"]) if "ids.tgt" in trace else 0
        if kind == "encoder":
            block = self.model.encoder_layers[layer]
            self.attn, self.norm = block.self_attn, block.self_attn_norm
        else:
            dec = self.model.decoder_layers[layer]
            attn = dec.self_attn if kind == "decoder" else dec.cross_attn
            assert attn is not None
            self.attn, self.norm = attn, (dec.self_attn_norm if kind == "decoder" else dec.cross_attn_norm)
        self.d_head = self.cfg.d_head

    # ------------------------------------------------------------------ the residual stream
    def stream(self, stack: Stack, layer: int) -> np.ndarray:
        """The residual stream entering ``stack`` layer ``layer`` (T, D): the embedding + PE for the first."""
        x = self.trace[layer_input_site(stack, layer)]
        if layer == 0 and stack == "decoder":  # without the KV cache each step re-embeds the prefix: the last pass
            x = x[-self.n_tgt :]
        return np.asarray(x, dtype=np.float64)

    def sub_in(self, h: np.ndarray, norm: torch.nn.Module) -> np.ndarray:
        return learn.layer_norm(h, *_norm(norm)) if self.pre else h

    def sub_out(self, h: np.ndarray, y: np.ndarray, norm: torch.nn.Module) -> np.ndarray:
        return h + y if self.pre else learn.layer_norm(h + y, *_norm(norm))

    def project_heads(self, attn: torch.nn.Module, heads: np.ndarray) -> np.ndarray:
        """Heads' outputs (H, T, dh) joined (T, H·dh) and projected: · W_O + b_O -> (T, D)."""
        joined = np.concatenate(list(heads), axis=-1)  # (T, D)
        d = joined.shape[-1]
        return joined @ _np(attn.out_proj.weight, d).T + _np(attn.out_proj.bias, d)

    def decoder_after_self(self) -> np.ndarray:
        """The decoder stream after this layer's self-attention (or SSRU) sub-layer (Tt, D)."""
        dec = self.model.decoder_layers[self.layer]
        h = self.stream("decoder", self.layer)
        if dec.ssru is not None:  # c_t = f_t c_{t-1} + (1 - f_t) x_t W;  y_t = ReLU(c_t), with the recorded gates f
            xw = self.sub_in(h, dec.self_attn_norm) @ _np(dec.ssru.W.weight, h.shape[-1]).T
            gates = np.asarray(self.trace[gate_site(self.layer)], dtype=np.float64)
            c, cells = np.zeros(h.shape[-1]), []
            for t in range(h.shape[0]):
                c = gates[t] * c + (1.0 - gates[t]) * xw[t]
                cells.append(c)
            y = np.maximum(np.stack(cells), 0.0)
        else:
            assert dec.self_attn is not None
            y = self.project_heads(
                dec.self_attn, np.asarray(self.trace[attention_array("decoder", self.layer, "heads")])
            )
        return self.sub_out(h, y, dec.self_attn_norm)

    def memory(self) -> np.ndarray:
        """The encoder's output the cross-attention reads (Ts, D): the last layer's, LayerNorm'd for pre-norm."""
        h = self.stream("encoder", self.cfg.n_encoder_layers)
        return learn.layer_norm(h, *_norm(self.model.encoder_norm)) if self.pre else h

    def residual(self) -> np.ndarray:
        """The stream this sub-layer adds its output to (Tq, D)."""
        if self.kind == "encoder":
            return self.stream("encoder", self.layer)
        return self.stream("decoder", self.layer) if self.kind == "decoder" else self.decoder_after_self()

    def inputs(self) -> tuple[np.ndarray, np.ndarray]:
        """What the queries read (Tq, D) and what the keys and values read (Tk, D)."""
        if self.kind == "cross":
            return self.sub_in(self.residual(), self.norm), self.memory()
        x = self.sub_in(self.residual(), self.norm)
        return x, x

    def projection(self, name: str, head: int) -> tuple[np.ndarray, np.ndarray]:
        """This head's slice of W_Q / W_K / W_V as the paper writes it, (D, dh), and of its bias (dh,)."""
        linear = getattr(self.attn, f"{name}_proj")
        rows = slice(head * self.d_head, (head + 1) * self.d_head)
        d = int(linear.weight.shape[1])
        bias = None if linear.bias is None else linear.bias[rows]
        return _np(linear.weight[rows], d).T, _np(bias, self.d_head)

    def after(self, y: np.ndarray) -> tuple[str, np.ndarray, np.ndarray]:
        """What the model does next with the sub-layer's output y (Tq, D), computed by hand, and the recorded
        value it must equal: (description, by hand, recorded)."""
        s = self.sub_out(self.residual(), y, self.norm)
        if self.kind == "decoder":  # the next sub-layer, cross-attention, reads this: its queries must match
            dec = self.model.decoder_layers[self.layer]
            x = self.sub_in(s, dec.cross_attn_norm)
            d = x.shape[-1]
            q = x @ _np(dec.cross_attn.q_proj.weight, d).T + _np(dec.cross_attn.q_proj.bias, d)  # (Tq, D)
            recorded = np.concatenate(
                list(np.asarray(self.trace[attention_array("cross", self.layer, "q")])), axis=-1
            )  # (Tq, D)
            return "the queries of the cross-attention that reads this stream next", q, recorded
        block = (
            self.model.encoder_layers[self.layer] if self.kind == "encoder" else self.model.decoder_layers[self.layer]
        )
        h = torch.from_numpy(self.sub_in(s, block.ffn_norm)).to(block.ffn.linear1.weight)
        with torch.inference_mode():
            ffn = block.ffn(h).double().cpu().numpy()  # the model's own feed-forward module
        out = self.sub_out(s, ffn, block.ffn_norm)
        stack = "encoder" if self.kind == "encoder" else "decoder"
        return (
            f"the output of {stack} layer {self.layer + 1} (after the feed-forward sub-layer)",
            out,
            np.asarray(self.trace[f"{stack}.{self.layer}.out"], dtype=np.float64),
        )


def _static(matrix: np.ndarray, rows: list[str], columns: list[str], digits: int) -> None:
    """A small static table with every number written to ``digits`` decimals."""
    text = [[f"{v:.{digits}f}" for v in row] for row in np.atleast_2d(matrix)]
    st.table(pd.DataFrame(text, index=rows, columns=columns))


def _vector_table(rows: dict[str, np.ndarray]) -> None:
    """Rows of d_model-long vectors, their first SHOWN entries, as a static table."""
    first = next(iter(rows.values()))
    n = min(SHOWN, first.shape[-1])
    _static(np.stack([v[:n] for v in rows.values()]), list(rows), [f"d{j + 1}" for j in range(n)], DIGITS)
    if first.shape[-1] > n:
        st.caption(f"The first {n} of its {first.shape[-1]} dimensions (all are used).")


def _matrix_excerpt(matrix: np.ndarray, label: str) -> None:
    """A weight matrix's top-left corner (4 decimals: weights are small), said so when it is not all of it."""
    part, note = learn.excerpt(matrix, CORNER, CORNER)
    r, c = matrix.shape
    st.markdown(f"**{label}**, {r} × {c}" + (f" — {note}:" if note else ":"))
    rows, cols = [f"row {i + 1}" for i in range(part.shape[0])], [f"col {j + 1}" for j in range(part.shape[1])]
    _static(part, rows, cols, 4)


def _input_section(walk: Walkthrough, i: int, token: str, kind: str, layer: int) -> np.ndarray:
    """1 · The input x of the query token, and where it comes from."""
    x_q, _ = walk.inputs()
    x = x_q[i]
    st.markdown(f"##### 1 · The input vector x of “{markup.md(token)}” (d_model = {x.shape[0]})")
    side = "src" if kind == "encoder" else "tgt"
    stack = "encoder" if kind == "encoder" else "decoder"
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
        scale = "\\sqrt{d_{model}}" if walk.cfg.scale_embedding else "1"
        st.markdown(f"In layer 1 the stream h is the token's embedding (times ${scale}$) plus its positional encoding:")
        st.latex(rf"h_i = E[\text{{token}}_i] \cdot {scale} + PE_i")
        ids = walk.trace["ids.src" if side == "src" else "ids.tgt"]
        table = walk.model.src_embed if side == "src" else walk.model.tgt_embed
        emb = _np(table.weight[int(ids[i])], x.shape[0]) * walk.model.embed_scale
        if side == "tgt" and i == 0 and walk.cfg.start == "zeros":
            emb = np.zeros_like(emb)  # this model starts the decoder from a zero vector
        pe = np.asarray(walk.trace.positional_encoding(side)[i], dtype=np.float64)
        recorded = walk.stream(stack, 0)[i]
        _vector_table(
            {
                "embedding E·" + ("√d" if walk.cfg.scale_embedding else "1"): emb,
                "positional encoding PE": pe,
                "their sum (by hand)": emb + pe,
                "h as recorded": recorded,
            }
        )
        _check("embedding + PE equals the stream the model recorded", learn.max_difference(emb + pe, recorded))
        st.markdown(norm_note.strip())
    else:
        st.markdown(f"In layer {layer + 1} the stream h is the output of layer {layer}." + norm_note)
    if kind != "cross" and layer == 0 and not walk.pre:
        return x
    _vector_table({"x": x})
    return x


def _projection_section(walk: Walkthrough, x: np.ndarray, head: int, i: int, q_rec: np.ndarray) -> np.ndarray:
    """2 · q = x · W_Q + b_Q for the chosen head, checked against the recorded query."""
    d_k = walk.d_head
    st.markdown(f"##### 2 · Its query q = x · W_Q + b_Q (head {head + 1}, d_k = {d_k})")
    st.latex(r"q = x\, W_Q^{(h)} + b_Q^{(h)} \qquad (1 \times d_{model}) \cdot (d_{model} \times d_k) \to 1 \times d_k")
    w, b = walk.projection("q", head)
    _matrix_excerpt(w, f"W_Q of head {head + 1}")
    st.caption(
        "PyTorch stores the weight transposed (out × in) with all heads stacked; this is head "
        f"{head + 1}'s slice, rows {head * d_k + 1}–{(head + 1) * d_k}, written as the paper does (d_model × d_k)."
    )
    q = x @ w + b
    st.dataframe(_frame(np.stack([q, q_rec]), ["x·W_Q + b (by hand)", "q (recorded)"]), width="stretch")
    _check("x · W_Q + b equals the query the model computed", learn.max_difference(q, q_rec))
    return q


out = sentence_bar.sentence_bar()
if out is not None:
    header.translation_header(out)
run: core.Translation | None = out
walk_bundle: core.Bundle | None = None
if out is not None and trace_replay.replay() is None:
    run = errors.guarded(
        lambda: learn_run(
            checkpoints.ckpt_path(),
            selection.sentence(),
            runs.options_key(selection.options()),
            int(st.session_state.get("beam", 1)),
        )
    )
    walk_bundle = selection.bundle()
if run is not None and "encoder.0.self.q" not in run.trace:  # a saved trace from another page
    st.info(
        "This saved trace holds no queries, keys and values (only this page records them, to keep traces "
        "small); close it in the sidebar to recompute this page with the model.",
        icon=":material/history:",
    )
elif run is not None:
    trace = run.trace
    kind = pickers.kind_picker(trace.kinds)
    layer, head = pickers.layer_head_pickers(trace.n_layers[kind], trace.n_heads)
    q_tokens, k_tokens = style.query_key_tokens(kind, run.src_tokens, run.tgt_tokens)
    url.clamp("query", list(range(len(q_tokens))))
    i = st.select_slider(
        "Query token",
        list(range(len(q_tokens))),
        key="query",
        format_func=lambda t: f"{t + 1} {style.token_text(q_tokens[t])}" if 0 <= t < len(q_tokens) else str(t),
    )
    token = style.token_text(q_tokens[i])
    if kind != "encoder" and i < len(run.output_tokens):
        st.caption(
            f"Query {i + 1} is the decoder input “{markup.md(token)}”; from this position the model "
            f"predicted the next piece, “{markup.md(style.token_text(run.output_tokens[i]))}”."
        )
    Q, K, V = trace.qkv(kind, layer)  # recorded for this page's runs
    q, keys, vals = Q[head, i].astype(np.float64), K[head].astype(np.float64), V[head].astype(np.float64)
    d_k = q.shape[0]
    labels = [f"{j + 1} {style.token_text(t)}" for j, t in enumerate(k_tokens)]
    mask = trace.mask(kind)[i]
    recorded = trace.attention(kind, layer)[head, i]

    walk = None
    if walk_bundle is not None and "embed.src" in trace:
        walk = Walkthrough(walk_bundle, trace, kind, layer)
        x = _input_section(walk, i, token, kind, layer)
        _projection_section(walk, x, head, i, q)
    else:
        st.caption(
            "Where q, k and v come from (x · W_Q …) needs the model's weights and is shown when the page runs "
            "the model (close a saved trace in the sidebar)."
        )
        st.markdown(f"##### The query vector q of “{markup.md(token)}” (d_k = {d_k})")
        st.dataframe(_frame(q[None], ["q"]), width="stretch")

    dots = keys @ q  # (Tk,)
    scaled = dots / math.sqrt(d_k)
    masked = np.where(mask, scaled, -np.inf)
    if np.isfinite(masked).any():
        e = np.exp(masked - masked[np.isfinite(masked)].max())
        weights = e / e.sum()
    else:  # a fully masked row: the engine records all-zero weights (softmax would give NaN)
        weights = np.zeros_like(masked)
    output = weights @ vals  # (d_k,)

    source = "the source tokens (the encoder's output)" if kind == "cross" else "every token of the same sequence"
    st.markdown(f"##### 3 · The keys K and values V ({len(k_tokens)} × {d_k}), one row per key token")
    st.latex(r"K = X\, W_K^{(h)} + b_K^{(h)} \qquad V = X\, W_V^{(h)} + b_V^{(h)}")
    st.caption(f"Made the same way as q, from the input vectors of {source}, with the head's own W_K and W_V.")
    c1, c2 = st.columns(2)
    with c1:
        st.markdown("**K**")
        st.dataframe(_frame(keys, labels), width="stretch", height=260)
    with c2:
        st.markdown("**V**")
        st.dataframe(_frame(vals, labels), width="stretch", height=260)
    if walk is not None:
        _, x_kv = walk.inputs()
        (wk, bk), (wv, bv) = walk.projection("k", head), walk.projection("v", head)
        _check("X · W_K + b equals the recorded keys", learn.max_difference(x_kv @ wk + bk, keys))
        _check("X · W_V + b equals the recorded values", learn.max_difference(x_kv @ wv + bv, vals))

    st.markdown("##### 4 · Scores, mask and softmax, one row per key")
    st.latex(
        rf"s_j = \frac{{q \cdot k_j}}{{\sqrt{{{d_k}}}}} \qquad "
        r"w_j = \frac{e^{s_j + M_j}}{\sum_l e^{s_l + M_l}}"
    )
    table = pd.DataFrame(
        {
            "q·k": np.round(dots, DIGITS),
            f"÷ √{d_k}": np.round(scaled, DIGITS),
            "mask M": np.where(mask, "0", "−∞"),
            "s + M": [f"{v:.{DIGITS}f}" if np.isfinite(v) else "−∞" for v in masked],
            "softmax w": np.round(weights, 4),
            "recorded w": np.round(recorded.astype(np.float64), 4),
        },
        index=labels,
    )
    st.dataframe(table, width="stretch", height=min(420, 36 * len(labels) + 40))
    fig = masking.mask_stages(
        scaled,
        mask,
        weights,
        k_tokens,
        title=style.titled(
            f"{params.KINDS[kind].capitalize()} · layer {layer + 1} · head {head + 1} · query {i + 1}",
            selection.options_note(run.options, run.beam_size),
        ),
    )
    export.chart(fig, "learn_stages", key="learn_stages")

    st.markdown("##### 5 · The head's output: weights × V")
    st.latex(r"\mathrm{head}_h = \sum_j w_j\, v_j")
    st.dataframe(_frame(output[None], [f"head {head + 1}"]), width="stretch")
    ablated = (kind, layer, head) in run.options.ablate
    if ablated:
        st.caption("This head is switched off: the model multiplies this output by 0.")

    diff = float(np.max(np.abs(weights - recorded))) if weights.size else 0.0
    score_diff = float(np.max(np.abs(np.where(mask, scaled - trace.scores(kind, layer)[head, i], 0.0)), initial=0.0))
    if diff < 1e-4:
        st.success(
            f"✓ The recomputed softmax equals the weights the model recorded (largest difference "
            f"{diff:.1e}; scores differ by at most {score_diff:.1e})."
        )
    else:
        st.error(f"✗ The recomputed weights differ from the recorded ones by up to {diff:.2e}.")

    site = attention_site(kind, layer)
    if walk is not None and f"{site}.heads" in trace:
        heads = np.asarray(trace[f"{site}.heads"], dtype=np.float64)  # (H, Tq, dh) after any switch-off
        n_heads = heads.shape[0]
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
        frame = _frame(heads[:, i], [f"head {h + 1}" for h in range(n_heads)])
        styled = frame.style.format(f"{{:.{DIGITS}f}}").apply(
            lambda row: ["background-color: #fff3cd" if row.name == chosen else "" for _ in row], axis=1
        )
        st.dataframe(styled, width="stretch")
        if not ablated:
            _check(
                f"head {head + 1}'s recorded output equals step 5's",
                learn.max_difference(heads[head, i], output),
            )
        y = walk.project_heads(walk.attn, heads)  # (Tq, D)
        w_o = _np(walk.attn.out_proj.weight, n_heads * d_k).T
        _matrix_excerpt(w_o, "W_O, the output projection")
        _vector_table({"y = [heads] · W_O + b_O": y[i]})
        what, by_hand, model_value = walk.after(y)
        st.markdown(
            "The sub-layer's output is added back to the stream "
            + (r"($h + y$)" if walk.pre else r"($\mathrm{LayerNorm}(h + y)$)")
            + f"; carrying on by hand with the model's weights gives {what}:"
        )
        _check(
            f"it equals the value the model recorded at query {i + 1}",
            learn.max_difference(by_hand[i], model_value[i]),
        )
    elif walk is not None:
        st.caption("The heads' outputs were not recorded for this run, so the W_O step is not shown.")
