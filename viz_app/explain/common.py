"""What every tab of the "Why this word?" page shows the same way."""

from __future__ import annotations

import streamlit as st

from viz_app.session import trace_replay


def how_to_read(text: str) -> None:
    """The tab's "How to read this" expander."""
    with st.expander("How to read this", icon=":material/help:"):
        st.markdown(text)


def replaying() -> bool:
    """Whether a saved trace is open (the tabs then show only what it holds)."""
    return trace_replay.replay() is not None


def needs_model() -> bool:
    """Say that this analysis runs the model again when a saved trace is open (True: the caller stops there)."""
    if replaying():
        st.info("This runs the model again; close the saved trace to compute it.", icon=":material/history:")
        return True
    return False
