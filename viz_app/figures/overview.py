"""The Overview page's SSRU gates and the translation header's as-trained vs switched log-probabilities."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from viz_app.figures.style import LEGEND_NAME, LEGEND_ROW, base_layout, rounded, titled, token_axis


def ssru_gates(gates: np.ndarray, tokens: Sequence[str], *, title: str) -> go.Figure:
    """SSRU forget gates (T, D): heatmap positions × dimensions, plus the mean gate per step; steps and dimensions
    counted from 1, as every page counts."""
    z = rounded(gates)
    steps = list(range(1, z.shape[0] + 1))
    fig = make_subplots(
        rows=2,
        cols=1,
        row_heights=[0.72, 0.28],
        vertical_spacing=0.08,
        subplot_titles=("forget gate f_t per dimension (1 = keep memory, 0 = overwrite)", "mean forget gate per step"),
    )
    fig.add_trace(
        go.Heatmap(
            z=z.T,
            x=steps,
            y=list(range(1, z.shape[1] + 1)),
            colorscale="Viridis",
            zmin=0.0,
            zmax=1.0,
            colorbar=dict(title=dict(text="f"), len=0.7, y=0.64),
            hovertemplate="step %{x}<br>dim %{y}<br>f %{z:.4f}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=rounded(z.mean(axis=1)),
            mode="lines+markers",
            line=dict(color="#1d3557"),
            hovertemplate="step %{x}: %{y:.4f}<extra></extra>",
        ),
        row=2,
        col=1,
    )
    for r in (1, 2):
        fig.update_xaxes(
            **token_axis(tokens, "decoder input" if r == 2 else "", first=1),
            tickangle=-60,
            showticklabels=r == 2,
            row=r,
            col=1,
        )
    fig.update_yaxes(title=dict(text="dimension"), row=1, col=1)
    fig.update_yaxes(range=[0, 1], row=2, col=1)
    fig.update_layout(showlegend=False)
    return base_layout(fig, title, height=560)


def token_logprob_bars(tokens: Sequence[str], p_trained: np.ndarray, p_switched: np.ndarray, *, note: str) -> go.Figure:
    """Grouped bars: each output piece's log-probability as trained and with the switches (same decoder inputs)."""
    floor = -30.0  # log(0) would be -inf: drawn at the floor, with the exact value on hover
    lp = [np.maximum(np.log(np.clip(p, 1e-300, None)), floor) for p in (p_trained, p_switched)]
    x = [f"{i + 1} {html.escape(t)}" for i, t in enumerate(tokens)]
    switched = note if len(note) <= LEGEND_NAME else "with the switches"  # the title names them all
    fig = go.Figure(
        [
            go.Bar(x=x, y=lp[0], name="as trained", marker_color="#4c72b0", customdata=p_trained),
            go.Bar(x=x, y=lp[1], name=html.escape(switched), marker_color="#dd8452", customdata=p_switched),
        ]
    )
    fig.update_traces(hovertemplate="%{x}<br>log p %{y:.3f} (p %{customdata:.4f})<extra>%{fullData.name}</extra>")
    base_layout(
        fig,
        titled("Log-probability of each as-trained output piece: as trained (blue) and with the switches", note),
        height=320,
        top=LEGEND_ROW,
    )
    # the legend sits in its own row between the title and the plot area (inside it, it covered the last bars)
    fig.update_layout(barmode="group", legend=dict(orientation="h", x=0, xanchor="left", y=1.0, yanchor="bottom"))
    fig.update_yaxes(title=dict(text="log p"))
    return fig
