"""The Step-by-step page: every head's row at one step, the top-k candidates, the beam-search tree.

Conventions as in ``figures.style``: steps, ranks, layers and heads are 1-based on screen; values are rounded to
``DECIMALS`` before they are sent to the browser.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.basedatatypes import BaseTraceType

from core.results import BeamTree
from viz_app.figures.style import (
    FONT,
    NARROW_TITLE,
    SPECIAL,
    WEIGHTS_SCALE,
    base_layout,
    rounded,
    share,
    token_axis,
    token_label,
    token_text,
    unique_labels,
    weight_scale,
)

KEPT, FINISHED, PRUNED, WINNER, SELECTED = "#457b9d", "#2a9d8f", "#c5c9ce", "#e4572e", "#1d1d1d"
LABELLED_STEPS = 16  # up to this many steps every kept hypothesis is labelled; beyond, only the winner's path


def step_attention(
    rows: Sequence[np.ndarray],
    key_tokens: Sequence[str],
    *,
    title: str,
    fixed_scale: bool = True,
) -> go.Figure:
    """At one decoding step: every layer/head's attention row (y = 'L1 H1' …, x = keys)."""
    z = rounded(np.concatenate(list(rows), axis=0))  # (L*H, n_key)
    n_heads = rows[0].shape[0]
    labels = [f"L{l + 1} H{h + 1}" for l in range(len(rows)) for h in range(n_heads)]
    top, named = weight_scale(z, fixed=fixed_scale)  # 0..1, or stretched (the colour bar says which)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(z.shape[1])),
            y=labels,
            colorscale=WEIGHTS_SCALE,
            zmin=0.0,
            zmax=top,
            xgap=1,
            ygap=1,
            customdata=[unique_labels(key_tokens)] * z.shape[0],
            hovertemplate="%{y}<br>key %{customdata}<br>weight %{z:.4f}<extra></extra>",
            colorbar=dict(title=dict(text=named)),
        )
    )
    base_layout(fig, title, height=int(max(260, 18 * z.shape[0] + 170)))
    fig.update_xaxes(**token_axis(key_tokens, "key"), tickangle=-60)
    fig.update_yaxes(autorange="reversed", showgrid=False, tickfont=dict(size=10))
    return fig


# ----------------------------------------------------------------------------- decoding
def topk_bars(top_k: Sequence[tuple[str, float]], chosen: str, *, title: str) -> go.Figure:
    """Horizontal bars of the top-k next-token candidates; the chosen piece is highlighted. When the best one
    takes nearly everything the axis is logarithmic, so the others stay visible (with their exact shares)."""
    labels = [f"{r + 1}. {token_label(p)}" for r, (p, _) in enumerate(top_k)]
    probs = [float(f"{float(q):.4g}") for _, q in top_k]  # four significant digits: small ones stay non-zero
    colours = ["#e4572e" if p == chosen else "#5fa8d3" for p, _ in top_k]
    fig = go.Figure(
        go.Bar(
            x=probs,
            y=labels,
            orientation="h",
            marker_color=colours,
            text=[share(q) for q in probs],
            textposition="auto",
            hovertemplate="%{y}: %{x:.3g}<extra></extra>",
        )
    )
    base_layout(fig, title, height=max(260, 26 * len(labels) + 110), wrap=NARROW_TITLE)  # a third of the page
    fig.update_layout(plot_bgcolor="white")
    positive = [q for q in probs if q > 0]
    if positive and min(positive) < max(positive) / 100:
        low = np.log10(min(positive)) - 0.3
        fig.update_xaxes(title=dict(text="probability (log scale)"), type="log", range=[low, 0.05])
    else:
        fig.update_xaxes(title=dict(text="probability"), range=[0, max(probs + [0.01]) * 1.1])
    fig.update_yaxes(autorange="reversed", type="category")
    return fig


