"""Learn: scaled dot-product attention for one query, recomputed by hand from the model's real numbers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import streamlit as st

from viz_app import common, figures, state

DIGITS = 3

st.title("Learn: attention by hand")
st.caption(
    "Pick one query token and follow scaled dot-product attention with the numbers this model really "
    "used: its query vector q, the keys K and values V of one head, the scores, the mask, the softmax, "
    "and the weighted sum of the values."
)
st.latex(
    r"\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^{\top}}{\sqrt{d_k}} + M\right) V"
    r"\qquad M_{ij} = \begin{cases} 0 & \text{may attend} \\ -\infty & \text{blocked} \end{cases}"
)


def _frame(matrix: np.ndarray, rows: list[str], prefix: str) -> pd.DataFrame:
    return pd.DataFrame(np.round(matrix, DIGITS), index=rows, columns=[f"{prefix}{j}" for j in range(matrix.shape[1])])


out = common.sentence_bar(qkv=True)
if out is not None and "encoder.0.self.q" not in out.trace:  # a saved trace from another page
    st.info(
        "This saved trace holds no queries, keys and values (only this page records them, to keep traces "
        "small); close it in the sidebar to recompute this page with the model.",
        icon=":material/history:",
    )
elif out is not None:
    trace = out.trace
    kind = common.kind_picker(trace.kinds)
    layer, head = common.layer_head_pickers(trace.n_layers[kind], trace.n_heads)
    q_tokens, k_tokens = figures.query_key_tokens(kind, out.src_tokens, out.tgt_tokens)
    state.clamp("query", list(range(len(q_tokens))))
    i = st.select_slider(
        "Query token",
        list(range(len(q_tokens))),
        key="query",
        format_func=lambda t: f"{t} {figures.token_text(q_tokens[t])}",
    )
    if kind != "encoder" and i < len(out.output_tokens):
        st.caption(
            f"Query {i} is the decoder input “{common.md(figures.token_text(q_tokens[i]))}”; "
            "from this position the model "
            f"predicted the next piece, “{common.md(figures.token_text(out.output_tokens[i]))}”."
        )
    Q, K, V = trace.qkv(kind, layer)  # recorded for this page's runs (state.translate with qkv=True)
    q, keys, vals = Q[head, i].astype(np.float64), K[head].astype(np.float64), V[head].astype(np.float64)
    d_k = q.shape[0]
    labels = [f"{j} {figures.token_text(t)}" for j, t in enumerate(k_tokens)]
    mask = trace.mask(kind)[i]
    recorded = trace.attention(kind, layer)[head, i]

    dots = keys @ q  # (Tk,)
    scaled = dots / math.sqrt(d_k)
    masked = np.where(mask, scaled, -np.inf)
    if np.isfinite(masked).any():
        e = np.exp(masked - masked[np.isfinite(masked)].max())
        weights = e / e.sum()
    else:  # a fully masked row: the engine records all-zero weights (softmax would give NaN)
        weights = np.zeros_like(masked)
    output = weights @ vals  # (d_k,)

    st.markdown(f"##### 1 · The query vector q of “{common.md(figures.token_text(q_tokens[i]))}” (d_k = {d_k})")
    st.dataframe(_frame(q[None], ["q"], "d"), width="stretch")
    c1, c2 = st.columns(2)
    with c1:
        st.markdown(f"##### 2 · The keys K ({len(k_tokens)} × {d_k})")
        st.dataframe(_frame(keys, labels, "d"), width="stretch", height=260)
    with c2:
        st.markdown(f"##### The values V ({len(k_tokens)} × {d_k})")
        st.dataframe(_frame(vals, labels, "d"), width="stretch", height=260)

    st.markdown("##### 3 · Scores, mask and softmax, one row per key")
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
    fig = figures.mask_stages(
        scaled,
        mask,
        weights,
        k_tokens,
        title=figures.titled(
            f"{state.KINDS[kind].capitalize()} · layer {layer + 1} · head {head + 1} · query {i}",
            state.options_note(out.options, out.beam_size),
        ),
    )
    common.chart(fig, "learn_stages", key="learn_stages")

    st.markdown("##### 4 · The output: weights × V")
    st.latex(r"\mathrm{out} = \sum_j w_j\, v_j")
    st.dataframe(_frame(output[None], ["out"], "d"), width="stretch")
    if (kind, layer, head) in out.options.ablate:
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
