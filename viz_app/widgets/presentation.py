"""How the pages fit a screen: a projector (1024×768) and a laptop (1280×720) as well as a wide monitor, and the
presentation setting a teacher switches on from the sidebar (kept in the link, ``?present=1``): larger text, the
sidebar collapsed, every figure across the whole width.

The page's rules are CSS on Streamlit's own element names (``data-testid``, Streamlit pinned in constraints.txt);
tests/viz_app/test_browser_widths.py opens every page at both widths and fails on text cut off or a page wider
than the window.
"""

from __future__ import annotations

from typing import Literal

import plotly.graph_objects as go
import streamlit as st

from viz_app.figures.style import scaled_fonts

HELP = (
    "For a projector: larger text, the sidebar folded away (the arrow at the top left opens it again) and every "
    "figure across the whole width. Kept in the page's link."
)
FONT_SCALE = 1.25  # presentation: text and figure fonts this much larger

# Columns holding a figure or a table, stacked: each across the whole width.
_STACKED = """
[data-testid="stHorizontalBlock"]:has([data-testid="stPlotlyChart"], [data-testid="stDataFrame"]) { flex-wrap: wrap; }
[data-testid="stHorizontalBlock"]:has([data-testid="stPlotlyChart"], [data-testid="stDataFrame"])
  > [data-testid="stColumn"] { min-width: 100%; }
"""
# Always: narrower side margins than Streamlit's 5rem below 1440 px (at 1024 px with the sidebar open they left a
# 564 px column); below 1200 px, the columns stack (side by side they were 280 px each); metric values, widget
# labels and checkboxes wrap rather than end in '…'.
PAGE_CSS = (
    """
@media (max-width: 1440px) {
  [data-testid="stMainBlockContainer"] { padding-left: 2rem; padding-right: 2rem; }
}
@media (max-width: 1200px) {"""
    + _STACKED
    + """  [data-testid="stMetricValue"] { font-size: 1.6rem; }
}
[data-testid="stMetricValue"] > div, [data-testid="stMetricLabel"] p { white-space: normal; overflow-wrap: anywhere; }
[data-testid="stWidgetLabel"] .stMarkdownEllipsis,
  [data-testid="stWidgetLabel"] .stMarkdownEllipsis p { white-space: normal; }
"""
)
# Presentation: larger text (Streamlit sizes text in rem), the columns stacked at every width.
PRESENT_CSS = (
    f"""
html {{ font-size: {16 * FONT_SCALE:.0f}px; }}
[data-testid="stMainBlockContainer"] {{ padding-left: 2rem; padding-right: 2rem; max-width: none; }}"""
    + _STACKED
)


def on() -> bool:
    """Whether the presentation setting is on (the session's ``present``, read from the link on the first run)."""
    return bool(st.session_state.get("present", False))


def sidebar_state() -> Literal["auto", "collapsed"]:
    """The sidebar's state for ``st.set_page_config``: folded away in presentation, else Streamlit's own choice
    (open on a desktop). Streamlit applies it when it changes, so switching the setting on folds the sidebar."""
    return "collapsed" if on() else "auto"


def style_page() -> None:
    """The page's CSS for this run (a style-only ``st.html`` takes no room on the page)."""
    st.html(f"<style>{PAGE_CSS}{PRESENT_CSS if on() else ''}</style>")


def switch() -> None:
    """The sidebar's toggle."""
    st.toggle("Presentation (projector)", key="present", help=HELP)


def figure(fig: go.Figure) -> go.Figure:
    """``fig`` as the page draws it: its fonts larger in presentation, as it is otherwise."""
    return scaled_fonts(fig, FONT_SCALE) if on() else fig
