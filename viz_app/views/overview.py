"""Translate & overview: the translation, its tokens, and every layer × head of every attention kind."""

from __future__ import annotations

import streamlit as st

from viz_app import common, figures, state

st.title("Translate & overview")
st.caption(
    "Type a sentence, press Enter, and see the translation together with what every attention head "
    "looked at. Each small square is one head: rows are the tokens that ask (queries), columns the "
    "tokens they look at (keys); darker = more attention."
)

out = common.sentence_bar()
if out is not None:
    common.translation_header(out)
    c1, c2 = st.columns(2)
    with c1:
        st.markdown("**Source pieces** (encoder input)")
        common.token_pills(out.src_tokens)
    with c2:
        st.markdown("**Output pieces** (what the decoder predicted)")
        common.token_pills(out.output_tokens)
    st.caption("`␣` marks a piece that starts a new word; `</s>` ends the sentence; `<s>` starts the decoder.")

    trace = out.trace
    note = state.options_note(out.options, out.beam_size)
    kinds = ["encoder", "decoder", "cross"]
    labels = [state.KINDS[k].capitalize() if k in trace.kinds else "Decoder (SSRU, no self-attention)" for k in kinds]
    state.clamp("overview_tab", labels)
    tabs = st.tabs(labels, key="overview_tab", on_change="rerun")  # lazy: only the open tab is drawn
    axes = {kind: figures.query_key_tokens(kind, out.src_tokens, out.tgt_tokens) for kind in kinds}

    for kind, tab in zip(kinds, tabs, strict=True):
        if not tab.open:
            continue
        with tab:
            if kind not in trace.kinds:
                st.info(
                    "This model's decoder has **no self-attention**: it is an SSRU (a simple recurrent unit) "
                    "that carries a memory from step to step. Its forget gates decide, per dimension, how much "
                    "of that memory to keep (1) or overwrite (0).",
                    icon=":material/info:",
                )
                for layer in range(trace.n_layers.get("cross", 0)):
                    title = figures.titled(f"SSRU forget gates · decoder layer {layer + 1}", note)
                    fig = figures.ssru_gates(trace.gates(layer), out.tgt_tokens, title=title)
                    common.chart(fig, f"ssru_gates_L{layer + 1}", key=f"ssru_{layer}")
                continue
            q_tokens, k_tokens = axes[kind]
            maps = [trace.attention(kind, layer) for layer in range(trace.n_layers[kind])]
            ablated = [(l, h) for k, l, h in out.options.ablate if k == kind]
            selected = (
                (st.session_state.get("layer", 0), st.session_state.get("head", 0))
                if st.session_state.get("kind") == kind
                else None
            )
            title = figures.titled(f"{state.KINDS[kind].capitalize()}: every layer × head", note)
            labels = {h: ", ".join(x) for h, x in common.head_labels(kind).items()}
            fig = figures.attention_grid(
                maps, q_tokens, k_tokens, ablated=ablated, selected=selected, title=title, head_labels=labels
            )
            common.chart(fig, f"{kind}_grid", key=f"grid_{kind}")
            st.caption(
                "Hover a square for the exact weights; pick a head below to open it large (it gets a red outline here)."
            )

    st.subheader("One head, large", divider="gray")
    kind = common.kind_picker(trace.kinds)
    layer, head = common.layer_head_pickers(trace.n_layers[kind], trace.n_heads, kind=kind)
    q_tokens, k_tokens = axes[kind]
    fig = figures.head_heatmap(
        trace.attention(kind, layer)[head],
        q_tokens,
        k_tokens,
        title=figures.titled(f"{state.KINDS[kind].capitalize()} · layer {layer + 1} · head {head + 1}", note),
    )
    common.chart(fig, f"{kind}_L{layer + 1}_H{head + 1}", key="overview_head")
    st.page_link(
        "views/head.py",
        label="More options for this head (scores, mean/max over heads) → Head detail",
        icon=":material/zoom_in:",
    )
    common.export(out)
