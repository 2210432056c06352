"""What the AppTest-driven page tests read off a run: no exception or error box, the Plotly specs, the figure
titles, and the page's text."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest


def ok(at: AppTest) -> AppTest:
    """``at`` after checking the run raised nothing and showed no error box."""
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def specs(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def chart_titles(at: AppTest) -> list[str]:
    """The figures' titles as read: a title wrapped to fit its column (``figures.style.wrap_title`` breaks a line
    at a space) joined again."""
    return [s["layout"]["title"]["text"].replace("<br>", " ") for s in specs(at)]


def texts(at: AppTest) -> str:
    """Every markdown, caption, info, warning and success text of the page, one per line."""
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [w.value for w in at.warning] + [i.value for i in at.info] + [s.value for s in at.success]
    return "\n".join(parts)
