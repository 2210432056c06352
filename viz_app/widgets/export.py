"""What a page hands out: every chart with PNG export in its toolbar, and the whole trace as JSON or NPZ."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import streamlit as st

import core
from viz_app.figures.style import plot_config
from viz_app.session import checkpoints
from viz_app.widgets import presentation


def chart(fig: go.Figure, name: str, **kwargs: Any) -> Any:
    """``st.plotly_chart`` with PNG export in the toolbar and full width (its fonts larger in presentation)."""
    return st.plotly_chart(presentation.figure(fig), config=plot_config(name), width="stretch", **kwargs)


def export_trace(out: core.Translation) -> None:
    """Download the whole trace as JSON or NPZ (generated only when clicked), named after the checkpoint and the
    sentence; the file carries the source text, the translation and the options."""
    st.caption("Export this run (every layer and head, masks, positional encodings, the text and the options)")
    stem = checkpoints.export_stem(out)
    c1, c2 = st.columns(2)
    c1.download_button(
        "⬇ Trace as JSON",
        data=out.trace.to_json,
        file_name=f"{stem}.json",
        mime="application/json",
        on_click="ignore",
        key="dl_json",
    )
    c2.download_button(
        "⬇ Trace as NPZ",
        data=out.trace.to_npz,
        file_name=f"{stem}.npz",
        mime="application/octet-stream",
        on_click="ignore",
        key="dl_npz",
    )
