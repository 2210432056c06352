"""Pure Plotly builders for the "Why this word?" page: head importance and attention rollout."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from viz_app.figures.style import (
    DECIMALS,
    DIVERGING_SCALE,
    NARROW_TITLE,
    base_layout,
    symmetric_range,
    token_axis,
    token_label,
    unique_labels,
)


def importance_heatmap(
    matrix: np.ndarray, *, title: str, scale: float | None = None, estimate: bool = False
) -> go.Figure:
    """(layers, heads) change in the translation's log-probability when each head is switched off alone.

    Diverging around 0 (red: the translation became less likely without the head); ``scale`` = the half-width of
    the colour scale, shared between kinds so their colours compare (default: this matrix's largest |value|).
    estimate: the values are the one-pass estimate, and the colour bar and hover say so.
    """
    n_layers, n_heads = matrix.shape
    z = np.round(matrix.astype(np.float64), DECIMALS)
    m = scale if scale is not None else symmetric_range(z)
    text = [
        [
            f"layer {layer + 1} · head {h + 1}<br>Δ log p {'≈' if estimate else '='} {z[layer, h]:+.3f}"
            + (" (estimate)" if estimate else "")
            for h in range(n_heads)
        ]
        for layer in range(n_layers)
    ]
    fig = go.Figure(
        go.Heatmap(
            z=z,  # Δ log p itself, as the hover and the page's table give it; the scale reversed so that a loss
            reversescale=True,  # ("relied on": Δ < 0) is the warm end of the usual red-blue scale
            x=[f"H{h + 1}" for h in range(n_heads)],
            y=[f"L{layer + 1}" for layer in range(n_layers)],
            text=text,
            hovertemplate="%{text}<extra></extra>",
            colorscale=DIVERGING_SCALE,
            zmin=-m,
            zmax=m,
            zmid=0.0,
            xgap=2,
            ygap=2,
            colorbar=dict(title=dict(text="Δ log p<br>(estimate)" if estimate else "Δ log p")),
        )
    )
    base_layout(fig, title, height=int(max(220, 34 * n_layers + 150)), wrap=NARROW_TITLE)  # three side by side
    fig.update_yaxes(autorange="reversed")
    return fig


def output_source_text(
    output_tokens: Sequence[str],
    src_tokens: Sequence[str],
    z: np.ndarray,
    *,
    head: str = "",
    value: str = "",
    src_positions: Sequence[int] | None = None,
) -> list[list[str]]:
    """The hover text of a (Tt, Ts) output-by-source map: ``head``, the output and source token, ``value`` and z.
    src_positions: each source column's 0-based position in the sentence (default 0, 1, …)."""
    out_labels, src_labels = unique_labels(output_tokens), positioned_labels(src_tokens, src_positions)
    return [
        [f"{head}output {out_labels[t]}<br>source {src_labels[j]}<br>{value}{z[t, j]:.3f}" for j in range(z.shape[1])]
        for t in range(z.shape[0])
    ]


def positioned_labels(tokens: Sequence[str], positions: Sequence[int] | None = None) -> list[str]:
    """``unique_labels`` of ``tokens`` numbered by their 0-based ``positions`` in the sentence (1-based on show),
    so that tokens left after some columns were removed keep their own numbers."""
    if positions is None:
        return unique_labels(tokens)
    return [f"{p + 1} {token_label(t)}" for p, t in zip(positions, tokens, strict=True)]


def rollout_heatmap(
    per_output: np.ndarray,
    output_tokens: Sequence[str],
    src_tokens: Sequence[str],
    *,
    title: str,
    src_positions: Sequence[int] | None = None,
) -> go.Figure:
    """(Tt, Ts): for each output token, the share of its source-side content coming from each source token.

    The colours run from the smallest to the largest value drawn (not from 0), so that rows which differ by a
    little still look different; ``zmin`` / ``zmax`` of the trace are that range (a caption can quote them).
    src_positions: each column's 0-based position in the sentence (default 0, 1, …): with special tokens set
    aside the columns skip theirs, and the hover and numbered ticks still name each token's own position.
    """
    z = np.round(per_output.astype(np.float64), DECIMALS)
    lo, hi = (float(z.min()), float(z.max())) if z.size else (0.0, 1.0)
    text = output_source_text(output_tokens, src_tokens, z, value="share ", src_positions=src_positions)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(z.shape[1])),
            y=list(range(z.shape[0])),
            text=text,
            hovertemplate="%{text}<extra></extra>",
            colorscale="Blues",
            zmin=lo,
            zmax=max(hi, lo + 1e-6),
            xgap=1,
            ygap=1,
            colorbar=dict(title=dict(text="share")),
        )
    )
    base_layout(fig, title, height=int(min(1500, max(380, 22 * z.shape[0] + 190))))
    x_axis = token_axis(src_tokens, "source token")
    if src_positions is not None:  # a long sentence's ticks are numbered ('7 ␣cat'): by position in the sentence
        bare, named = [token_label(t) for t in src_tokens], positioned_labels(src_tokens, src_positions)
        x_axis["ticktext"] = [
            text if text == bare[i] else named[i]
            for i, text in zip(x_axis["tickvals"], x_axis["ticktext"], strict=True)
        ]
    fig.update_xaxes(**x_axis, tickangle=-60)
    fig.update_yaxes(**token_axis(output_tokens, "output token (what the decoder predicted)"), autorange="reversed")
    return fig


