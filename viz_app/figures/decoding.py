"""Pure builders for the Step-by-step and Learn pages: the beam-search tree figure, the word-level difference of
two translations, matrix excerpts and a numpy LayerNorm. Nothing here knows about Streamlit (a test checks it).

Conventions as in ``figures``: steps, ranks, layers and heads are 1-based on screen; values are rounded to
``DECIMALS`` before they are sent to the browser.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from core.bundle import BeamTree
from viz_app.figures import DECIMALS, FONT, SPECIAL, token_label, token_text

KEPT, FINISHED, PRUNED, WINNER, SELECTED = "#457b9d", "#2a9d8f", "#c5c9ce", "#e4572e", "#1d1d1d"
LABELLED_STEPS = 16  # up to this many steps every kept hypothesis is labelled; beyond, only the winner's path


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
    data: list[go.BaseTraceType] = []
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
# ----------------------------------------------------------------------------- learn: numbers
def excerpt(matrix: np.ndarray, rows: int = 8, cols: int = 8) -> tuple[np.ndarray, str]:
    """The top-left ``rows`` × ``cols`` corner of ``matrix`` (2-D) and a note saying what was left out ('' when
    nothing was)."""
    m = np.atleast_2d(np.asarray(matrix))
    r, c = m.shape
    part = m[:rows, :cols]
    if (r, c) == part.shape:
        return part, ""
    return part, f"its first {part.shape[0]} of {r} rows and {part.shape[1]} of {c} columns"


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm over the last axis, as torch computes it (biased variance), in float64."""
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * np.asarray(weight, np.float64) + np.asarray(bias, np.float64)


def max_difference(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a − b| (0 for empty arrays)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b), initial=0.0))


def vector_columns(n: int, prefix: str = "d") -> list[str]:
    """1-based column names for the entries of a vector: d1, d2, …"""
    return [f"{prefix}{j + 1}" for j in range(n)]


def rounded_frame_values(matrix: np.ndarray, decimals: int = DECIMALS) -> np.ndarray:
    """float64 copy rounded for display tables."""
    return np.round(np.asarray(matrix, dtype=np.float64), decimals)
