"""The Corpus page's figures: source share against mean log-probability, one point per scanned pair, coloured by
the flag; a histogram of one field. Pure: arrays in, ``go.Figure`` out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from viz_app.figures.style import NARROW_TITLE, base_layout

MAX_POINTS = 2000  # a scatter of more points is drawn from a sample (``scatter_sample``), said under it
FLAGGED, KEPT = "#d62728", "#1f77b4"


def scatter_sample(flagged: Sequence[bool], limit: int = MAX_POINTS) -> np.ndarray:
    """Indices of the points the scatter draws, in order: all of them up to ``limit``; beyond it every flagged one
    and an even sample of the rest (the same indices every time)."""
    flags = np.asarray(flagged, dtype=bool)
    if len(flags) <= limit:
        return np.arange(len(flags))
    picked = np.flatnonzero(flags)
    rest = np.flatnonzero(~flags)
    room = max(0, limit - len(picked))
    if room and len(rest):
        rest = rest[np.linspace(0, len(rest) - 1, num=min(room, len(rest))).round().astype(int)]
    else:
        rest = rest[:0]
    return np.sort(np.concatenate([picked, rest]))


def share_scatter(
    share: Sequence[float],
    logprob: Sequence[float],
    flagged: Sequence[bool],
    lines: Sequence[int],
    sources: Sequence[str],
    *,
    threshold: float,
    title: str,
) -> go.Figure:
    """Each pair's mean source share (x) against its mean log-probability per output piece (y), flagged pairs in
    red; a dashed line at the threshold. Hover: the line number and the source's first words."""
    x, y = np.asarray(share, dtype=float), np.asarray(logprob, dtype=float)
    flags = np.asarray(flagged, dtype=bool)
    fig = go.Figure()
    for name, colour, keep in (("flagged", FLAGGED, flags), ("not flagged", KEPT, ~flags)):
        idx = np.flatnonzero(keep)
        fig.add_trace(
            go.Scatter(
                x=x[idx],
                y=y[idx],
                mode="markers",
                name=f"{name} ({len(idx):,})",
                marker=dict(color=colour, size=6, opacity=0.7),
                customdata=[[lines[int(i)], sources[int(i)][:60]] for i in idx],
                hovertemplate="line %{customdata[0]}<br>%{customdata[1]}<br>"
                "source share %{x:.3f}<br>mean log p %{y:.3f}<extra></extra>",
            )
        )
    fig.add_vline(x=threshold, line=dict(color="#555", dash="dash", width=1))
    low = min(float(x.min()) if len(x) else threshold, threshold)
    fig.update_xaxes(title="mean source share (ALTI+)", range=[max(0.0, low - 0.02), 1.0])
    fig.update_yaxes(title="mean log-probability per piece")
    base_layout(fig, title, 360, top=28)
    fig.update_layout(legend=dict(orientation="h", x=0, y=1.0, yanchor="bottom"))
    return fig


def histogram(values: Sequence[float], *, title: str, axis: str, bins: int = 30) -> go.Figure:
    """The distribution of one field over the scored pairs."""
    fig = go.Figure(go.Histogram(x=np.asarray(values, dtype=float), nbinsx=bins, marker=dict(color=KEPT)))
    fig.update_xaxes(title=axis)
    fig.update_yaxes(title="pairs")
    base_layout(fig, title, 260, wrap=NARROW_TITLE)
    fig.update_layout(bargap=0.05)
    return fig