# ----------------------------------------------------------------------------- beam tree
def hypothesis_text(tree: BeamTree, ids: Sequence[int]) -> str:
    """A hypothesis as text: its pieces joined, word starts as spaces ('O gato </s>'); '∅' when it has none."""
    text = "".join(token_text(tree.piece(i)) if tree.piece(i) in SPECIAL else tree.piece(i) for i in ids)
    return " ".join(text.replace("▁", " ").replace("</s>", " </s>").split()) or "∅"


def node_status(tree: BeamTree, step: int, candidate: int) -> str:
    """'finished' (kept, ends in eos), 'kept' or 'pruned'."""
    s = tree.steps[step]
    if candidate >= s.n_kept:
        return "pruned"
    return "finished" if bool(s.finished[candidate]) else "kept"


def beam_tree(tree: BeamTree, *, title: str, selected: tuple[int, int] | None = None) -> go.Figure:
    """Every hypothesis beam search weighed: x = step, y = its rank at that step (1 = best score), one dot per
    hypothesis, a line from each to the hypothesis it extends. Kept ones in blue (◆ green when finished with
    eos), the pruned next best in grey, the winner's path in red; the first step where greedy decoding would
    have chosen another piece is marked. Each dot carries ``customdata`` [step, candidate] (0-based) for
    click selection; ``selected`` (step, candidate) is ringed."""
    winner = tree.winner_path
    on_path = set(enumerate(winner))
    groups: dict[str, dict[str, list[Any]]] = {
        name: {"x": [], "y": [], "text": [], "hover": [], "custom": []} for name in ("pruned", "kept", "finished")
    }
    edges: dict[str, tuple[list[float | None], list[float | None]]] = {"pruned": ([], []), "kept": ([], [])}
    label_all = len(tree.steps) <= LABELLED_STEPS
    for t, s in enumerate(tree.steps):
        for j in range(len(s.candidate_ids)):
            status = node_status(tree, t, j)
            piece = tree.piece(int(s.candidate_ids[j]))
            g = groups[status]
            g["x"].append(t + 1)
            g["y"].append(j + 1)
            g["text"].append(token_label(piece) if status != "pruned" and (label_all or (t, j) in on_path) else "")
            g["hover"].append(
                f"step {t + 1} · rank {j + 1} · {status}<br>piece <b>{token_label(piece)}</b> · "
                f"log p {float(s.candidate_logp[j]):.3f}<br>score {float(s.candidate_scores[j]):.3f}<br>"
                f"{html.escape(hypothesis_text(tree, s.path(j)), quote=False)}"
            )
            g["custom"].append([t, j])
            parent = tree.parent_candidate(t, j)
            if parent is not None:
                xs, ys = edges["pruned" if status == "pruned" else "kept"]
                xs += [t, t + 1, None]
                ys += [parent + 1, j + 1, None]
    data: list[BaseTraceType] = []
    for name, colour, width in (("pruned", PRUNED, 1), ("kept", "#a8c5da", 1.5)):
        xs, ys = edges[name]
        data.append(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                line=dict(color=colour, width=width),
                hoverinfo="skip",
                name=f"{name} links",
                showlegend=False,
            )
        )
    if winner:
        data.append(
            go.Scatter(
                x=[t + 1 for t in range(len(winner))],
                y=[j + 1 for j in winner],
                mode="lines",
                line=dict(color=WINNER, width=4),
                hoverinfo="skip",
                name="winner",
                legendrank=1,
            )
        )
    styles = {
        "pruned": dict(color=PRUNED, size=8, symbol="circle"),
        "kept": dict(color=KEPT, size=12, symbol="circle"),
        "finished": dict(color=FINISHED, size=14, symbol="diamond"),
    }
    names = {"pruned": "pruned", "kept": "kept", "finished": "finished (ends with &lt;/s&gt;)"}
    for name, g in groups.items():
        if not g["x"]:
            continue
        data.append(
            go.Scatter(
                x=g["x"],
                y=g["y"],
                mode="markers+text",
                text=g["text"],
                textposition="top center",
                textfont=dict(size=11, color="#333" if name != "pruned" else "#999"),
                marker=dict(**styles[name], line=dict(color="white", width=1)),
                customdata=g["custom"],
                hovertext=g["hover"],
                hovertemplate="%{hovertext}<extra></extra>",
                name=names[name],
                unselected=dict(marker=dict(opacity=1.0)),  # a click selection must not dim the other dots
            )
        )
    if winner:
        data.append(
            go.Scatter(
                x=[t + 1 for t in range(len(winner))],
                y=[j + 1 for j in winner],
                mode="markers",
                marker=dict(color="rgba(0,0,0,0)", size=17, line=dict(color=WINNER, width=2.5)),
                hoverinfo="skip",
                name="winner's path",
                showlegend=False,  # the red line's entry names it
            )
        )
    if selected is not None:
        t, j = selected
        data.append(
            go.Scatter(
                x=[t + 1],
                y=[j + 1],
                mode="markers",
                marker=dict(color="rgba(0,0,0,0)", size=24, line=dict(color=SELECTED, width=2.5)),
                hoverinfo="skip",
                name="selected",
            )
        )
    fig = go.Figure(data=data)
    n_ranks = max((len(s.candidate_ids) for s in tree.steps), default=1)
    shapes, notes = [], []
    d = tree.divergence
    if d is not None and d < len(tree.steps) + 1:
        greedy_piece = tree.piece(tree.greedy_ids[d]) if d < len(tree.greedy_ids) else "(ended)"
        shapes.append(
            dict(
                type="rect",
                x0=d + 0.5,
                x1=d + 1.5,
                y0=0.4,
                y1=n_ranks + 0.6,
                fillcolor="rgba(244, 162, 97, 0.18)",
                line=dict(color="#f4a261", width=1.5, dash="dot"),
                layer="below",
                name="divergence",
            )
        )
        notes.append(
            dict(
                x=d + 1,
                y=0.4,
                yref="y",
                text=f"greedy picks {token_label(greedy_piece)} here",
                showarrow=False,
                yanchor="bottom",
                font=dict(size=11, color="#b5651d"),
                name="divergence",
            )
        )
    n_steps = len(tree.steps)
    fig.update_layout(
        title=dict(text=title, x=0.0, xanchor="left", y=0.985, yanchor="top", yref="container", font=dict(size=16)),
        height=max(360, 50 * n_ranks + 200),
        font=FONT,
        margin=dict(l=10, r=10, t=100, b=10),
        plot_bgcolor="white",
        showlegend=True,
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0.0),
        shapes=shapes,
        annotations=notes,
        clickmode="event+select",
        dragmode="pan",
        hoverlabel=dict(align="left"),
        xaxis=dict(
            title=dict(text="step"),
            tickmode="array",
            tickvals=list(range(1, n_steps + 1)),
            range=[0.4, n_steps + 0.6],
            showgrid=False,
            zeroline=False,
        ),
        yaxis=dict(
            title=dict(text="rank at this step (1 = best score)"),
            tickmode="array",
            tickvals=list(range(1, n_ranks + 1)),
            range=[n_ranks + 0.7, 0.2],  # rank 1 at the top
            showgrid=True,
            gridcolor="#f1f3f5",
            zeroline=False,
        ),
    )
    return fig


def beam_summary(tree: BeamTree) -> str:
    """One sentence on where greedy decoding and the beam's winner part ways (plain text with ‘’ quotes)."""
    d = tree.divergence
    if d is None:
        return "Greedy decoding picks the same piece as the winning beam at every step: here both agree."
    beam_piece = token_text(tree.piece(tree.output_ids[d])) if d < len(tree.output_ids) else "(end)"
    greedy_piece = token_text(tree.piece(tree.greedy_ids[d])) if d < len(tree.greedy_ids) else "(end)"
    return (
        f"Greedy decoding and the winning beam part ways at step {d + 1}: greedy takes the most likely piece "
        f"‘{greedy_piece}’, the beam's winner has ‘{beam_piece}’, whose whole sentence scored better in the end."
    )


# ----------------------------------------------------------------------------- "what if"
