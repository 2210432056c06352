"""The Model map page's figures: the flow (``viz_app.figures.model_flow.flow_nodes``) drawn like the paper's figure 1,
turned to read top to bottom — the encoder on the left, the decoder on the right, the memory carried across to every
cross-attention — and the recorded values of one block (a heatmap with each token's norm)."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from viz_app.figures.model_flow import FlowNode, cut, shape_text
from viz_app.figures.style import DIVERGING_SCALE, FONT, base_layout, rounded, symmetric_range, token_labels

FILL = {  # one colour per kind of block
    "tokens": "#fff3c4",
    "embedding": "#ffe08a",
    "attention": "#cfe3f5",
    "cross": "#e2d4f0",
    "ssru": "#d6eadf",
    "norm": "#ececec",
    "ffn": "#d9f0c9",
    "layer": "#dfe6ee",
    "memory": "#f6d5c4",
    "output": "#fbd9b5",
}
ROW_PX = 82  # height of one row of the flow
BOX = 0.84  # a box's height, in rows
LINE = 0.26  # a box's lines: this far apart, in rows
DETAIL_FONT = dict(size=12, color="#444")
LEFT, RIGHT = (0.0, 0.9), (1.1, 2.0)  # the two columns' x extents; the memory's bus runs at x = 1.0


# ----------------------------------------------------------------------------- the flow, drawn
def _layout_rows(nodes: Sequence[FlowNode]) -> dict[str, tuple[float, float, float]]:
    """key -> (x0, x1, y): each column top to bottom, one row per node."""
    place: dict[str, tuple[float, float, float]] = {}
    count = {"encoder": 0, "decoder": 0}
    for n in nodes:
        x0, x1 = LEFT if n.column == "encoder" else RIGHT
        place[n.key] = (x0, x1, -float(count[n.column]))
        count[n.column] += 1
    return place


def _hover(n: FlowNode) -> str:
    lines = [f"<b>{html.escape(n.label)}</b>"]
    lines += [f"{html.escape(r.name)}  ({', '.join(r.dims)}) = {shape_text(r.shape)}" for r in n.rows]
    lines.append(f"parameters: {n.parameters:,}" + (f" = {n.formula}" if n.parameters else ""))
    if n.shared:
        lines.append(html.escape(n.shared))
    return "<br>".join(lines)


def _params(n: FlowNode) -> str:
    if n.shared:
        return f"{n.parameters:,} + shared" if n.parameters else "shared: 0 new"
    return f"{n.parameters:,} params" if n.parameters else "no parameters"


def flow_figure(nodes: Sequence[FlowNode], *, title: str, selected: str | None = None) -> go.Figure:
    """The model as boxes, the encoder on the left and the decoder on the right, each read top to bottom; each box
    shows its block, its output's shape at this sentence's sizes (bold) and its parameter count; the memory runs
    across to every cross-attention. One invisible marker row per box carries its key (``customdata``) for hover
    and click selection; ``selected`` is outlined."""
    place = _layout_rows(nodes)
    fig = go.Figure()
    shapes: list[dict] = []
    notes: list[dict] = []
    xs, ys, keys, hovers = [], [], [], []
    for i, n in enumerate(nodes):
        x0, x1, y = place[n.key]
        picked = n.key == selected
        shapes.append(
            dict(
                type="rect",
                x0=x0,
                x1=x1,
                y0=y - BOX / 2,
                y1=y + BOX / 2,
                fillcolor=FILL[n.kind],
                line=dict(color="#d1495b" if picked else "#6b7785", width=4 if picked else 1),
                layer="below",
            )
        )
        # three lines, each the box's width (about 280 px at 1024 px wide): the block; its output's shape and its
        # parameters; what it does (the hover has every tensor)
        notes += [
            dict(x=x0 + 0.015, y=y + LINE, text=f"<b>{html.escape(n.label)}</b>", xanchor="left", font=dict(size=14)),
            dict(x=x0 + 0.015, y=y, text=f"<b>{n.shape_text}</b>", xanchor="left", font=dict(size=13, color="#1d3557")),
            dict(x=x1 - 0.015, y=y, text=_params(n), xanchor="right", font=dict(size=12, color="#333")),
        ]
        if n.detail:
            notes.append(dict(x=x0 + 0.015, y=y - LINE, text=cut(n.detail), xanchor="left", font=DETAIL_FONT))
        following = nodes[i + 1] if i + 1 < len(nodes) else None
        if following is not None and following.column == n.column:
            notes.append(_arrow(x=(x0 + x1) / 2, y_from=y - BOX / 2, y_to=y - 1 + BOX / 2))
        for k in range(9):  # a row of markers across the box: a click anywhere on it picks the block
            xs.append(x0 + (x1 - x0) * (k + 0.5) / 9)
            ys.append(y)
            keys.append(n.key)
            hovers.append(_hover(n))
    _memory_bus(nodes, place, shapes, notes)
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            mode="markers",
            marker=dict(size=30, symbol="square", color="rgba(0,0,0,0)"),
            customdata=keys,
            hovertext=hovers,
            hovertemplate="%{hovertext}<extra></extra>",
            showlegend=False,
            name="blocks",
        )
    )
    for text, x in (("ENCODER", sum(LEFT) / 2), ("DECODER", sum(RIGHT) / 2)):
        notes.append(dict(x=x, y=0.75, text=f"<b>{text}</b>", font=dict(size=16, color="#555")))
    for note in notes:
        note.setdefault("showarrow", False)
        note.setdefault("yanchor", "middle")
    rows = max(-place[n.key][2] for n in nodes) + 1
    base_layout(fig, title, height=int(rows * ROW_PX + 30))
    fig.update_layout(shapes=shapes, annotations=notes, hovermode="closest", clickmode="event+select", dragmode=False)
    fig.update_xaxes(visible=False, range=[-0.02, 2.02], fixedrange=True)
    fig.update_yaxes(visible=False, range=[-rows + 0.5, 1.0], fixedrange=True)
    return fig


def _arrow(*, x: float, y_from: float, y_to: float, x_from: float | None = None) -> dict:
    return dict(
        x=x,
        y=y_to,
        ax=x if x_from is None else x_from,
        ay=y_from,
        xref="x",
        yref="y",
        axref="x",
        ayref="y",
        text="",
        showarrow=True,
        arrowhead=2,
        arrowsize=1.2,
        arrowwidth=1.6,
        arrowcolor="#555",
    )


def _memory_bus(
    nodes: Sequence[FlowNode], place: dict[str, tuple[float, float, float]], shapes: list[dict], notes: list[dict]
) -> None:
    """The memory's line from the encoder's last box to every cross-attention (or decoder layer drawn as one box)."""
    targets = [n for n in nodes if n.key.endswith(".cross_attn") or (n.kind == "layer" and n.column == "decoder")]
    if "memory" not in place or not targets:
        return
    bus = (LEFT[1] + RIGHT[0]) / 2
    _, x1, y_mem = place["memory"]
    ys = [place[n.key][2] for n in targets]
    line = dict(type="line", line=dict(color="#c0504d", width=2.5), layer="below")
    shapes.append({**line, "x0": x1, "x1": bus, "y0": y_mem, "y1": y_mem})
    shapes.append({**line, "x0": bus, "x1": bus, "y0": min(ys + [y_mem]), "y1": max(ys + [y_mem])})
    for y in ys:
        notes.append({**_arrow(x=RIGHT[0], y_from=y, y_to=y, x_from=bus), "arrowcolor": "#c0504d"})


def activation_figure(
    values: np.ndarray,
    tokens: Sequence[str],
    *,
    title: str,
    columns: str = "dimension",
    scale: str = DIVERGING_SCALE,
) -> go.Figure:
    """A recorded tensor (T, D) as a heatmap (rows = tokens, columns = dimensions) beside each token's L2 norm."""
    z = rounded(values)
    norms = np.linalg.norm(np.nan_to_num(np.asarray(values, dtype=np.float64)), axis=-1)
    rows = [f"{i + 1} {t}" for i, t in enumerate(token_labels(tokens))]
    fig = make_subplots(
        rows=1, cols=2, shared_yaxes=True, column_widths=[0.8, 0.2], horizontal_spacing=0.02,
        subplot_titles=(f"values ({z.shape[0]} × {z.shape[1]})", "norm per token"),
    )  # fmt: skip
    diverging = scale == DIVERGING_SCALE
    half = symmetric_range(z)
    fig.add_trace(
        go.Heatmap(
            z=z,
            x=list(range(1, z.shape[1] + 1)),
            y=rows,
            colorscale=scale,
            zmid=0.0 if diverging else None,
            zmin=-half if diverging else None,
            zmax=half if diverging else None,
            colorbar=dict(x=1.02, len=0.9, thickness=12),
            hovertemplate=f"%{{y}}<br>{columns} %{{x}}<br>value %{{z:.4f}}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Bar(
            x=np.round(norms, 3),
            y=rows,
            orientation="h",
            marker_color="#457b9d",
            text=[f"{v:.2f}" for v in norms],
            textposition="auto",
            hovertemplate="%{y}: ‖x‖ = %{x:.3f}<extra></extra>",
            showlegend=False,
        ),
        row=1,
        col=2,
    )
    base_layout(fig, title, height=int(max(240, 26 * z.shape[0] + 120)))
    fig.update_layout(margin=dict(l=90))
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=13), row=1, col=1)
    fig.update_xaxes(title=dict(text=columns), row=1, col=1)
    fig.update_layout(font=FONT)
    return fig
