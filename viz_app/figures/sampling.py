"""Sampling at one decoding step: the model's probabilities of the step's most probable pieces before temperature
beside the distribution the piece was drawn from (after temperature, top-k and top-p); the drawn piece marked, the
pieces the cut removed named. Pure Plotly, no Streamlit."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from viz_app.figures.style import base_layout, token_label

BEFORE, AFTER, DRAWN = "#a8b8c8", "#457b9d", "#e4572e"
BEFORE_NAME = "the model's p (before temperature)"
AFTER_NAME = "drawn from (after temperature and the cut)"


def draw_bars(
    pieces: Sequence[str],
    before: Sequence[float],
    after: Sequence[float],
    drawn: int,
    cut: Sequence[str] = (),
    *,
    title: str,
) -> go.Figure:
    """Two horizontal bar series over ``pieces`` (most probable on top): ``before`` and ``after``; the bars of
    ``pieces[drawn]`` outlined and its label starred, a piece in ``cut`` labelled as cut."""
    labels = []
    for r, p in enumerate(pieces):
        mark = " ★ drawn" if r == drawn else " ✂ cut" if p in cut else ""
        labels.append(f"{r + 1}. {token_label(p)}{mark}")
    line = [2.5 if r == drawn else 0.0 for r in range(len(pieces))]
    fig = go.Figure()
    for name, values, colour in ((BEFORE_NAME, before, BEFORE), (AFTER_NAME, after, AFTER)):
        fig.add_trace(
            go.Bar(
                name=name,
                x=[float(f"{float(v):.4g}") for v in values],  # four significant digits: small ones stay non-zero
                y=labels,
                orientation="h",
                marker=dict(color=colour, line=dict(color=DRAWN, width=line)),
                hovertemplate="%{y}<br>p %{x:.4g}<extra>%{fullData.name}</extra>",
                showlegend=False,  # the legend would draw the first bar's outline (the drawn piece's) as the key
            )
        )
    for name, colour in ((BEFORE_NAME, BEFORE), (AFTER_NAME, AFTER)):  # the legend's keys, plain (after the series)
        fig.add_trace(go.Bar(name=name, x=[None], y=[labels[0]], orientation="h", marker=dict(color=colour)))
    base_layout(fig, title, height=int(max(300, 30 * len(pieces) + 170)))
    fig.update_layout(barmode="group", legend=dict(orientation="h", yanchor="top", y=-0.15, x=0))
    fig.update_xaxes(title_text="probability", range=[0, 1.02])
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=12))
    return fig
