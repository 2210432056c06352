"""The logit lens as a figure: decoder layers × output steps, each cell coloured by the probability that layer's
lens gives the piece finally chosen, its top piece written in it and its top five on hover. Pure."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from viz_app.figures.style import WEIGHTS_SCALE, base_layout, token_label

CELL = 40  # px per layer row
MIN_HEIGHT = 300  # px: a two-layer decoder's grid keeps room for its axis labels and colour bar


def lens_grid(
    chosen_prob: np.ndarray,
    top_pieces: Sequence[Sequence[Sequence[str]]],
    top_probs: np.ndarray,
    chosen: Sequence[str],
    *,
    title: str,
) -> go.Figure:
    """``chosen_prob`` (L, T), ``top_pieces`` (L, T, k), ``top_probs`` (L, T, k); rows are layers, the last at the
    top (as the stream rises), columns the output steps named by the chosen pieces."""
    n_layers, steps = chosen_prob.shape
    x = [f"{t + 1} {token_label(p)}" for t, p in enumerate(chosen)]
    y = [f"L{layer + 1}" for layer in range(n_layers)]
    text = [[token_label(top_pieces[layer][t][0]) for t in range(steps)] for layer in range(n_layers)]
    hover = [
        [
            f"layer {layer + 1} · step {t + 1} (chosen: {token_label(chosen[t])}, p {chosen_prob[layer, t]:.3f})<br>"
            + "<br>".join(
                f"{token_label(piece)} {p:.3f}"
                for piece, p in zip(top_pieces[layer][t], top_probs[layer, t], strict=True)
            )
            for t in range(steps)
        ]
        for layer in range(n_layers)
    ]
    fig = go.Figure(
        go.Heatmap(
            z=np.round(chosen_prob, 4),
            x=x,
            y=y,
            text=text,
            texttemplate="%{text}",
            hovertext=hover,
            hoverinfo="text",
            colorscale=WEIGHTS_SCALE,
            zmin=0.0,
            zmax=1.0,
            colorbar=dict(title="p(chosen)", thickness=12),
            xgap=1,
            ygap=1,
        )
    )
    fig.update_xaxes(title="output step (the piece finally chosen)", tickangle=-45)
    fig.update_yaxes(title="decoder layer")
    return base_layout(fig, title, max(MIN_HEIGHT, 160 + CELL * n_layers))
