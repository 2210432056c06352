"""Under each "share from the source" the lab shows: which measure it is, how the other two differ
(``claims_explain.share_measures_note``), and a link to each of them."""

from __future__ import annotations

import streamlit as st

from viz_app import claims_explain

# where each measure is shown: the page's script and its query parameters
WHERE = {
    "rollout": ("views/explain.py", {"explain_tab": "Attention rollout"}, "Attention rollout"),
    "sentence": ("views/explain.py", {"explain_tab": "Source or prefix?"}, "Source or prefix?"),
    "step": ("views/steps.py", {}, "Step-by-step decoding"),
}


def share_links(shown: str) -> None:
    """The line saying which source share ``shown`` is, then links to the pages of the other two."""
    st.caption(claims_explain.share_measures_note(shown))
    columns = st.columns(len(WHERE) - 1)
    others = [key for key in WHERE if key != shown]
    for column, key in zip(columns, others, strict=True):
        page, params, label = WHERE[key]
        column.page_link(page, label=f"{label} →", query_params=params or None, icon=":material/arrow_forward:")
