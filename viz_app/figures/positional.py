"""Pure Plotly builders for positional encodings: the table, its curves, the similarity of positions.

Like every module of ``viz_app.figures`` (it uses ``style``), this module never imports Streamlit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from viz_app.figures.style import DIVERGING_SCALE, base_layout, rounded, symmetric_range, token_axis


def pe_matrix(table: np.ndarray, *, title: str, tokens: Sequence[str] | None = None) -> go.Figure:
    """Positions × dimensions heatmap on a fixed −1..1 diverging scale; rows labelled by tokens if given, else by
    position counted from 1, as every page counts positions."""
    z = rounded(table)
    m = max(1.0, symmetric_range(z))
    fig = go.Figure(
        go.Heatmap(
            z=z,
            y=list(range(1, z.shape[0] + 1)),  # positions counted from 1, with tokens or without
            colorscale=DIVERGING_SCALE,
            zmin=-m,
            zmax=m,
            zmid=0.0,
            colorbar=dict(title=dict(text="value")),
            hovertemplate="position %{y}<br>dim %{x}<br>%{z:.4f}<extra></extra>",
        )
    )
    base_layout(fig, title, height=int(min(900, max(320, 8 * z.shape[0] + 160))))
    fig.update_xaxes(title=dict(text="dimension"), showgrid=False)
    if tokens is not None:
        fig.update_yaxes(**token_axis(tokens, "position (token)", first=1))
    else:
        fig.update_yaxes(title=dict(text="position"), showgrid=False)
    fig.update_yaxes(autorange="reversed")
    return fig


def pe_curves(table: np.ndarray, dims: Sequence[int], *, title: str) -> go.Figure:
    """PE value against position (counted from 1), one line per chosen dimension."""
    fig = go.Figure()
    positions = list(range(1, table.shape[0] + 1))
    for d in dims:
        fig.add_trace(
            go.Scatter(
                x=positions,
                y=rounded(table[:, d]),
                mode="lines",
                name=f"dim {d}",
                hovertemplate=f"dim {d}<br>position %{{x}}: %{{y:.4f}}<extra></extra>",
            )
        )
    base_layout(fig, title, height=360)
    fig.update_layout(plot_bgcolor="white", legend=dict(orientation="h", y=-0.2))
    fig.update_xaxes(title=dict(text="position"))
    fig.update_yaxes(title=dict(text="PE value"), range=[-1.1, 1.1])
    return fig


def pe_similarity(table: np.ndarray, *, title: str, cosine: bool = False) -> go.Figure:
    """Dot products PE[i]·PE[j] between positions (nearby positions are more alike), or with ``cosine`` their
    cosine similarity (for a learned table, whose rows' lengths differ), on a fixed −1..1 scale."""
    if cosine:
        unit = table / np.maximum(np.linalg.norm(table, axis=1, keepdims=True), 1e-12)
        sim, name, extra = rounded(unit @ unit.T), "cosine", dict(zmin=-1.0, zmax=1.0)
    else:
        sim, name, extra = rounded(table @ table.T), "PE·PE", {}
    counted = list(range(1, sim.shape[0] + 1))  # positions counted from 1
    fig = go.Figure(
        go.Heatmap(
            z=sim,
            x=counted,
            y=counted,
            colorscale="Viridis",
            colorbar=dict(title=dict(text=name)),
            hovertemplate="positions %{y} and %{x}<br>%{z:.3f}<extra></extra>",
            **extra,
        )
    )
    base_layout(fig, title, height=460)
    fig.update_xaxes(title=dict(text="position j"), showgrid=False, scaleanchor="y")
    fig.update_yaxes(title=dict(text="position i"), showgrid=False, autorange="reversed")
    return fig
