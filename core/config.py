"""Frozen, self-validating configuration: the model's shape, the per-call inference options and what a call records."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from .errors import InputError
from .sites import ATTENTION_KINDS, AttentionKind

# Upper bounds that keep a broken config from allocating a machine's memory before anything is checked (far
# above every model this lab opens: the imported ones have d_model 256-1024, vocabularies of 32k-64k).
LIMITS = {
    "src_vocab_size": 1_000_000,
    "tgt_vocab_size": 1_000_000,
    "d_model": 8192,
    "n_heads": 256,
    "d_ff": 65_536,
    "max_positions": 1 << 20,
    "n_encoder_layers": 128,
    "n_decoder_layers": 128,
}


@dataclass(frozen=True)
class ModelConfig:
    """Shape and variant of an encoder-decoder Transformer.

    The defaults are the paper's base architecture scaled down; the variant fields
    (``activation``, ``pe_layout``, ``scale_embedding``, ``decoder_self``, ``output_bias``, ``start``,
    ``suppress_ids``, and the BART / mBART / M2M100 block: ``position_offset``, ``separate_positions``, ``embed_norm``,
    ``forced_bos_id``, ``pad_position_zero``) let imported production models (Marian/Bergamot, Hugging Face Marian,
    BART, mBART, M2M100, NLLB) run on the same code; the T5 block (``d_kv``, ``d_v``, ``attention_scale``,
    ``norm_kind``, ``gated_ffn``, ``linear_bias``, ``relative_buckets``, ``relative_max_distance``,
    ``scale_decoder_output``, with ``positional='relative'``) does the same for T5 / Flan-T5 / mT5; ``beam``,
    ``length_penalty``, ``early_stopping`` and the generation rules (``min_length``, ``no_repeat_ngram_size``,
    ``encoder_no_repeat_ngram_size``, ``repetition_penalty``, ``forced_eos_id``: ``core.decoding.generation_rules``)
    decode an imported folder as transformers' ``generate`` does.
    """

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 256
    n_heads: int = 8
    n_encoder_layers: int = 3
    n_decoder_layers: int = 3
    d_ff: int = 1024
    dropout: float = 0.1
    # transformers' names: swish = silu = x * sigmoid(x) (Marian's default); gelu_new = GELU's tanh approximation
    activation: Literal["relu", "gelu", "gelu_new", "swish", "silu"] = "relu"
    norm: Literal["post", "pre"] = "post"
    norm_eps: float = 1e-5
    positional: Literal["sinusoidal", "learned", "relative"] = "sinusoidal"  # relative: T5's bias (relative_* below)
    # interleaved: the paper's; concatenated: sines then cosines, tensor2tensor / Marian C++ frequencies;
    # concatenated_hf: sines then cosines at the paper's frequencies (Hugging Face's MarianMTModel).
    # core.transformer.positional
    pe_layout: Literal["interleaved", "concatenated", "concatenated_hf"] = "interleaved"
    max_positions: int = 1024
    scale_embedding: bool = True  # token embeddings times sqrt(d_model) before the positions are added
    share_embeddings: bool = True  # source and target embeddings are one matrix
    tie_output: bool = True  # output projection = target embedding (transposed)
    output_bias: bool = False
    decoder_self: Literal["attention", "ssru"] = "attention"
    start: Literal["bos", "zeros"] = "bos"  # first decoder input: <s> embedding, or a zero vector
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3
    suppress_ids: tuple[int, ...] = ()  # target ids decoding never chooses (e.g. Marian's <pad>, the start token)
    # BART / mBART / M2M100 (NLLB) variants; the defaults keep every earlier checkpoint as it was.
    position_offset: int = 0  # position p reads row p + position_offset of the table (BART, M2M100: 2)
    separate_positions: bool = False  # learned positions: the source and the target have a table each (BART)
    embed_norm: bool = False  # a LayerNorm on each side's embeddings + positions (BART's layernorm_embedding)
    forced_bos_id: int | None = None  # the first output id, forced (mBART-50, M2M100, NLLB: the target language)
    pad_position_zero: bool = False  # a <pad> token gets no position (M2M100's padding row of the table is zeros)
    # T5 / Flan-T5 / mT5 variants; the defaults keep every earlier checkpoint as it was.
    d_kv: int | None = None  # each head's query / key / value size; None = d_model // n_heads (T5 sets it)
    d_v: int | None = None  # each head's value size when it differs from d_kv (the paper's table 3, row B); None = same
    attention_scale: bool = True  # scores = q.k / sqrt(d_kv); False: q.k unscaled (T5)
    norm_kind: Literal["layer", "rms"] = "layer"  # rms: RMSNorm with no bias, x / rms(x) * w (T5LayerNorm)
    gated_ffn: bool = False  # FFN(x) = (act(x W1) * x W_up) W2 (T5 v1.1 / Flan-T5 / mT5: gated GELU)
    linear_bias: bool = True  # biases on the attention and feed-forward projections (T5 has none)
    relative_buckets: int = 32  # positional="relative": buckets of T5's relative position bias ...
    relative_max_distance: int = 128  # ... and the distance from which every relative position shares a bucket
    scale_decoder_output: bool = False  # decoder output * d_model**-0.5 before the output projection (T5 v1.0)
    # How beam search finishes hypotheses (``core.decoding.beam_finish``); the defaults keep every earlier checkpoint
    # as it was.
    # lab: beam_size best extensions a step, those ending in eos finished; transformers: ``generate``'s (imported)
    beam: Literal["lab", "transformers"] = "lab"
    length_penalty: float = 1.0  # finished hypotheses rank by log-prob / length**length_penalty (a call may override)
    early_stopping: bool | Literal["never"] = False  # beam="transformers": generate's early_stopping
    # Generation rules an imported folder sets (``core.decoding.generation_rules``); the defaults (off) keep every
    # earlier
    # checkpoint as it was.
    min_length: int = 0  # eos banned while the decoder's input (start token included) is shorter than this
    no_repeat_ngram_size: int = 0  # an id that would repeat an n-gram of this size in the decoder's input is banned
    forced_eos_id: int | None = None  # forced at the last step a call allows (transformers' forced_eos_token_id)
    encoder_no_repeat_ngram_size: int = 0  # an id that would complete an n-gram of the SOURCE's is banned
    repetition_penalty: float = 1.0  # the score of an id already in the decoder's input: / p when > 0, * p when < 0

    def __post_init__(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise InputError(f"ModelConfig: {msg}")

        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff", "max_positions"):
            need(
                isinstance(getattr(self, name), int)
                and not isinstance(getattr(self, name), bool)
                and 0 < getattr(self, name) <= LIMITS[name],
                f"{name} must be a whole number from 1 to {LIMITS[name]:,}, got {getattr(self, name)!r}",
            )
        for name in ("n_encoder_layers", "n_decoder_layers"):
            need(
                isinstance(getattr(self, name), int)
                and not isinstance(getattr(self, name), bool)
                and 1 <= getattr(self, name) <= LIMITS[name],
                f"{name} must be a whole number from 1 to {LIMITS[name]}, got {getattr(self, name)!r}",
            )
        need(
            isinstance(self.scale_embedding, bool),
            f"scale_embedding must be true or false, got {self.scale_embedding!r}",
        )
        need(
            isinstance(self.suppress_ids, (tuple, list))
            and all(isinstance(i, int) and not isinstance(i, bool) for i in self.suppress_ids),
            f"suppress_ids must be a list of token ids, got {self.suppress_ids!r}",
        )
        object.__setattr__(self, "suppress_ids", tuple(sorted(set(self.suppress_ids))))  # JSON gives a list
        for name in ("separate_positions", "embed_norm", "pad_position_zero"):
            need(isinstance(getattr(self, name), bool), f"{name} must be true or false, got {getattr(self, name)!r}")
        need(
            isinstance(self.position_offset, int)
            and not isinstance(self.position_offset, bool)
            and 0 <= self.position_offset <= 16,
            f"position_offset must be a whole number from 0 to 16, got {self.position_offset!r}",
        )
        need(
            not self.separate_positions or self.positional == "learned",
            "separate_positions needs learned positions (sinusoids are the same table on both sides)",
        )
        need(
            self.forced_bos_id is None
            or (
                isinstance(self.forced_bos_id, int)
                and not isinstance(self.forced_bos_id, bool)
                and 0 <= self.forced_bos_id < self.tgt_vocab_size
                and self.forced_bos_id != self.eos_id
            ),
            f"forced_bos_id must be a target id other than eos, or null; got {self.forced_bos_id!r}",
        )
        need(isinstance(self.dropout, (int, float)), f"dropout must be a number, got {self.dropout!r}")
        need(isinstance(self.norm_eps, (int, float)), f"norm_eps must be a number, got {self.norm_eps!r}")
        for name in ("pad_id", "bos_id", "eos_id", "unk_id"):
            value = getattr(self, name)
            need(isinstance(value, int) and not isinstance(value, bool), f"{name} must be an int, got {value!r}")
        for name in ("attention_scale", "gated_ffn", "linear_bias", "scale_decoder_output"):
            need(isinstance(getattr(self, name), bool), f"{name} must be true or false, got {getattr(self, name)!r}")
        need(
            self.d_kv is None
            or (isinstance(self.d_kv, int) and not isinstance(self.d_kv, bool) and 0 < self.d_kv <= LIMITS["d_model"]),
            f"d_kv must be null or a whole number from 1 to {LIMITS['d_model']:,}, got {self.d_kv!r}",
        )
        need(
            self.d_v is None
            or (isinstance(self.d_v, int) and not isinstance(self.d_v, bool) and 0 < self.d_v <= LIMITS["d_model"]),
            f"d_v must be null or a whole number from 1 to {LIMITS['d_model']:,}, got {self.d_v!r}",
        )
        need(
            self.d_kv is not None or self.d_model % self.n_heads == 0,
            f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}) unless d_kv is set",
        )
        for name, low in (("relative_buckets", 4), ("relative_max_distance", 2)):
            value = getattr(self, name)
            need(
                isinstance(value, int) and not isinstance(value, bool) and low <= value <= 1 << 16,
                f"{name} must be a whole number from {low} to {1 << 16}, got {value!r}",
            )
        need(
            self.relative_max_distance > self.relative_buckets // 2,
            f"relative_max_distance ({self.relative_max_distance}) must exceed half of relative_buckets "
            f"({self.relative_buckets})",
        )
        need(self.beam in ("lab", "transformers"), f"beam must be 'lab' or 'transformers', got {self.beam!r}")
        need(
            isinstance(self.length_penalty, (int, float))
            and not isinstance(self.length_penalty, bool)
            and math.isfinite(self.length_penalty),
            f"length_penalty must be a finite number, got {self.length_penalty!r}",
        )
        need(
            isinstance(self.early_stopping, bool) or self.early_stopping == "never",
            f"early_stopping must be true, false or 'never', got {self.early_stopping!r}",
        )
        need(
            isinstance(self.repetition_penalty, (int, float))
            and not isinstance(self.repetition_penalty, bool)
            and 0 < self.repetition_penalty < float("inf"),  # (generation_rules.is_penalty imports this module)
            f"repetition_penalty must be a number above 0 (1: off), got {self.repetition_penalty!r}",
        )
        for name in ("min_length", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size"):
            value = getattr(self, name)
            need(
                isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= LIMITS["max_positions"],
                f"{name} must be a whole number from 0 (off) to {LIMITS['max_positions']:,}, got {value!r}",
            )
        need(
            self.forced_eos_id is None
            or (
                isinstance(self.forced_eos_id, int)
                and not isinstance(self.forced_eos_id, bool)
                and 0 <= self.forced_eos_id < self.tgt_vocab_size
            ),
            f"forced_eos_id must be a target id or null, got {self.forced_eos_id!r}",
        )
        need(self.d_model % 2 == 0, f"d_model ({self.d_model}) must be even for sinusoidal positions")
        need(0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1), got {self.dropout}")
        need(self.norm_eps > 0, f"norm_eps must be > 0, got {self.norm_eps}")
        choices = {
            "activation": ("relu", "gelu", "gelu_new", "swish", "silu"),
            "norm": ("post", "pre"),
            "positional": ("sinusoidal", "learned", "relative"),
            "norm_kind": ("layer", "rms"),
            "pe_layout": ("interleaved", "concatenated", "concatenated_hf"),
            "decoder_self": ("attention", "ssru"),
            "start": ("bos", "zeros"),
        }
        for name, allowed in choices.items():
            need(getattr(self, name) in allowed, f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        need(
            not self.share_embeddings or self.src_vocab_size == self.tgt_vocab_size,
            "share_embeddings needs src_vocab_size == tgt_vocab_size",
        )
        for name in ("pad_id", "bos_id", "eos_id", "unk_id"):
            value = getattr(self, name)
            need(
                0 <= value < min(self.src_vocab_size, self.tgt_vocab_size), f"{name}={value} is outside the vocabulary"
            )
        for value in self.suppress_ids:
            need(0 <= value < self.tgt_vocab_size, f"suppress_ids: {value} is outside the target vocabulary")
        need(self.eos_id not in self.suppress_ids, f"suppress_ids holds eos_id {self.eos_id}: decoding could not stop")

    @property
    def d_head(self) -> int:
        """Each head's query / key size, and value size unless ``d_v`` says (``d_kv``, else d_model / n_heads)."""
        return self.d_kv if self.d_kv is not None else self.d_model // self.n_heads

    @property
    def d_value(self) -> int:
        """Each head's value size: ``d_v``, else ``d_head``."""
        return self.d_v if self.d_v is not None else self.d_head

    @property
    def position_rows(self) -> int | None:
        """How many positions a side can have: a learned table's rows (BART, mBART); None when positions have no end
        (sinusoids, T5's relative bias)."""
        return self.max_positions if self.positional == "learned" else None

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON has them (lists, not tuples), so a dict read back from a file compares equal."""
        data = asdict(self)
        data["suppress_ids"] = list(self.suppress_ids)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(f"ModelConfig: unknown keys {unknown}")
        return cls(**data)


Head = tuple[AttentionKind, int, int]


@dataclass(frozen=True)
class InferenceOptions:
    """Switches applied to one call; the model object is never changed by them.

    ``ablate`` holds ``(kind, layer, head)`` triples; an ablated head's output is zeroed
    before the output projection (its attention weights are still recorded).
    ``positional_encoding=False`` removes positions on both sides; ``encoder_pe`` / ``decoder_pe`` remove them
    on one side only (the source embeddings / the decoder inputs). Defaults reproduce training.
    ``shortlist=True`` scores only the model's lexical shortlist at each step, as the production engine of an
    imported Marian model does (``core.decoding.shortlist``; only checkpoints that ship one accept it). ``Bundle``
    applies it (it holds the shortlist and passes its rows down as ``vocab``); the analyses, which score the whole
    vocabulary, refuse it (``whole_vocabulary``).
    """

    positional_encoding: bool = True
    causal_mask: bool = True
    padding_mask: bool = True
    ablate: frozenset[Head] = field(default_factory=frozenset)
    encoder_pe: bool = True
    decoder_pe: bool = True
    shortlist: bool = False

    def __post_init__(self) -> None:
        triples = []
        for item in self.ablate:
            if not (isinstance(item, (tuple, list)) and len(item) == 3):
                raise ValueError(f"InferenceOptions.ablate: {item!r} is not a (kind, layer, head) triple")
            kind, layer, head = item
            if kind not in ATTENTION_KINDS:
                raise ValueError(f"InferenceOptions.ablate: kind {kind!r} is not one of {ATTENTION_KINDS}")
            if int(layer) < 0 or int(head) < 0:
                raise ValueError(f"InferenceOptions.ablate: layer and head must be >= 0 in {item!r}")
            triples.append((kind, int(layer), int(head)))
        object.__setattr__(self, "ablate", frozenset(triples))

    def whole_vocabulary(self, what: str) -> None:
        """InputError when the shortlist is switched on for ``what``, an analysis that scores every id."""
        if self.shortlist:
            raise InputError(f"{what} scores the whole vocabulary: switch the shortlist off for it")

    def pe_on(self, side: str) -> bool:
        """Whether positions are added on ``side`` ('src': the encoder's input, 'tgt': the decoder's)."""
        return self.positional_encoding and (self.encoder_pe if side == "src" else self.decoder_pe)

    def ablated_heads(self, kind: AttentionKind, layer: int) -> tuple[int, ...]:
        return tuple(sorted(h for k, l, h in self.ablate if k == kind and l == layer))

    def with_changes(self, **changes: Any) -> InferenceOptions:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(changes)
        return InferenceOptions(**data)

    def to_dict(self) -> dict[str, Any]:
        return {
            "positional_encoding": self.positional_encoding,
            "causal_mask": self.causal_mask,
            "padding_mask": self.padding_mask,
            "ablate": sorted([list(t) for t in self.ablate]),
            "encoder_pe": self.encoder_pe,
            "decoder_pe": self.decoder_pe,
            "shortlist": self.shortlist,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InferenceOptions:
        return cls(
            positional_encoding=bool(data.get("positional_encoding", True)),
            causal_mask=bool(data.get("causal_mask", True)),
            padding_mask=bool(data.get("padding_mask", True)),
            ablate=frozenset(tuple(t) for t in data.get("ablate", ())),
            encoder_pe=bool(data.get("encoder_pe", True)),
            decoder_pe=bool(data.get("decoder_pe", True)),
            shortlist=bool(data.get("shortlist", False)),
        )

    def describe(self) -> str:
        """A short human label, e.g. 'PE off, causal mask off, 2 heads ablated'."""
        parts = []
        if not self.positional_encoding or not (self.encoder_pe or self.decoder_pe):
            parts.append("PE off")
        elif not self.encoder_pe:
            parts.append("encoder PE off")
        elif not self.decoder_pe:
            parts.append("decoder PE off")
        if not self.causal_mask:
            parts.append("causal mask off")
        if not self.padding_mask:
            parts.append("padding mask off")
        if self.ablate:
            parts.append(f"{len(self.ablate)} head{'s' if len(self.ablate) != 1 else ''} ablated")
        if self.shortlist:
            parts.append("shortlist only")
        return ", ".join(parts) if parts else "as trained"


@dataclass(frozen=True)
class Record:
    """What a call's trace keeps besides every head's attention weights (``Bundle.translate`` and the others take
    one ``record``; hashable, so a cache can key on it).

    top_k: the alternatives kept per output step (fewer when the model scores fewer ids).
    qkv: every head's queries, keys and values.
    activations: the residual stream and each head's output (the ``embed.*``, ``*.out`` and ``*.heads`` sites).
    """

    top_k: int = 10
    qkv: bool = True
    activations: bool = False

    def __post_init__(self) -> None:
        top_k = self.top_k
        if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
            raise InputError(f"Record: top_k must be a whole number of at least 1, got {top_k!r}")
        for name in ("qkv", "activations"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"Record: {name} must be true or false, got {getattr(self, name)!r}")


def heads(kind: AttentionKind, layers: Iterable[int], head_ids: Iterable[int]) -> frozenset[Head]:
    """Every (kind, layer, head) triple of the given layers and heads — a helper for ``ablate``."""
    return frozenset((kind, l, h) for l in layers for h in head_ids)
