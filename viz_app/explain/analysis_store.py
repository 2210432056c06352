"""The analyses a session computed on the "Why this word?" page for the current translation, kept so that the
page's trace export carries them (opened again, they replay on the page)."""

from __future__ import annotations

from typing import Any

import numpy as np
import streamlit as st

import core
from viz_app.session import checkpoints, runs, trace_replay


def analysis_key(out: core.Translation) -> str:
    """The checkpoint, sentence and switches an analysis was computed for."""
    return f"{checkpoints.selected()}|{out.source_text}|{runs.options_key(out.options)}"


def remember(out: core.Translation, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Keep a computed analysis for this translation, so the export below carries it (per session)."""
    store = st.session_state.setdefault("_analysis", {})
    if store.get("key") != analysis_key(out):
        store.clear()
        store["key"] = analysis_key(out)
    store.setdefault("arrays", {}).update(arrays)
    store.setdefault("meta", {}).update(meta)


def with_analysis(out: core.Translation) -> core.Translation:
    """The translation whose trace also holds what this session computed on this page (for the export)."""
    store = st.session_state.get("_analysis", {})
    if trace_replay.replay() is not None or store.get("key") != analysis_key(out) or not store.get("arrays"):
        return out
    return core.Translation(out.trace.with_analysis(store["arrays"], store["meta"]))
