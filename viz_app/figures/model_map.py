"""The Model map page's flow: every block of the model for one sentence, top to bottom, with its tensor's shape at
this sentence's sizes and its parameter count; and the recorded values of one block (a heatmap with each token's
norm).

``flow_nodes`` is the data (one ``FlowNode`` per block, its shape a ``core.anatomy.tensor_shapes`` row, its count
from ``core.anatomy.parameter_table``); ``flow_figure`` draws it like the paper's figure 1, turned to read top to
bottom: the encoder on the left, the decoder on the right, the memory carried across to every cross-attention.
"""

from __future__ import annotations

import html
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.anatomy import ParameterTable, TensorShape
from core.sites import attention_site, layer_name
from viz_app.figures.style import DIVERGING_SCALE, FONT, base_layout, rounded, symmetric_range, token_labels

Column = str  # 'encoder' (left) or 'decoder' (right)
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
ROW_PX = 66  # height of one row of the flow
BOX = 0.78  # a box's height, in rows
LEFT, RIGHT = (0.0, 0.9), (1.1, 2.0)  # the two columns' x extents; the memory's bus runs at x = 1.0
DETAIL_CHARS = 64  # a box's second line is cut to this many characters (the hover has it whole)


@dataclass(frozen=True)
class FlowNode:
    """One block of the flow: ``shape`` is its output's (a ``tensor_shapes`` row: ``rows[-1]`` unless the block
    names another), ``rows`` every tensor it makes, ``parameters`` what it adds to the model's total (0 where
    ``shared`` says which block counts the matrix), ``site`` the Trace array that shows its values (None: not
    recorded), ``page`` the app page that explains it."""

    key: str  # 'encoder.0.self_attn', 'source.ids', 'encoder.3' (a layer drawn as one box), 'output.word'
    column: Column
    kind: str  # a FILL key
    label: str
    output: TensorShape
    rows: tuple[TensorShape, ...]
    parameters: int
    formula: str
    shared: str  # '' or 'same matrix as token embeddings (source): counted there'
    site: str | None
    page: str | None  # 'head', 'masks', 'positional', 'learn'
    detail: str = ""  # Plotly-safe text (pieces escaped by ``token_labels``)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.output.shape

    @property
    def shape_text(self) -> str:
        return shape_text(self.output.shape)


def shape_text(shape: Sequence[int]) -> str:
    """(8, 7, 32) -> '8×7×32'; (7,) -> '7'."""
    return "×".join(str(n) for n in shape) or "scalar"


def _named(rows: Sequence[TensorShape], stage: str, prefix: str) -> list[TensorShape]:
    return [r for r in rows if r.stage == stage and r.name.startswith(prefix)]


def _one(rows: Sequence[TensorShape], stage: str, name: str) -> TensorShape:
    for r in rows:
        if r.stage == stage and r.name.startswith(name):
            return r
    raise KeyError(f"tensor_shapes has no {stage!r} row {name!r}")


class _Builder:
    """Collects the nodes in the order data flows."""

    def __init__(self, shapes: Sequence[TensorShape], table: ParameterTable) -> None:
        self.shapes, self.table, self.nodes = list(shapes), table, list[FlowNode]()
        self.names = {b.name for b in table.blocks}

    def row(self, stage: str, name: str) -> TensorShape:
        """The ``stage`` row whose name starts with ``name``."""
        for r in self.shapes:
            if r.stage == stage and r.name.startswith(name):
                return r
        raise KeyError(f"tensor_shapes has no {stage!r} row {name!r}")

    def add(
        self,
        key: str,
        column: Column,
        kind: str,
        label: str,
        rows: Sequence[TensorShape],
        *,
        blocks: Sequence[str] = (),
        site: str | None = None,
        page: str | None = None,
        detail: str = "",
        shared: str = "",
    ) -> None:
        """A box whose output is ``rows[-1]``, counting the parameter ``blocks`` (those the model has)."""
        found = [self.table.block(name) for name in blocks if name in self.names]
        shared = "; ".join(
            [f"same matrix as {self.table.block(b.shared_with).label}: counted there" for b in found if b.shared_with]
            + ([shared] if shared else [])
        )
        formula = " + ".join(b.formula for b in found if b.count) or "0"
        count = sum(b.count for b in found)
        self.nodes.append(
            FlowNode(key, column, kind, label, rows[-1], tuple(rows), count, formula, shared, site, page, detail)
        )