def labelled_heatmap(
    matrix: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    *,
    title: str,
    value_name: str,
    zmin: float = 0.0,
    zmax: float = 1.0,
) -> go.Figure:
    """A small (rows, cols) map with named rows and columns (layers, heads, tokens) and exact values on hover."""
    z = np.round(matrix.astype(np.float64), DECIMALS)
    text = [
        [f"{r} · {c}<br>{value_name} {z[i, j]:+.3f}" for j, c in enumerate(col_labels)]
        for i, r in enumerate(row_labels)
    ]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(len(col_labels))),
            y=list(range(len(row_labels))),
            text=text,
            hovertemplate="%{text}<extra></extra>",
            colorscale=DIVERGING_SCALE,
            zmin=-max(abs(zmin), abs(zmax)),
            zmax=max(abs(zmin), abs(zmax)),
            zmid=0.0,
            xgap=1,
            ygap=1,
            colorbar=dict(title=dict(text=value_name)),
        )
    )
    base_layout(fig, title, height=int(min(900, max(240, 26 * len(row_labels) + 170))))
    fig.update_xaxes(tickmode="array", tickvals=list(range(len(col_labels))), ticktext=list(col_labels), tickangle=-60)
    fig.update_yaxes(
        tickmode="array", tickvals=list(range(len(row_labels))), ticktext=list(row_labels), autorange="reversed"
    )
    return fig


def attribution_bars(
    tokens: Sequence[str], series: dict[str, np.ndarray], *, title: str, axis_title: str = "source token"
) -> go.Figure:
    """Grouped bars over ``tokens``, one group per measure, each scaled to its largest |value| (shapes compare)."""
    labels = unique_labels(tokens)
    fig = go.Figure()
    for name, values in series.items():
        top = float(np.abs(values).max()) or 1.0
        fig.add_trace(
            go.Bar(
                x=list(range(len(tokens))),
                y=np.round(values / top, DECIMALS),
                name=name,
                text=[f"{labels[j]}: {values[j]:+.4f}" for j in range(len(tokens))],
                hovertemplate="%{text}<extra>" + name + "</extra>",
                textposition="none",  # the values are in the hover, not printed on the bars
            )
        )
    base_layout(fig, title, height=400)
    # the legend stands right of the plot: below it, it ran into the rotated token labels and the axis title
    fig.update_layout(barmode="group", legend=dict(orientation="v", yanchor="top", y=1.0, xanchor="left", x=1.01))
    fig.update_xaxes(**token_axis(tokens, axis_title), tickangle=-60)
    fig.update_yaxes(title=dict(text="scaled to the largest |value|"), zeroline=True)
    return fig
