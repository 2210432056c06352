"""The Model map's flow as data: every block of the model for one sentence, in the order data flows, with its
tensor's shape at this sentence's sizes (a ``core.anatomy.tensor_shapes`` row) and its parameter count (from
``core.anatomy.parameter_table``); ``viz_app.figures.model_map`` draws it."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from core.anatomy import ParameterTable, TensorShape
from core.sites import AttentionKind, Stack, attention_array, embed_site, layer_name, parse_layer, ssru_site
from viz_app.figures.style import token_labels

Column = str  # 'encoder' (left) or 'decoder' (right)
DETAIL_CHARS = 40  # a box's last line, cut: 12 px text that fits a box at 1024 px wide (the hover has it whole)


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


class _Builder:
    """Collects the nodes in the order data flows."""

    def __init__(self, shapes: Sequence[TensorShape], table: ParameterTable) -> None:
        self.shapes, self.table, self.nodes = list(shapes), table, list[FlowNode]()
        self.names = {b.name for b in table.blocks}
        self.norm = "RMSNorm" if table.architecture.norm_kind == "rms" else "LayerNorm"  # the model's own (T5: RMS)

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


SUBLAYERS = {  # attention kind -> (its shape rows' prefix, FILL kind, label, block name, page that explains it)
    "encoder": ("self-attention", "attention", "self-attention", "self_attn", "head"),
    "decoder": ("masked self-attention", "attention", "masked self-attention", "self_attn", "masks"),
    "cross": ("cross-attention", "cross", "cross-attention", "cross_attn", "head"),
}


def _norm_before(b: _Builder, block: str, column: Column, row: TensorShape) -> None:
    """Pre-norm: the norm (LayerNorm or RMSNorm) a sub-layer reads through."""
    b.add(block, column, "norm", f"{b.norm} (before the sub-layer)", [row], blocks=[block])


def _norm_after(b: _Builder, block: str, column: Column, row: TensorShape, formula: str) -> None:
    """Post-norm: add & norm after a sub-layer (``formula``: 'LayerNorm(x + SSRU(x))')."""
    b.add(block, column, "norm", "add & norm", [row], blocks=[block], detail=formula)


def _attention(b: _Builder, kind: AttentionKind, layer: int, pre: bool, n_heads: int) -> None:
    """One attention sub-layer of ``kind`` ('encoder', 'decoder', 'cross') in ``layer``, and its norm (post-norm:
    add & norm after; pre-norm: LayerNorm before)."""
    prefix, fill, name, part, page = SUBLAYERS[kind]
    column: Stack = "encoder" if kind == "encoder" else "decoder"
    stage = layer_name(column, layer)

    def row(what: str) -> TensorShape:
        return b.row(stage, f"{prefix}: {what}")

    q, kv, scores, concat = row("Q per head"), row("K per head"), row("scores"), row("heads concatenated")
    rows = [row("Q = "), q, kv, row("V per head"), scores, row("weights"), row("each head"), concat, row("output")]
    detail = (
        f"Q {shape_text(q.shape)} · K,V {shape_text(kv.shape)} · scores {shape_text(scores.shape)}"
        f" · concat {shape_text(concat.shape)}"
    )
    block, norm = f"{stage}.{part}", row("add & norm")
    label = f"{name} · {n_heads} heads" + (" + residual" if pre else "")
    site = attention_array(kind, layer, "heads")
    if pre:
        _norm_before(b, f"{block}_norm", column, norm)
    b.add(block, column, fill, label, rows, blocks=[block], site=site, page=page, detail=detail)
    if not pre:
        _norm_after(b, f"{block}_norm", column, norm, f"{b.norm}(x + sub-layer(x))")


def _ssru(b: _Builder, layer: int, pre: bool) -> None:
    """The SSRU that stands where the decoder's self-attention would, and its norm."""
    stage = layer_name("decoder", layer)
    gate, cell, norm = b.row(stage, "SSRU: forget"), b.row(stage, "SSRU: output"), b.row(stage, "SSRU: add")
    detail = f"gates f {shape_text(gate.shape)}; cell c carries the prefix, no K/V cache"
    label = "SSRU instead of self-attention" + (" + residual" if pre else "")
    if pre:
        _norm_before(b, f"{stage}.self_attn_norm", "decoder", norm)
    block = ssru_site(layer)
    b.add(block, "decoder", "ssru", label, [gate, cell], blocks=[block], site=gate.site, detail=detail)
    if not pre:
        _norm_after(b, f"{stage}.self_attn_norm", "decoder", norm, f"{b.norm}(x + SSRU(x))")


