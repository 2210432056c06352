"""Pure Plotly builders for "What does each head do?": a statistic per head, and word alignments."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from viz_app.figures import DECIMALS, HOVER_TEXT_MAX, WEIGHTS_SCALE, base_layout, token_axis

SHORT = {  # a label's few letters, written in its square
    "previous-token": "prev",
    "next-token": "next",
    "self/diagonal": "self",
    "EOS sink": "eos",
    "first-token sink": "1st",
    "punctuation": "punct",
    "broad/uniform": "broad",
    "alignment": "align",
}


def stat_heatmap(
    matrix: np.ndarray,
    *,
    title: str,
    value_name: str,
    labels: Mapping[tuple[int, int], Sequence[str]] | None = None,
    zmax: float | None = None,
    reverse: bool = False,
) -> go.Figure:
    """(layers, heads) values of one statistic, each square carrying its heads' labels (short) and, on hover,
    the value and the labels in full. NaN (undefined for this kind) is left blank. ``reverse``: low is dark
    (for error rates)."""
    n_layers, n_heads = matrix.shape
    z = np.round(matrix.astype(np.float64), DECIMALS)
    labels = labels or {}
    finite = z[np.isfinite(z)]
    top = zmax if zmax is not None else (float(finite.max()) if finite.size else 1.0)
    hover, text = [], []
    for layer in range(n_layers):
        hover_row, text_row = [], []
        for h in range(n_heads):
            found = list(labels.get((layer, h), ()))
            value = "not defined for this kind" if np.isnan(z[layer, h]) else f"{value_name} {z[layer, h]:.3f}"
            hover_row.append(f"layer {layer + 1} · head {h + 1}<br>{value}<br>{', '.join(found) or 'no label'}")
            text_row.append(" ".join(SHORT.get(x, x) for x in found))
        hover.append(hover_row)
        text.append(text_row)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[f"H{h + 1}" for h in range(n_heads)],
            y=[f"L{layer + 1}" for layer in range(n_layers)],
            customdata=hover,
            text=text,
            texttemplate="%{text}",
            textfont=dict(size=10),
            hovertemplate="%{customdata}<extra></extra>",
            colorscale=WEIGHTS_SCALE + ("_r" if reverse else ""),
            zmin=0.0,
            zmax=max(top, 1e-6),
            xgap=2,
            ygap=2,
            colorbar=dict(title=dict(text=value_name)),
        )
    )
    base_layout(fig, title, height=int(max(220, 38 * n_layers + 150)))
    fig.update_yaxes(autorange="reversed")
    return fig


def alignment_links(
    src_words: Sequence[str],
    tgt_words: Sequence[str],
    links: set[tuple[int, int]],
    *,
    title: str,
    gold: tuple[set[tuple[int, int]], set[tuple[int, int]]] | None = None,
) -> go.Figure:
    """The source sentence above, the translation below, a line per link (source word i, target word j).

    With ``gold`` (sure, possible): links that are sure are solid green, possible dashed green, wrong red;
    gold links the heads missed are grey dotted."""
    n = max(len(src_words), len(tgt_words), 1)
    xs = np.linspace(0, n - 1, len(src_words)) if len(src_words) > 1 else np.array([0.0])
    xt = np.linspace(0, n - 1, len(tgt_words)) if len(tgt_words) > 1 else np.array([0.0])
    fig = go.Figure()
    sure, possible = gold if gold is not None else (set(), set())

    groups: dict[tuple[str, str, str], list[tuple[int, int]]] = {}  # one trace per colour and dash, not per link

    def line(i: int, j: int, colour: str, dash: str, name: str) -> None:
        groups.setdefault((colour, dash, name), []).append((i, j))

    for i, j in sorted(links):
        if gold is None:
            line(i, j, "#1f77b4", "solid", "link")
        elif (i, j) in sure:
            line(i, j, "#2a9d3f", "solid", "sure in gold")
        elif (i, j) in possible:
            line(i, j, "#2a9d3f", "dash", "possible in gold")
        else:
            line(i, j, "#d62728", "solid", "not in gold")
    for i, j in sorted(sure - links):
        line(i, j, "#9a9a9a", "dot", "gold link missed")
    for (colour, dash, name), pairs in groups.items():
        x: list[float | None] = []
        y: list[float | None] = []
        text: list[str] = []
        for i, j in pairs:  # segments separated by gaps (None)
            label = f"{src_words[i]} → {tgt_words[j]} ({name})"
            x += [float(xs[i]), float(xt[j]), None]
            y += [1, 0, None]
            text += [label, label, ""]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines",
                line=dict(color=colour, width=2.5, dash=dash),
                hoverinfo="text",
                text=text,
                name=name,
                showlegend=False,
            )
        )
    for y, xpos, words in ((1, xs, src_words), (0, xt, tgt_words)):
        fig.add_trace(
            go.Scatter(
                x=list(xpos),
                y=[y] * len(words),
                mode="markers+text",
                text=list(words),
                textposition="top center" if y == 1 else "bottom center",
                marker=dict(size=7, color="#333"),
                hoverinfo="text",
                showlegend=False,
            )
        )
    base_layout(fig, title, height=300)
    fig.update_xaxes(visible=False, range=[-0.8, n - 0.2])
    fig.update_yaxes(visible=False, range=[-0.5, 1.5])
    return fig


def alignment_matrix(
    matrix: np.ndarray, src_words: Sequence[str], tgt_words: Sequence[str], links: set[tuple[int, int]], *, title: str
) -> go.Figure:
    """(target words, source words) weights, with a dot on each link. Beyond ``HOVER_TEXT_MAX`` cells the hover
    names word positions (1-based, as the axes do) instead of the words, and long axes label every k-th word."""
    z = np.round(matrix.astype(np.float64), DECIMALS)
    large = z.size > HOVER_TEXT_MAX
    first = 1 if large else 0  # 1-based coordinates where the hover names positions
    cells: dict[str, Any] = (
        dict(hovertemplate="target word %{y} ← source word %{x}<br>share %{z:.3f}<extra></extra>")
        if large
        else dict(
            customdata=[[f"{t} ← {s}" for s in src_words] for t in tgt_words],
            hovertemplate="%{customdata}<br>share %{z:.3f}<extra></extra>",
            xgap=1,
            ygap=1,
        )
    )
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(first, len(src_words) + first)),
            y=list(range(first, len(tgt_words) + first)),
            colorscale=WEIGHTS_SCALE,
            zmin=0.0,
            zmax=1.0,
            colorbar=dict(title=dict(text="share")),
            **cells,
        )
    )
    if links:
        i, j = zip(*sorted(links), strict=True)
        fig.add_trace(
            go.Scatter(
                x=[v + first for v in i],
                y=[v + first for v in j],
                mode="markers",
                marker=dict(color="#e4572e", size=8 if not large else 5),
                hoverinfo="skip",
                name="link",
            )
        )
    base_layout(fig, title, height=int(min(700, max(260, 26 * len(tgt_words) + 170))))
    fig.update_xaxes(**token_axis(src_words, "source word", first=first), tickangle=-45)
    fig.update_yaxes(**token_axis(tgt_words, "target word", first=first), autorange="reversed")
    fig.update_layout(showlegend=False)
    return fig
