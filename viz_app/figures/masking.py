"""The Masks page (and Learn's stages): boolean masks side by side, scores → mask → softmax for one query."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from viz_app.figures.style import (
    ALLOW,
    BLOCK,
    HOVER_TEXT_MAX,
    MAX_TICKS,
    base_layout,
    rounded,
    token_axis,
    unique_labels,
)


# ----------------------------------------------------------------------------- masks
def mask_panels(
    panels: dict[str, np.ndarray], q_tokens: Sequence[str], k_tokens: Sequence[str], *, title: str
) -> go.Figure:
    """Boolean masks side by side (True = may attend), e.g. padding / causal / combined. Beyond
    ``HOVER_TEXT_MAX`` cells the hover names positions (1-based) instead of tokens and the cells have no gaps: per-cell
    labels, three times over, would be most of the bytes sent and of the browser's drawing."""
    names = list(panels)
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=names, horizontal_spacing=0.06)
    scale = [[0.0, BLOCK], [0.5, BLOCK], [0.5, ALLOW], [1.0, ALLOW]]
    large = len(q_tokens) * len(k_tokens) > HOVER_TEXT_MAX
    first = 1 if large else 0
    cells: dict[str, Any] = (
        dict(
            x=list(range(1, len(k_tokens) + 1)),
            y=list(range(1, len(q_tokens) + 1)),
            hovertemplate="query %{y}<br>key %{x}<br>%{z} (1 = may attend)<extra>%{fullData.name}</extra>",
        )
        if large
        else dict(
            text=[[f"query {q}<br>key {k}" for k in unique_labels(k_tokens)] for q in unique_labels(q_tokens)],
            hovertemplate="%{text}<br>%{z}<extra>%{fullData.name}</extra>",
            xgap=1,
            ygap=1,
        )
    )
    for c, name in enumerate(names, start=1):
        z = np.asarray(panels[name], dtype=np.int8)
        fig.add_trace(
            go.Heatmap(
                z=z,
                name=name,
                colorscale=scale,
                zmin=0,
                zmax=1,
                showscale=c == len(names),
                colorbar=dict(tickvals=[0.25, 0.75], ticktext=["blocked", "may attend"], thickness=12),
                **cells,
            ),
            row=1,
            col=c,
        )
        middle = c == (len(names) + 1) // 2  # one note under the panels, not one per panel (they overlapped)
        x_axis = token_axis(
            k_tokens, "key", scale=len(names), max_ticks=MAX_TICKS // len(names), note=middle, first=first
        )
        y_axis = token_axis(q_tokens, "query" if c == 1 else "", first=first)
        fig.update_xaxes(**x_axis, tickangle=-90, row=1, col=c)
        fig.update_yaxes(**y_axis, autorange="reversed", showticklabels=c == 1, row=1, col=c)
    return base_layout(fig, title, height=int(min(900, max(360, 16 * len(q_tokens) + 220))))


def score_label(scaled: bool | None, biased: bool = False) -> str:
    """The first stage's name for a model whose scores are q·k / √d_k (``scaled``), q·k (False: T5), or not known
    (None: a saved trace replayed without its model); ``biased``: plus a relative position bias B."""
    formula = {True: "q·k / √d_k", False: "q·k (not divided by √d_k)", None: ""}[scaled]
    if biased:
        formula = f"{formula} + B" if formula else "with the position bias B"
    return f"1 · {'scaled ' if scaled else ''}scores  {formula}".rstrip()


def mask_stages(
    raw_scores: np.ndarray,
    mask_row: np.ndarray,
    weights: np.ndarray,
    k_tokens: Sequence[str],
    *,
    title: str,
    scores: str = "1 · scaled scores  q·k / √d_k",
) -> go.Figure:
    """One query's row through the three stages: scores (named by ``scores``, see ``score_label``) → masked (−∞) →
    softmax weights.

    Masked keys have no bar in stage 2; a grey '−∞' marker sits at the axis bottom instead.
    """
    raw, w = rounded(raw_scores), rounded(weights)
    mask_row = np.asarray(mask_row, dtype=bool)
    masked = np.where(mask_row, raw, np.nan)
    x = list(range(len(k_tokens)))
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.09,
        subplot_titles=(
            scores,
            "2 · + mask: blocked keys become −∞",
            "3 · softmax → attention weights",
        ),
    )
    fig.add_trace(
        go.Bar(x=x, y=raw, marker_color="#8d99ae", name="score", hovertemplate="%{y:.4f}<extra></extra>"), row=1, col=1
    )
    fig.add_trace(
        go.Bar(x=x, y=masked, marker_color="#5fa8d3", name="masked score", hovertemplate="%{y:.4f}<extra></extra>"),
        row=2,
        col=1,
    )
    blocked = [i for i in x if not mask_row[i]]
    if blocked:
        finite = masked[np.isfinite(masked)]
        floor = float(finite.min()) if finite.size else 0.0
        fig.add_trace(
            go.Scatter(
                x=blocked,
                y=[min(floor, 0.0)] * len(blocked),
                mode="markers+text",
                text=["−∞"] * len(blocked),
                textposition="top center",
                textfont=dict(size=13, color="#495057"),
                marker=dict(symbol="x", color="#6c757d", size=9),
                name="−∞ (masked)",
                hovertemplate="masked: −∞<extra></extra>",
            ),
            row=2,
            col=1,
        )
    fig.add_trace(
        go.Bar(x=x, y=w, marker_color="#1d3557", name="weight", hovertemplate="%{y:.4f}<extra></extra>"), row=3, col=1
    )
    fig.update_xaxes(**token_axis(k_tokens, ""), tickangle=-60)
    fig.update_xaxes(title=dict(text="key"), row=3, col=1)
    fig.update_layout(showlegend=False, bargap=0.15)
    fig = base_layout(fig, title, height=620)
    fig.update_layout(plot_bgcolor="white")
    return fig
