"""Pure Plotly builders for a relative position bias (T5): each head's bias against the distance from query to key,
the bucket map (which learned entry each query × key pair reads), and the bias one run added, head by head.

Like every module of ``viz_app.figures``, this module never imports Streamlit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from viz_app.figures.style import (
    DIVERGING_SCALE,
    HOVER_TEXT_MAX,
    MASKED_BG,
    base_layout,
    rounded,
    symmetric_range,
    token_axis,
    unique_labels,
)

GRID_COLUMNS = 4  # heads side by side in the run's grid
TICKS = 20  # token labels an axis of one small square can hold


def bias_curves(distances: np.ndarray, values: np.ndarray, *, title: str, exact: int, max_distance: int) -> go.Figure:
    """Bias (H, N) against distance (N,) = key position − query position, one step line per head. Dotted lines
    mark ±``exact`` (below it each distance has a bucket of its own) and ±``max_distance`` (from it on, one bucket)
    where they fall inside the range shown."""
    fig = go.Figure()
    x = [int(d) for d in distances]
    for h, row in enumerate(values):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=rounded(row),
                mode="lines",
                line=dict(shape="hvh", width=2),
                name=f"head {h + 1}",
                hovertemplate=f"head {h + 1}<br>key − query = %{{x}}<br>bias %{{y:.4f}}<extra></extra>",
            )
        )
    lo, hi = min(x), max(x)
    for mark, what in ((exact, "shared buckets from here"), (max_distance, "one bucket from here")):
        inside = [at for at in (-mark, mark) if lo <= at <= hi and at != 0]
        for at in inside:
            fig.add_vline(x=at, line=dict(dash="dot", color="#888", width=1))
        if inside:  # named once, on the left-most line
            fig.add_annotation(x=inside[0], y=1.0, yref="paper", text=what, showarrow=False, yanchor="bottom")
    base_layout(fig, title, height=420)
    fig.update_layout(legend=dict(orientation="h", y=-0.22))
    fig.update_xaxes(title=dict(text="key position − query position (negative: the key comes before)"))
    fig.update_yaxes(title=dict(text="bias added to the score"), zeroline=True, zerolinecolor="#bbb")
    return fig


def bucket_map(buckets: np.ndarray, *, title: str) -> go.Figure:
    """(Tq, Tk) bucket read by each query position (row) for each key position (column), at coordinates 1..T so
    that the ticks and the hover name positions 1-based."""
    n_q, n_k = buckets.shape
    distance = np.arange(n_k)[None, :] - np.arange(n_q)[:, None]
    fig = go.Figure(
        go.Heatmap(
            z=buckets,
            x=list(range(1, n_k + 1)),
            y=list(range(1, n_q + 1)),
            customdata=distance,
            colorscale="Viridis",
            colorbar=dict(title=dict(text="bucket")),
            hovertemplate="query %{y}, key %{x}<br>key − query = %{customdata}<br>bucket %{z}<extra></extra>",
        )
    )
    base_layout(fig, title, height=460)
    fig.update_xaxes(title=dict(text="key position"), showgrid=False, scaleanchor="y", constrain="domain")
    fig.update_yaxes(title=dict(text="query position"), showgrid=False, autorange="reversed")
    return fig


def position_labels(tokens: Sequence[str]) -> list[str]:
    """1-based hover labels ('3 ␣the'); a label that is only its own position (the page numbers the axis where
    the trace's tokens do not fit it) is said once ('3', not '3 3')."""
    labels = unique_labels(tokens)
    return [str(i + 1) if tok == str(i + 1) else labels[i] for i, tok in enumerate(tokens)]


def bias_grid(
    bias: np.ndarray,
    q_tokens: Sequence[str],
    k_tokens: Sequence[str],
    *,
    title: str,
    mask: np.ndarray | None = None,
) -> go.Figure:
    """(H, Tq, Tk) the bias each head added to this run's scores, one heatmap per head on one symmetric scale.
    ``mask`` (Tq, Tk), True = may attend: blocked cells are left grey (their score became −∞ whatever the bias).
    The hover names 1-based positions with their tokens; beyond ``HOVER_TEXT_MAX`` cells a head, positions only
    (per-cell labels, once per head, would be most of the bytes sent)."""
    n_heads, n_q, n_k = bias.shape
    large = n_q * n_k > HOVER_TEXT_MAX
    first = 1 if large else 0  # the coordinate of the first token: the hover's %{x} / %{y} are then 1-based
    cells: dict[str, Any] = (
        dict(x=list(range(1, n_k + 1)), y=list(range(1, n_q + 1)))
        if large
        else dict(
            text=[[f"query {q}<br>key {k}" for k in position_labels(k_tokens)] for q in position_labels(q_tokens)]
        )
    )
    where = "query %{y}<br>key %{x}" if large else "%{text}"
    cols = min(GRID_COLUMNS, n_heads)
    rows = -(-n_heads // cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[f"head {h + 1}" for h in range(n_heads)],
        horizontal_spacing=0.03,
        vertical_spacing=0.12 / max(1, rows - 1) if rows > 1 else 0.1,
    )
    z = rounded(bias)
    m = symmetric_range(z)
    blocked = mask is not None and mask.shape == (n_q, n_k) and not mask.all()
    if blocked and mask is not None:
        z = np.where(mask[None], z, np.nan)
    for h in range(n_heads):
        fig.add_trace(
            go.Heatmap(
                z=z[h],
                colorscale=DIVERGING_SCALE,
                zmin=-m,
                zmax=m,
                zmid=0.0,
                showscale=h == 0,
                colorbar=dict(title=dict(text="bias")),
                **cells,
                hovertemplate=f"head {h + 1}<br>{where}<br>bias %{{z:.4f}}<extra></extra>",
            ),
            row=h // cols + 1,
            col=h % cols + 1,
        )
    base_layout(fig, title, height=rows * 300 + 90)
    if blocked:  # grey shows through the blocked (NaN) cells
        fig.update_layout(plot_bgcolor=MASKED_BG)
    for h in range(n_heads):  # tokens on the first column's rows and the bottom row's columns only
        row, col = h // cols + 1, h % cols + 1
        y_axis = token_axis(
            q_tokens, "query" if col == 1 and row == 1 else "", max_ticks=TICKS, note=False, first=first
        )
        fig.update_yaxes(**y_axis, range=[n_q - 0.5 + first, first - 0.5], showticklabels=col == 1, row=row, col=col)
        bottom = h + cols >= n_heads
        x_axis = token_axis(k_tokens, "key" if bottom and col == 1 else "", max_ticks=TICKS, note=False, first=first)
        fig.update_xaxes(
            **x_axis, range=[first - 0.5, n_k - 0.5 + first], tickangle=-60, showticklabels=bottom, row=row, col=col
        )
    return fig