def _attention(
    b: _Builder, stage: str, prefix: str, *, column: Column, kind: str, label: str, block: str, site: str, pre: bool
) -> None:
    """One attention sub-layer and its norm (post-norm: add & norm after; pre-norm: LayerNorm before)."""

    def row(name: str) -> TensorShape:
        return b.row(stage, f"{prefix}: {name}")

    q, kv, scores, concat = row("Q per head"), row("K per head"), row("scores"), row("heads concatenated")
    rows = [row("Q = "), q, kv, row("V per head"), scores, row("weights"), row("each head"), concat, row("output")]
    detail = (
        f"Q {shape_text(q.shape)} · K,V {shape_text(kv.shape)} · scores {shape_text(scores.shape)}"
        f" · concat {shape_text(concat.shape)}"
    )
    norm = row("add & norm")
    norm_block = f"{block}_norm"  # 'encoder.0.self_attn_norm'
    if pre:
        b.add(norm_block, column, "norm", "LayerNorm (before the sub-layer)", [norm], blocks=[norm_block])
    sub = f"{label} + residual" if pre else label
    b.add(block, column, kind, sub, rows, blocks=[block], site=f"{site}.heads", page="head", detail=detail)
    if not pre:
        b.add(
            norm_block, column, "norm", "add & norm", [norm], blocks=[norm_block], detail="LayerNorm(x + sub-layer(x))"
        )


def _ffn(b: _Builder, stage: str, column: Column, pre: bool) -> None:
    """The feed-forward sub-layer and its norm; its last box is the layer's output."""
    hidden, out = b.row(stage, "feed-forward hidden"), b.row(stage, "feed-forward output")
    layer_out = b.row(stage, "layer output")
    detail = f"{shape_text(out.shape)} → {shape_text(hidden.shape)} → {shape_text(out.shape)} (ReLU between)"
    if pre:
        b.add(
            f"{stage}.ffn_norm", column, "norm", "LayerNorm (before the sub-layer)", [out], blocks=[f"{stage}.ffn_norm"]
        )
        b.add(
            f"{stage}.ffn",
            column,
            "ffn",
            "feed-forward + residual → layer output",
            [hidden, out, layer_out],
            blocks=[f"{stage}.ffn"],
            site=layer_out.site,
            page="learn",
            detail=detail,
        )
    else:
        b.add(f"{stage}.ffn", column, "ffn", "feed-forward", [hidden, out], blocks=[f"{stage}.ffn"], detail=detail)
        b.add(
            f"{stage}.ffn_norm",
            column,
            "norm",
            "add & norm → layer output",
            [layer_out],
            blocks=[f"{stage}.ffn_norm"],
            site=layer_out.site,
            detail="LayerNorm(x + FFN(x))",
        )


def _collapsed(b: _Builder, stage: str, column: Column, label: str, like: int | None) -> None:
    """A layer drawn as one box: its output, and every parameter of it."""
    rows = [r for r in b.shapes if r.stage == stage]
    blocks = [x.name for x in b.table.blocks if x.group == stage]
    what = "its own weights" + (f", the same blocks as layer {like + 1}" if like is not None else "")
    b.add(stage, column, "layer", label, rows, blocks=blocks, site=rows[-1].site, page="learn", detail=what)


