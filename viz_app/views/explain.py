"""Why this word? Which heads the translation relied on (switch each off alone) and where attention routes
(rollout) — measures checked against the model itself, beside the raw attention maps. Each tab is one module of
viz_app/explain/; this page picks the open one."""

from __future__ import annotations

import streamlit as st

from core.analysis import HeadImportance
from viz_app.explain import analysis_store, attribution, importance, lens, patching, rollout, sources, zeroing
from viz_app.session import selection, trace_replay
from viz_app.widgets import export, header, sentence_bar

TABS = {  # title (also the ?explain_tab= value, params.PARAMS) -> the function that draws it
    "Head importance": importance.tab,
    "Attention rollout": rollout.tab,
    "Patching": patching.tab,
    "Attribution": attribution.tab,
    "Source or prefix?": sources.tab,
    "Logit lens": lens.tab,
    "Value zeroing": zeroing.tab,
}

st.title("Why this word?")
st.caption(
    "Attention maps show where heads look, not what the translation needed. Here the model answers for itself: "
    "switch each head off alone and see how much less likely this translation becomes, and follow attention "
    "through all the layers (rollout) to the source words each output word draws on."
)


def _replay_opens_on_rollout() -> None:
    """A saved trace without head importance opens on what it can show without the model (rollout) the first
    time this page shows it; after that the tab is the user's."""
    replay = trace_replay.replay()
    if replay is None or st.session_state.get("_explain_replay_tab") == id(replay):
        return
    st.session_state["_explain_replay_tab"] = id(replay)
    if st.session_state.get("explain_tab") == "Head importance" and HeadImportance.from_trace(replay.trace) is None:
        st.session_state["explain_tab"] = "Attention rollout"


out = sentence_bar.sentence_bar()
if out is not None and out.beam_size != 1:  # the analyses explain greedy decoding ("output changes" follows it)
    st.caption("Beam search is on in the sidebar; this page explains the greedy translation (beam 1).")
    out = selection.current(beam=1)
if out is not None:
    header.translation_header(out)
    if out.options.shortlist:
        st.caption(
            "The shortlist switch is on: these analyses still score every word of the vocabulary (log p of the "
            "chosen words among all of them); the shortlist only narrows what decoding may pick."
        )
    _replay_opens_on_rollout()
    tabs = st.tabs(list(TABS), key="explain_tab", on_change="rerun")  # the open tab is kept in the link
    for tab, draw in zip(tabs, TABS.values(), strict=True):
        if tab.open:
            with tab:
                draw(out)
    export.export_trace(analysis_store.with_analysis(out))
    st.caption("The export holds the analyses computed above for this sentence; opened again, they replay here.")