def _ffn(b: _Builder, stage: str, column: Column, pre: bool) -> None:
    """The feed-forward sub-layer and its norm; its last box is the layer's output."""
    hidden, out = b.row(stage, "feed-forward hidden"), b.row(stage, "feed-forward output")
    layer_out = b.row(stage, "layer output")
    between = "gated: act(x·W1) ⊙ x·W_up" if b.table.architecture.gated_ffn else "the activation between"
    detail = f"{shape_text(out.shape)} → {shape_text(hidden.shape)} → {shape_text(out.shape)} ({between})"
    block = f"{stage}.ffn"
    if pre:
        _norm_before(b, f"{block}_norm", column, out)
        label, rows, site, page = (
            "feed-forward + residual → layer output",
            [hidden, out, layer_out],
            layer_out.site,
            "learn",
        )
    else:
        label, rows, site, page = "feed-forward", [hidden, out], None, None
    b.add(block, column, "ffn", label, rows, blocks=[block], site=site, page=page, detail=detail)
    if not pre:
        norm, label = f"{block}_norm", "add & norm → layer output"
        b.add(
            norm, column, "norm", label, [layer_out], blocks=[norm], site=layer_out.site, detail=f"{b.norm}(x + FFN(x))"
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
    block = embed_site("src" if side == "source" else "tgt")
    scaled = source_emb.name.removeprefix("token embeddings ").replace("·√d_model", " ×√d_model")
    detail = "one row of E per piece"
    b.add(block, column, "embedding", f"embedding {scaled}", [emb], blocks=[block], detail=detail)
    arch = b.table.architecture
    learned, separate = arch.positional == "learned", arch.separate_positions
    pe = b.row(side, "positional encoding")
    if arch.positional == "relative":  # T5: nothing added here; each stack's bias table is counted on this box
        how = "none added: a learned bias on each self-attention's scores (relative position bias)"
        blocks = ["positions.encoder" if side == "source" else "positions.decoder"]
    elif learned:
        how = f"learned table P, {'one per side' if separate else 'one for both sides'}"
        blocks = ["positions"] if side == "source" else ["positions.tgt"] if separate else []
    else:
        how, blocks = "sinusoidal: computed, no parameters", ["positions"] if side == "source" else []
    if arch.position_offset and arch.positional != "relative":
        how += f", read from row {arch.position_offset + 1}"  # rows counted from 1, as positions
    b.add(
        f"{side}.positions",
        column,
        "embedding",
        "+ positional encoding" if arch.positional != "relative" else "positions: a bias in attention instead",
        [pe, total],
        blocks=blocks,
        site=total.site,
        page="positional",
        detail=how,
        shared="the source side's table: counted there" if learned and not separate and side == "target" else "",
    )
    if arch.embed_norm:  # BART's layernorm_embedding, one per side, on the sum before layer 1
        norm = f"embed_norm.{'src' if side == 'source' else 'tgt'}"
        b.add(
            f"{side}.embed_norm",
            column,
            "norm",
            f"{b.norm} of embedding + position",
            [total],
            blocks=[norm],
            detail="layernorm_embedding, before layer 1",
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
        drawn = [where[1] for s in sorted(shown) if (where := parse_layer(s)) is not None and where[0] == stack]
        return drawn[0] if drawn else None

    _side(b, "source", "encoder", cut("|".join(token_labels(src_tokens))))
    for i in range(arch.n_encoder_layers):
        stage = layer_name("encoder", i)
        if stage not in shown:
            _collapsed(b, stage, "encoder", f"encoder layer {i + 1}", like("encoder"))
            continue
        _attention(b, "encoder", i, pre, arch.n_heads)
        _ffn(b, stage, "encoder", pre)
    memory = b.row("memory", "memory")
    if pre:
        b.add("encoder_norm", "encoder", "norm", f"final {b.norm} of the encoder", [memory], blocks=["encoder_norm"])
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
            _ssru(b, i, pre)
        else:
            _attention(b, "decoder", i, pre, arch.n_heads)
        _attention(b, "cross", i, pre, arch.n_heads)
        _ffn(b, stage, "decoder", pre)
    state = b.row("output", "decoder state")
    if pre:
        last = b.row(layer_name("decoder", arch.n_decoder_layers - 1), "layer output")
        b.add("decoder_norm", "decoder", "norm", f"final {b.norm} of the decoder", [last], blocks=["decoder_norm"])
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
        detail=cut("|".join(token_labels(out_tokens))),
    )
    return tuple(b.nodes)


def cut(text: str, n: int = DETAIL_CHARS) -> str:
    """``text``, cut to ``n`` characters with '…' when longer."""
    return text if len(text) <= n else text[: n - 1] + "…"