def _side(b: _Builder, side: str, column: Column, tokens: str) -> None:
    """Pieces → ids → token embedding → + positional encoding."""
    ids = b.row(side, "source pieces" if side == "source" else "decoder inputs")
    total = b.row(side, "encoder input (" if side == "source" else "decoder input (")
    source_emb = b.row("source", "token embeddings")
    emb = source_emb if side == "source" else TensorShape(side, source_emb.name, total.dims, total.shape, None, False)
    b.add(f"{side}.ids", column, "tokens", f"{side} pieces → token ids", [ids], site=ids.site, detail=tokens)
    block = "embed.src" if side == "source" else "embed.tgt"
    scaled = source_emb.name.removeprefix("token embeddings ").replace("·√d_model", " ×√d_model")
    detail = "one row of E per piece"
    b.add(block, column, "embedding", f"embedding {scaled}", [emb], blocks=[block], detail=detail)
    learned = b.table.architecture.positional == "learned"
    pe = b.row(side, "positional encoding")
    how = "learned table P, one for both sides" if learned else "sinusoidal: computed, no parameters"
    b.add(
        f"{side}.positions",
        column,
        "embedding",
        "+ positional encoding",
        [pe, total],
        blocks=["positions"] if side == "source" else [],
        site=total.site,
        page="positional",
        detail=how,
        shared="the source side's table: counted there" if learned and side == "target" else "",
    )


