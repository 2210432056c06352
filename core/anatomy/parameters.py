"""Parameter accounting: every block of an encoder-decoder Transformer with its count and the formula beside it.

    table = parameter_table(config)            # a ModelConfig, or an Architecture (d_k, d_v of their own)
    table.total                                # = sum(p.numel() for p in Transformer(config).parameters())
    [(b.name, b.formula, b.numbers, b.count) for b in table.blocks]
    check_parameters(table, model)             # the table against a real model, tensor by tensor

Each block is built from its formula's terms, so the number can never disagree with the formula shown beside it;
its ``pieces`` name the model's tensors (state-dict keys, shapes as the model stores them: a Linear's weight is
(out, in)). A matrix used twice (source and target embeddings shared, the output projection tied to the target
embedding) is counted once: the second use is a block of its own with ``count`` 0 and ``shared_with`` naming the
block that counts it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from torch import nn

from ..config import ModelConfig
from ..sites import embed_site, layer_name, ssru_site

Term = tuple[int, tuple[str, ...]]  # coefficient, symbols multiplied: (4, ("d_model", "d_model")) = 4·d_model²
SUPERSCRIPT = {2: "²", 3: "³"}


@dataclass(frozen=True)
class Architecture:
    """What the parameter count depends on. ``Architecture.of(config)`` for a ModelConfig; built directly for
    shapes a ModelConfig cannot express (the paper's table 3 varies d_k and d_v apart from d_model / h)."""

    src_vocab: int
    tgt_vocab: int
    d_model: int
    d_ff: int
    n_heads: int
    d_k: int
    d_v: int
    n_encoder_layers: int
    n_decoder_layers: int
    share_embeddings: bool = True
    tie_output: bool = True
    output_bias: bool = False
    positional: Literal["sinusoidal", "learned", "relative"] = "sinusoidal"
    max_positions: int = 1024
    norm: Literal["post", "pre"] = "post"
    decoder_self: Literal["attention", "ssru"] = "attention"
    attention_bias: bool = True  # core's attention projections have biases; the paper's equations have none
    ffn_bias: bool = True  # the feed-forward's projections have biases (T5's have none)
    norm_kind: Literal["layer", "rms"] = "layer"  # rms: a gain per feature, no bias (T5)
    gated_ffn: bool = False  # a second input projection the activation multiplies (T5 v1.1)
    relative_buckets: int = 32  # positional 'relative': T5's bias, one value per bucket and head in each stack
    position_offset: int = 0  # rows of a learned table before position 0 (BART's 2): P = max_positions + these
    separate_positions: bool = False  # learned positions: one table per side (BART, mBART)
    embed_norm: bool = False  # a norm on each side's embeddings + positions (BART's layernorm_embedding)

    def __post_init__(self) -> None:
        if self.share_embeddings and self.src_vocab != self.tgt_vocab:
            raise ValueError("share_embeddings needs src_vocab == tgt_vocab")

    @classmethod
    def of(cls, config: ModelConfig) -> Architecture:
        return cls(
            src_vocab=config.src_vocab_size,
            tgt_vocab=config.tgt_vocab_size,
            d_model=config.d_model,
            d_ff=config.d_ff,
            n_heads=config.n_heads,
            d_k=config.d_head,
            d_v=config.d_value,
            n_encoder_layers=config.n_encoder_layers,
            n_decoder_layers=config.n_decoder_layers,
            share_embeddings=config.share_embeddings,
            tie_output=config.tie_output,
            output_bias=config.output_bias,
            positional=config.positional,
            max_positions=config.max_positions,
            norm=config.norm,
            decoder_self=config.decoder_self,
            attention_bias=config.linear_bias,
            ffn_bias=config.linear_bias,
            norm_kind=config.norm_kind,
            gated_ffn=config.gated_ffn,
            relative_buckets=config.relative_buckets,
            position_offset=config.position_offset,
            separate_positions=config.separate_positions,
            embed_norm=config.embed_norm,
        )

    @property
    def symbols(self) -> dict[str, int]:
        """The value of each symbol a formula uses."""
        return {
            "d_model": self.d_model,
            "d_ff": self.d_ff,
            "h": self.n_heads,
            "d_k": self.d_k,
            "d_v": self.d_v,
            "V": self.tgt_vocab,
            "V_src": self.src_vocab,
            "V_tgt": self.tgt_vocab,
            "P": self.max_positions + self.position_offset,
            "B": self.relative_buckets,
        }


@dataclass(frozen=True)
class Piece:
    """One tensor of a block: its name in the formula's terms ('W_Q', 'b_Q', 'γ'), shape, and state-dict key."""

    name: str
    shape: tuple[int, ...]
    key: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class ParameterBlock:
    """One block of the model. ``formula`` is symbolic ('4·d_model² + 4·d_model'), ``numbers`` the same with this
    model's values ('4·256² + 4·256'); ``size`` is its value, ``count`` what the block adds to the total (0 when
    ``shared_with`` names the block that counts the same matrix)."""

    name: str  # 'encoder.0.self_attn', 'decoder.1.ssru', 'embed.tgt', 'output.projection'
    group: str  # 'embeddings', 'encoder.0', 'decoder.1', 'final norms', 'output'
    label: str  # 'self-attention', 'add & norm', ...
    formula: str
    numbers: str
    size: int
    pieces: tuple[Piece, ...]
    shared_with: str | None = None

    @property
    def count(self) -> int:
        return 0 if self.shared_with else self.size


@dataclass(frozen=True)
class ParameterTable:
    """Every block, in the order data flows through the model, and what they add up to."""

    architecture: Architecture
    blocks: tuple[ParameterBlock, ...]

    @property
    def total(self) -> int:
        return sum(b.count for b in self.blocks)

    def group_totals(self) -> dict[str, int]:
        """Group -> parameters counted in it, in order: 'embeddings', 'encoder.0', ..., 'output'."""
        out: dict[str, int] = {}
        for b in self.blocks:
            out[b.group] = out.get(b.group, 0) + b.count
        return out

    def block(self, name: str) -> ParameterBlock:
        for b in self.blocks:
            if b.name == name:
                return b
        raise KeyError(f"no block {name!r}; blocks: {', '.join(b.name for b in self.blocks)}")

    @property
    def shared(self) -> tuple[ParameterBlock, ...]:
        return tuple(b for b in self.blocks if b.shared_with)


@dataclass(frozen=True)
class ParameterCheck:
    """The table against a model: ``counted`` (the table's total) and ``numel`` (sum(p.numel() for p in
    model.parameters()), each shared tensor once), and every tensor the two disagree on."""

    counted: int
    numel: int
    missing: tuple[str, ...]  # tensors the table lists that the model lacks
    uncounted: tuple[str, ...]  # the model's tensors no counted block lists
    wrong_shape: tuple[str, ...]  # 'key: table (a, b), model (c, d)'
    wrongly_shared: tuple[str, ...]  # keys a block marks shared that are not the same tensor in the model

    @property
    def ok(self) -> bool:
        return self.counted == self.numel and not (
            self.missing or self.uncounted or self.wrong_shape or self.wrongly_shared
        )


# ---------------------------------------------------------------- formulas
def render(terms: Iterable[Term], values: Mapping[str, int] | None = None) -> str:
    """'4·d_model² + 4·d_model' (symbols), or with ``values`` '4·256² + 4·256'; '0' for no terms."""
    parts = []
    for coef, symbols in terms:
        factors = [] if coef == 1 and symbols else [str(coef)]
        run: list[str] = []
        for s in [*symbols, None]:
            if run and s != run[0]:
                base = run[0] if values is None else str(values[run[0]])
                factors.append(base + SUPERSCRIPT.get(len(run), f"^{len(run)}") if len(run) > 1 else base)
                run = []
            if s is not None:
                run.append(s)
        parts.append("·".join(factors))
    return " + ".join(parts) or "0"


def evaluate(terms: Iterable[Term], values: Mapping[str, int]) -> int:
    return sum(coef * math.prod(values[s] for s in symbols) for coef, symbols in terms)


def _block(
    arch: Architecture,
    name: str,
    group: str,
    label: str,
    terms: Sequence[Term],
    pieces: Sequence[Piece],
    shared_with: str | None = None,
) -> ParameterBlock:
    values = arch.symbols
    size = evaluate(terms, values)
    if size != sum(p.numel for p in pieces):  # the formula and the tensors it describes are one thing
        raise AssertionError(f"{name}: formula gives {size:,}, its tensors {sum(p.numel for p in pieces):,}")
    return ParameterBlock(name, group, label, render(terms), render(terms, values), size, tuple(pieces), shared_with)


def _linear(name: str, key: str, n_out: int, n_in: int, bias: bool) -> list[Piece]:
    weight = Piece(f"W_{name}", (n_out, n_in), f"{key}.weight")
    return [weight, Piece(f"b_{name}", (n_out,), f"{key}.bias")] if bias else [weight]


def attention_block(arch: Architecture, name: str, group: str, label: str, key: str) -> ParameterBlock:
    """Q, K, V and output projections (and their biases when the architecture has them)."""
    d, hk, hv = arch.d_model, arch.n_heads * arch.d_k, arch.n_heads * arch.d_v
    if hk == d and hv == d:  # d_k = d_v = d_model / h: the familiar form
        terms: list[Term] = [(4, ("d_model", "d_model"))] + ([(4, ("d_model",))] if arch.attention_bias else [])
    else:
        terms = [(2, ("d_model", "h", "d_k")), (2, ("d_model", "h", "d_v"))]
        if arch.attention_bias:
            terms += [(2, ("h", "d_k")), (1, ("h", "d_v")), (1, ("d_model",))]
    bias = arch.attention_bias
    pieces = (
        _linear("Q", f"{key}.q_proj", hk, d, bias)
        + _linear("K", f"{key}.k_proj", hk, d, bias)
        + _linear("V", f"{key}.v_proj", hv, d, bias)
        + _linear("O", f"{key}.out_proj", d, hv, bias)
    )
    return _block(arch, name, group, label, terms, pieces)


def norm_block(arch: Architecture, name: str, group: str, key: str, label: str = "add & norm") -> ParameterBlock:
    """LayerNorm: a gain γ and a bias β per feature; RMSNorm (T5): the gain only."""
    pieces = [Piece("γ", (arch.d_model,), f"{key}.weight")]
    if arch.norm_kind == "rms":
        return _block(arch, name, group, label, [(1, ("d_model",))], pieces)
    pieces.append(Piece("β", (arch.d_model,), f"{key}.bias"))
    return _block(arch, name, group, label, [(2, ("d_model",))], pieces)


def ffn_block(arch: Architecture, name: str, group: str, key: str) -> ParameterBlock:
    """FFN(x) = act(x W1 + b1) W2 + b2; gated (T5 v1.1): (act(x W1) · x W_up) W2, with no biases there."""
    inputs = 2 if arch.gated_ffn else 1
    terms: list[Term] = [(inputs + 1, ("d_model", "d_ff"))]
    if arch.ffn_bias:
        terms += [(inputs, ("d_ff",)), (1, ("d_model",))]
    d, bias = arch.d_model, arch.ffn_bias
    pieces = _linear("1", f"{key}.linear1", arch.d_ff, d, bias)
    if arch.gated_ffn:
        pieces += _linear("up", f"{key}.linear_up", arch.d_ff, d, bias)
    pieces += _linear("2", f"{key}.linear2", d, arch.d_ff, bias)
    return _block(arch, name, group, "gated feed-forward" if arch.gated_ffn else "feed-forward", terms, pieces)


def ssru_block(arch: Architecture, name: str, group: str, key: str) -> ParameterBlock:
    """core.transformer.layers.SSRU: c_t = f_t·c_{t-1} + (1 - f_t)·(x_t W), f_t = sigmoid(x_t W_f + b_f) — W without a
    bias."""
    terms: list[Term] = [(2, ("d_model", "d_model")), (1, ("d_model",))]
    d = arch.d_model
    pieces = [Piece("W", (d, d), f"{key}.W.weight")] + _linear("f", f"{key}.W_f", d, d, True)
    return _block(arch, name, group, "SSRU (instead of self-attention)", terms, pieces)


# ---------------------------------------------------------------- the table
def parameter_table(config: ModelConfig | Architecture) -> ParameterTable:
    """Every block of the model ``config`` describes, with its formula and count; ``total`` is the model's
    parameter count (each shared matrix once)."""
    arch = config if isinstance(config, Architecture) else Architecture.of(config)
    v_src, v_tgt = ("V", "V") if arch.share_embeddings else ("V_src", "V_tgt")
    blocks = [
        _block(
            arch,
            embed_site("src"),
            "embeddings",
            "token embeddings (source)",
            [(1, (v_src, "d_model"))],
            [Piece("E", (arch.src_vocab, arch.d_model), "src_embed.weight")],
        ),
        _block(
            arch,
            embed_site("tgt"),
            "embeddings",
            "token embeddings (target)",
            [(1, (v_tgt, "d_model"))],
            [Piece("E", (arch.tgt_vocab, arch.d_model), "tgt_embed.weight")],
            shared_with=embed_site("src") if arch.share_embeddings else None,
        ),
    ]
    if arch.positional == "learned":
        rows = arch.max_positions + arch.position_offset
        tables = [("positions", "positions", "one table, both sides")]
        if arch.separate_positions:  # BART: the source's table is "positions", the target's its own
            tables = [("positions", "positions", "source"), ("positions.tgt", "tgt_positions", "target")]
        for name, key, which in tables:
            label = f"learned positions ({which})"
            pieces = [Piece("P", (rows, arch.d_model), f"{key}.embedding.weight")]
            blocks.append(_block(arch, name, "embeddings", label, [(1, ("P", "d_model"))], pieces))
    elif arch.positional == "relative":  # T5: no absolute positions; a bias per bucket and head in each stack
        for stack in ("encoder", "decoder"):
            label = f"relative position bias ({stack}: buckets × heads)"
            pieces = [Piece("R", (arch.relative_buckets, arch.n_heads), f"{stack}_bias.embedding.weight")]
            blocks.append(_block(arch, f"positions.{stack}", "embeddings", label, [(1, ("B", "h"))], pieces))
    else:
        blocks.append(_block(arch, "positions", "embeddings", "sinusoidal positions (computed, not learned)", [], []))
    if arch.embed_norm:  # BART's layernorm_embedding, one per side
        for side in ("src", "tgt"):
            label = f"embedding norm ({'source' if side == 'src' else 'target'})"
            blocks.append(norm_block(arch, f"embed_norm.{side}", "embeddings", f"{side}_embed_norm", label))
    for i in range(arch.n_encoder_layers):
        g, key = layer_name("encoder", i), f"encoder_layers.{i}"
        blocks += [
            attention_block(arch, f"{g}.self_attn", g, "self-attention", f"{key}.self_attn"),
            norm_block(arch, f"{g}.self_attn_norm", g, f"{key}.self_attn_norm"),
            ffn_block(arch, f"{g}.ffn", g, f"{key}.ffn"),
            norm_block(arch, f"{g}.ffn_norm", g, f"{key}.ffn_norm"),
        ]
    for i in range(arch.n_decoder_layers):
        g, key = layer_name("decoder", i), f"decoder_layers.{i}"
        if arch.decoder_self == "ssru":
            blocks.append(ssru_block(arch, ssru_site(i), g, f"{key}.ssru"))
        else:
            blocks.append(attention_block(arch, f"{g}.self_attn", g, "masked self-attention", f"{key}.self_attn"))
        blocks += [
            norm_block(arch, f"{g}.self_attn_norm", g, f"{key}.self_attn_norm"),
            attention_block(arch, f"{g}.cross_attn", g, "cross-attention", f"{key}.cross_attn"),
            norm_block(arch, f"{g}.cross_attn_norm", g, f"{key}.cross_attn_norm"),
            ffn_block(arch, f"{g}.ffn", g, f"{key}.ffn"),
            norm_block(arch, f"{g}.ffn_norm", g, f"{key}.ffn_norm"),
        ]
    if arch.norm == "pre":  # pre-norm stacks end with a norm of their own
        blocks += [
            norm_block(arch, "encoder_norm", "final norms", "encoder_norm", "final norm (encoder)"),
            norm_block(arch, "decoder_norm", "final norms", "decoder_norm", "final norm (decoder)"),
        ]
    tied = embed_site("src" if arch.share_embeddings else "tgt")
    blocks.append(
        _block(
            arch,
            "output.projection",
            "output",
            "output projection (to the vocabulary)",
            [(1, (v_tgt, "d_model"))],
            [Piece("W_out", (arch.tgt_vocab, arch.d_model), "output.weight")],
            shared_with=tied if arch.tie_output else None,
        )
    )
    if arch.output_bias:
        pieces = [Piece("b_out", (arch.tgt_vocab,), "output.bias")]
        blocks.append(_block(arch, "output.bias", "output", "output bias", [(1, (v_tgt,))], pieces))
    return ParameterTable(arch, tuple(blocks))


def check_parameters(table: ParameterTable, model: nn.Module) -> ParameterCheck:
    """Compare ``table`` with ``model``'s tensors: each listed tensor exists with the listed shape, each tensor
    the model has is counted by exactly one block, and what a block marks shared is the same tensor."""
    state = model.state_dict(keep_vars=True)
    counted = {p.key: p for b in table.blocks if not b.shared_with for p in b.pieces}
    listed = {p.key: (b, p) for b in table.blocks for p in b.pieces}
    owner = {b.name: b for b in table.blocks}
    params = dict(model.named_parameters())  # each shared tensor once, under its first name
    missing = tuple(k for k in listed if k not in state)
    wrong = tuple(
        f"{k}: table {p.shape}, model {tuple(state[k].shape)}"
        for k, (_, p) in listed.items()
        if k in state and tuple(state[k].shape) != p.shape
    )
    uncounted = tuple(k for k in params if k not in counted)
    wrongly_shared = []
    for b in table.blocks:
        if b.shared_with:
            source = owner[b.shared_with]
            for mine, theirs in zip(b.pieces, source.pieces, strict=True):
                if mine.key in state and theirs.key in state and state[mine.key] is not state[theirs.key]:
                    wrongly_shared.append(mine.key)
    numel = sum(p.numel() for p in model.parameters())
    return ParameterCheck(table.total, numel, missing, uncounted, wrong, tuple(wrongly_shared))
