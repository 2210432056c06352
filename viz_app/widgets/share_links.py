"""Under each "share from the source" the lab shows: which measure it is, how the other two differ
(``claims_explain.share_measures_note``), and a button that opens each of them (the tab of Why this word? set
first: a link's query parameters are read only when a session starts)."""

from __future__ import annotations

import streamlit as st

from viz_app import claims_explain

# where each measure is shown: the page's script, the Why-this-word? tab (None: another page), the button's words
WHERE = {
    "rollout": ("views/explain.py", "Attention rollout", "Attention rollout"),
    "sentence": ("views/explain.py", "Source or prefix?", "Source or prefix?"),
    "step": ("views/steps.py", None, "Step-by-step decoding"),
}


def _open_tab(tab: str | None) -> None:
    if tab is not None:  # before the page draws its tabs (a callback runs before the script)
        st.session_state["explain_tab"] = tab


def share_links(shown: str) -> None:
    """The line saying which source share ``shown`` is, then a button for each of the other two."""
    st.caption(claims_explain.share_measures_note(shown))
    others = [key for key in WHERE if key != shown]
    for column, key in zip(st.columns(len(others)), others, strict=True):
        page, tab, label = WHERE[key]
        if column.button(f"{label} →", key=f"share_{shown}_{key}", on_click=_open_tab, args=(tab,)):
            st.switch_page(page)