def flow_nodes(
    shapes: Sequence[TensorShape],
    table: ParameterTable,
    *,
    expanded: Collection[str] | None = None,
    src_tokens: Sequence[str] = (),
    out_tokens: Sequence[str] = (),
) -> tuple[FlowNode, ...]:
    """The blocks of the model ``table`` counts, for the sentence ``shapes`` describes, in the order data flows:
    encoder column (source pieces → embeddings → each layer → memory) then decoder column (decoder inputs →
    embeddings → each layer → logits → softmax → the chosen words). A layer named in ``expanded`` ('encoder.0',
    'decoder.1'; None: every layer) is drawn block by block, any other as one box. The nodes' parameters add up to
    ``table.total``."""
    arch = table.architecture
    pre, ssru = arch.norm == "pre", arch.decoder_self == "ssru"
    b = _Builder(shapes, table)
    layers = [layer_name("encoder", i) for i in range(arch.n_encoder_layers)] + [
        layer_name("decoder", i) for i in range(arch.n_decoder_layers)
    ]
    shown = set(layers) if expanded is None else set(layers) & set(expanded)

    def like(stack: str) -> int | None:
        drawn = [int(s.split(".")[1]) for s in sorted(shown) if s.startswith(stack + ".")]
        return drawn[0] if drawn else None

    _side(b, "source", "encoder", _cut("|".join(token_labels(src_tokens))))
    for i in range(arch.n_encoder_layers):
        stage = layer_name("encoder", i)
        if stage not in shown:
            _collapsed(b, stage, "encoder", f"encoder layer {i + 1}", like("encoder"))
            continue
        _attention(
            b,
            stage,
            "self-attention",
            column="encoder",
            kind="attention",
            pre=pre,
            label=f"self-attention · {arch.n_heads} heads",
            block=f"{stage}.self_attn",
            site=attention_site("encoder", i),
        )
        _ffn(b, stage, "encoder", pre)
    memory = b.row("memory", "memory")
    if pre:
        b.add("encoder_norm", "encoder", "norm", "final LayerNorm of the encoder", [memory], blocks=["encoder_norm"])
    b.add(
        "memory",
        "encoder",
        "memory",
        "memory: the encoder's output",
        [memory],
        site=memory.site,
        detail="every cross-attention makes its K and V from it",
    )

    _side(b, "target", "decoder", "the start token, then every output piece but the last")
    for i in range(arch.n_decoder_layers):
        stage = layer_name("decoder", i)
        if stage not in shown:
            _collapsed(b, stage, "decoder", f"decoder layer {i + 1}", like("decoder"))
            continue
        if ssru:
            gate, cell, norm = b.row(stage, "SSRU: forget"), b.row(stage, "SSRU: output"), b.row(stage, "SSRU: add")
            detail = f"gates f {shape_text(gate.shape)}; cell c carries the prefix, no K/V cache"
            if pre:
                b.add(
                    f"{stage}.self_attn_norm",
                    "decoder",
                    "norm",
                    "LayerNorm (before the sub-layer)",
                    [norm],
                    blocks=[f"{stage}.self_attn_norm"],
                )
            b.add(
                f"{stage}.ssru",
                "decoder",
                "ssru",
                "SSRU instead of self-attention" + (" + residual" if pre else ""),
                [gate, cell],
                blocks=[f"{stage}.ssru"],
                site=gate.site,
                detail=detail,
            )
            if not pre:
                b.add(
                    f"{stage}.self_attn_norm",
                    "decoder",
                    "norm",
                    "add & norm",
                    [norm],
                    blocks=[f"{stage}.self_attn_norm"],
                    detail="LayerNorm(x + SSRU(x))",
                )
        else:
            _attention(
                b,
                stage,
                "masked self-attention",
                column="decoder",
                kind="attention",
                pre=pre,
                label=f"masked self-attention · {arch.n_heads} heads",
                block=f"{stage}.self_attn",
                site=attention_site("decoder", i),
            )
            b.nodes[-1 if pre else -2] = _with_page(b.nodes[-1 if pre else -2], "masks")
        _attention(
            b,
            stage,
            "cross-attention",
            column="decoder",
            kind="cross",
            pre=pre,
            label=f"cross-attention · {arch.n_heads} heads",
            block=f"{stage}.cross_attn",
            site=attention_site("cross", i),
        )
        _ffn(b, stage, "decoder", pre)
    state = b.row("output", "decoder state")
    if pre:
        last = b.row(layer_name("decoder", arch.n_decoder_layers - 1), "layer output")
        b.add("decoder_norm", "decoder", "norm", "final LayerNorm of the decoder", [last], blocks=["decoder_norm"])
    logits, probs = b.row("output", "logits"), b.row("output", "next-word")
    b.add(
        "output.projection",
        "decoder",
        "output",
        "logits: " + logits.name.removeprefix("logits at one step "),
        [state, logits],
        blocks=["output.projection", "output.bias"],
        detail=f"one step: {shape_text(state.shape)} → a score per piece",
    )
    top = b.row("output", "the k most likely")
    b.add(
        "output.softmax",
        "decoder",
        "output",
        "softmax → next-word probabilities",
        [probs, top],
        site=top.site,
        page="explain",
        detail=f"the {top.shape[-1]} most likely kept per step: {shape_text(top.shape)}",
    )
    chosen = b.row("output", "the word chosen")
    b.add(
        "output.word",
        "decoder",
        "output",
        "the chosen word, step by step",
        [chosen],
        site=chosen.site,
        page="steps",
        detail=_cut("|".join(token_labels(out_tokens))),
    )
    return tuple(b.nodes)


def _with_page(node: FlowNode, page: str) -> FlowNode:
    return FlowNode(**{**node.__dict__, "page": page})


def _cut(text: str, n: int = DETAIL_CHARS) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


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
        top, bottom = y + 0.17, y - 0.19
        notes += [
            dict(x=x0 + 0.015, y=top, text=f"<b>{html.escape(n.label)}</b>", xanchor="left", font=dict(size=15)),
            dict(x=x1 - 0.015, y=top, text=_params(n), xanchor="right", font=dict(size=13, color="#333")),
            dict(
                x=x0 + 0.015,
                y=bottom,
                xanchor="left",
                text=f"<b>{n.shape_text}</b>" + (f"   {_cut(n.detail, 48)}" if n.detail else ""),
                font=dict(size=13, color="#1d3557"),
            ),
        ]
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
