"""Head detail: one head (or all heads combined) large, as weights or as pre-softmax scores."""

from __future__ import annotations

import numpy as np
import streamlit as st

from viz_app.figures import attention_maps, style
from viz_app.session import params, selection, url
from viz_app.widgets import export, header, pickers, scale, sentence_bar

st.title("Head detail")
st.caption(
    "One attention head, large. Each row is a query token and shows how it spreads its attention over "
    "the key tokens (a row of weights sums to 1). Hover a cell for the exact value."
)

out = sentence_bar.sentence_bar()
if out is not None:
    trace = out.trace
    header.translation_header(out)
    kind = pickers.kind_picker(trace.kinds)
    layer, head = pickers.layer_head_pickers(
        trace.n_layers[kind],
        trace.n_heads,
        with_head=st.session_state.get("agg", params.SINGLE_HEAD) == params.SINGLE_HEAD,
        kind=kind,
    )
    c1, c2, c3 = st.columns([1.7, 1.4, 1])
    url.clamp("agg", list(params.HEAD_VIEWS))
    agg = c1.radio(
        "Heads",
        list(params.HEAD_VIEWS),
        key="agg",
        horizontal=True,
        format_func=params.HEAD_VIEWS.__getitem__,
    )
    url.clamp("values", ["weights", "scores"])
    values = c2.radio(
        "Show",
        ["weights", "scores"],
        key="values",
        horizontal=True,
        format_func=lambda v: "attention weights" if v == "weights" else "pre-softmax scores",
    )
    fixed = scale.fixed_scale(c3, disabled=values != "weights")  # scores: a diverging scale of their own

    data = trace.attention(kind, layer) if values == "weights" else trace.scores(kind, layer)  # (H, Tq, Tk)
    if agg == params.SINGLE_HEAD:
        matrix, which = data[head], f"head {head + 1}"
    else:
        with np.errstate(invalid="ignore"):
            matrix, which = attention_maps.aggregate(data, agg), f"{agg} over {trace.n_heads} heads"
    q_tokens, k_tokens = style.query_key_tokens(kind, out.src_tokens, out.tgt_tokens, out.output_tokens)
    what = "weights" if values == "weights" else "scaled scores QKᵀ/√d_k (grey = masked, −∞)"
    title = style.titled(
        f"{params.KINDS[kind].capitalize()} · layer {layer + 1} · {which} · {what}",
        selection.options_note(out.options, out.beam_size),
    )
    fig = attention_maps.head_heatmap(
        matrix, q_tokens, k_tokens, title=title, values=values, fixed_scale=fixed, mask=trace.mask(kind)
    )
    export.chart(fig, f"{kind}_L{layer + 1}_{which.replace(' ', '_')}_{values}", key="head_detail")

    if agg == params.SINGLE_HEAD and (kind, layer, head) in out.options.ablate:
        st.info(
            "This head is switched off: its output is zeroed before the layer's output projection, so the "
            "rest of the model does not see it. Its weights are still computed and shown here.",
            icon=":material/volume_off:",
        )
    if values == "scores":
        st.caption(
            "Scores are what goes into the softmax: larger = more attention after the softmax. "
            "Masked positions are set to −∞ so that their weight becomes exactly 0."
        )
    st.caption(
        f"Rows: {len(q_tokens)} quer{'y' if len(q_tokens) == 1 else 'ies'} · columns: {len(k_tokens)} "
        f"key{'' if len(k_tokens) == 1 else 's'}. "
        "Tip: switch heads off in the sidebar to see how the translation changes."
    )
    export.export_trace(out)
