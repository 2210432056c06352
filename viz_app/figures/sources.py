"""Pure Plotly builders for the "Source or prefix?" tab: each output word's source share (ALTI+), and its source map
beside cross-attention, rollout and integrated gradients."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from viz_app.figures.explain import output_source_text
from viz_app.figures.style import DECIMALS, base_layout, token_axis, unique_labels

SOURCE_COLOUR, LOW_COLOUR = "#2f6fab", "#e07b39"  # a word's source share; one below the threshold


def source_share_bars(tokens: Sequence[str], shares: np.ndarray, threshold: float | None, *, title: str) -> go.Figure:
    """One bar per output token: its source share (0-1; the rest is the prefix's). Bars below ``threshold`` are
    drawn in ``LOW_COLOUR`` and the threshold as a dashed line (None: no threshold known yet)."""
    values = np.round(np.asarray(shares, dtype=np.float64), DECIMALS)
    low = [threshold is not None and v < threshold for v in values]
    labels = unique_labels(tokens)
    fig = go.Figure(
        go.Bar(
            x=list(range(len(tokens))),
            y=values,
            marker_color=[LOW_COLOUR if is_low else SOURCE_COLOUR for is_low in low],
            text=[
                f"{labels[t]}<br>source {values[t]:.3f} · prefix {1 - values[t]:.3f}"
                + ("<br>below the threshold" if low[t] else "")
                for t in range(len(tokens))
            ],
            hovertemplate="%{text}<extra></extra>",
            textposition="none",
            name="source share",
        )
    )
    base_layout(fig, title, height=340)
    if threshold is not None:  # the line's label in the right margin, where no bar can be under it
        fig.add_hline(y=threshold, line=dict(dash="dash", color=LOW_COLOUR))
        fig.add_annotation(
            text=f"threshold<br>{threshold:.2f}",
            xref="paper",
            x=1.0,
            xanchor="left",
            xshift=4,
            yref="y",
            y=threshold,
            showarrow=False,
            align="left",
            font=dict(color=LOW_COLOUR, size=11),
        )
        fig.update_layout(margin=dict(r=80))
    fig.update_xaxes(**token_axis(tokens, "output token"), tickangle=-60)
    fig.update_yaxes(title=dict(text="source share"), range=[0, 1.02])
    return fig


def source_maps(
    maps: Mapping[str, np.ndarray], output_tokens: Sequence[str], src_tokens: Sequence[str], *, title: str
) -> go.Figure:
    """Side-by-side (T, S) maps, one panel per measure, each row scaled to sum to 1 (a row of zeros stays 0) so the
    panels share one colour scale: where each output word's source part comes from, by each measure."""
    names = list(maps)
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=names, shared_yaxes=True, horizontal_spacing=0.03)
    for col, name in enumerate(names, start=1):
        z = row_shares(maps[name])
        text = output_source_text(output_tokens, src_tokens, z, head=f"{name}<br>")
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=list(range(z.shape[1])),
                y=list(range(z.shape[0])),
                text=text,
                hovertemplate="%{text}<extra></extra>",
                coloraxis="coloraxis",
                xgap=1,
                ygap=1,
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(**token_axis(src_tokens, "source token", scale=len(names)), tickangle=-60, row=1, col=col)
    height = int(min(1400, max(360, 22 * len(output_tokens) + 200)))
    base_layout(fig, title, height=height)
    fig.update_layout(coloraxis=dict(colorscale="Blues", cmin=0.0, cmax=1.0, colorbar=dict(title=dict(text="share"))))
    fig.update_yaxes(autorange="reversed")
    fig.update_yaxes(**token_axis(output_tokens, "output token"), row=1, col=1)
    return fig


def row_shares(matrix: np.ndarray) -> np.ndarray:
    """Each row of a non-negative (T, S) map divided by its sum (a row of zeros stays 0), rounded."""
    m = np.asarray(matrix, dtype=np.float64)
    total = m.sum(-1, keepdims=True)
    return np.round(np.divide(m, total, out=np.zeros_like(m), where=total > 0), DECIMALS)
