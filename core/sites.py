"""Site names: ONE vocabulary for everything a call records or changes, built only here.

The grammar. Everything inside a layer is ``<stack>.<layer>.<part>[.<what>]``: ``stack`` is 'encoder' or
'decoder', ``layer`` counts from 0, ``part`` names the block in that layer, ``what`` the array recorded there.
Everything outside the layers is ``<name>.<which>`` (``embed.src``, ``mask.cross``, ``output.ids``).

Attention sites (one per attention block; ``attention_site(kind, layer)``)::

    encoder.{layer}.self     encoder self-attention                  (kind 'encoder')
    decoder.{layer}.self     decoder masked self-attention           (kind 'decoder')
    decoder.{layer}.cross    decoder cross-attention                 (kind 'cross')

Arrays under an attention site (``Trace`` keys are ``site + "." + array``; ``attention_array``)::

    weights     (B, H, Tq, Tk) after softmax, before dropout; masked entries 0
    scores      (B, H, Tq, Tk) QK^T/sqrt(d_k) after the mask, masked entries -inf
    scores_raw  (B, H, Tq, Tk) the same before the mask
    q, k, v     (B, H, Tq|Tk, dh) per-head queries, keys, values (recorded with ``qkv=True``)
    step_rows   (B, H, steps, Tk) the row each decoding step computed, when each step recomputed the prefix
    heads       (B, H, Tq, dh) each head's output before the output projection (an intervention site)
    x           (B, Tq, D) what the block's queries read: the stream, normed first with pre-norm (recorded with
                the activations, as ``out``)
    out         (B, Tq, D) the residual stream after the block's sub-layer

Other layer sites::

    encoder.{layer}.out            (B, Ts, D) the residual stream after an encoder layer    (``layer_site``)
    decoder.{layer}.out            (B, Tt, D) the residual stream after a decoder layer
    decoder.{layer}.ssru.gate      (B, Tt, D) SSRU forget gates (SSRU decoders)            (``gate_site``)
    decoder.{layer}.ssru.x, .out   (B, Tt, D) what the SSRU reads and the stream after it  (``ssru_array``)

Sites outside the layers::

    embed.src, embed.tgt           (B, T, D) token embedding * sqrt(D) (if scale_embedding) + positional encoding
    encoder.out                    (B, Ts, D) the encoder's output (after its final norm, pre-norm models): what
                                   every cross-attention's keys and values read          (``memory_site``)
    mask.{kind}                    (B, Tq, Tk) bool, the mask applied (True = may attend)
    mask.{kind}.padding, mask.decoder.causal   its parts
    pe.src, pe.tgt                 (T, D) positional-encoding rows added (zeros when switched off)
    pe.src.bias, pe.tgt.bias       (H, Tq, Tk) the relative position bias the encoder's / decoder's self-attention
                                   adds to its scores (T5; zeros when switched off)   (``position_bias_site``)
    keep.src, keep.tgt             (B, T) bool, True = a real token (not padding)
    ids.src, ids.tgt               (B, T) token ids: source, decoder inputs
    output.ids, output.probs       (B, steps) the token chosen at each step and its probability
    output.top_ids, output.top_probs   (B, steps, k) the k most likely tokens at each step
    output.draw.*                  what a sampled step drew from (``draw_site``; only when sampling): top_probs
                                   (B, steps, k) each top token's probability in the distribution drawn from
                                   (after temperature and the cut; 0 = cut or banned), top_cut (B, steps, k) bool
                                   whether the top-k / top-p cut removed it, prob (B, steps) the taken token's
                                   probability there, rank (B, steps) its rank in the model's distribution (1 +
                                   the tokens more probable), kept / cut (B, steps) the tokens left to draw from and
                                   those the cut removed

An attention *kind* ('encoder', 'decoder', 'cross') names a block type; a *stack* ('encoder', 'decoder') names
where the layer is: cross-attention is a kind that lives in the decoder stack (``stack_of``).

Older traces (before this grammar) named cross-attention ``cross.{layer}`` and the SSRU gates
``ssru.{layer}.gate``; ``migrate_site_name`` renames those, and ``Trace.load`` applies it.

The registry. ``SITES`` holds one ``SiteSpec`` per kind of site: its name pattern, how ``Recorder.freeze`` joins
the chunks each decoding step records, its axes (``Trace.load`` checks them) and whether axis 0 is the batch.
``spec_of(name)``, ``site_stack(name)`` (the decoder's sites are recorded again when a step recomputes the prefix)
and ``site_axes(name)`` read it; no code elsewhere tests a name's prefix or suffix, or types a name
(tests/core/test_sites.py scans for them). Adding a site is one entry, with its builder here, plus the line that
records it (docs/engine.md).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal, get_args

AttentionKind = Literal["encoder", "decoder", "cross"]
Side = Literal["src", "tgt"]
Stack = Literal["encoder", "decoder"]

ATTENTION_KINDS: tuple[AttentionKind, ...] = get_args(AttentionKind)
SIDES: tuple[Side, ...] = get_args(Side)
STACKS: tuple[Stack, ...] = get_args(Stack)


def stack_of(kind: AttentionKind) -> Stack:
    """The stack an attention kind's blocks live in: cross-attention is in the decoder."""
    return "encoder" if kind == "encoder" else "decoder"


def layer_name(stack: Stack, layer: int) -> str:
    """The prefix every site inside a layer starts with: 'encoder.3', 'decoder.0'."""
    if stack not in STACKS:
        raise ValueError(f"stack must be one of {STACKS}, got {stack!r}")
    return f"{stack}.{layer}"


def parse_layer(name: str) -> tuple[Stack, int] | None:
    """The layer a name inside the layers belongs to: 'decoder.1.cross.weights' -> ('decoder', 1), 'encoder.0' ->
    ('encoder', 0); None for a name outside them ('embed.src', 'encoder.out')."""
    stack, _, rest = name.partition(".")
    index = rest.partition(".")[0]
    if stack == "encoder" and index.isdigit():
        return "encoder", int(index)
    if stack == "decoder" and index.isdigit():
        return "decoder", int(index)
    return None


def attention_site(kind: AttentionKind, layer: int) -> str:
    """'encoder.3.self', 'decoder.1.self' or 'decoder.0.cross'."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"kind must be one of {ATTENTION_KINDS}, got {kind!r}")
    return f"{layer_name(stack_of(kind), layer)}.{'cross' if kind == 'cross' else 'self'}"


def attention_array(kind: AttentionKind, layer: int, what: str) -> str:
    """An array under an attention site: attention_array('cross', 1, 'weights') -> 'decoder.1.cross.weights'."""
    return f"{attention_site(kind, layer)}.{what}"


def parse_attention_site(site: str) -> tuple[AttentionKind, int]:
    """The inverse of ``attention_site``: 'decoder.1.cross' -> ('cross', 1). Raises ValueError on anything else."""
    parts = site.split(".")
    if len(parts) == 3 and parts[0] in STACKS and parts[1].isdigit():
        if parts[2] == "self":
            return ("encoder" if parts[0] == "encoder" else "decoder"), int(parts[1])
        if parts[2] == "cross" and parts[0] == "decoder":
            return "cross", int(parts[1])
    raise ValueError(
        f"{site!r} is not an attention site (expected e.g. 'encoder.0.self', 'decoder.1.self', 'decoder.2.cross')"
    )


def layer_site(stack: Stack, layer: int) -> str:
    """The residual stream after a layer: 'encoder.2.out', 'decoder.0.out'."""
    return f"{layer_name(stack, layer)}.out"


def ssru_site(layer: int) -> str:
    """The SSRU that stands in decoder ``layer`` where self-attention would: 'decoder.1.ssru'."""
    return f"{layer_name('decoder', layer)}.ssru"


def ssru_array(layer: int, what: str) -> str:
    """An array under an SSRU site: ssru_array(1, 'gate') -> 'decoder.1.ssru.gate' (each needs a registry entry)."""
    return f"{ssru_site(layer)}.{what}"


def gate_site(layer: int) -> str:
    """The SSRU forget gates of decoder ``layer``: 'decoder.1.ssru.gate'."""
    return ssru_array(layer, "gate")


def embed_site(side: Side) -> str:
    return f"embed.{side}"


def mask_site(kind: AttentionKind, part: str | None = None) -> str:
    """The mask an attention kind applied: 'mask.cross'; with ``part`` one of its parts: 'mask.decoder.causal'."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"kind must be one of {ATTENTION_KINDS}, got {kind!r}")
    return f"mask.{kind}" + (f".{part}" if part else "")


def pe_site(side: Side) -> str:
    return f"pe.{side}"


def position_bias_site(side: Side) -> str:
    """T5's relative position bias of the stack reading ``side``: 'pe.src.bias' (encoder), 'pe.tgt.bias' (decoder)."""
    return f"{pe_site(side)}.bias"


def ids_site(side: Side) -> str:
    return f"ids.{side}"


def keep_site(side: Side) -> str:
    return f"keep.{side}"


def output_site(what: str) -> str:
    """What each decoding step chose: output_site('ids') -> 'output.ids' (also 'probs', 'top_ids', 'top_probs')."""
    return f"output.{what}"


def draw_site(what: DrawArray) -> str:
    """What a sampled step drew from: draw_site('prob') -> 'output.draw.prob' (``DRAW_ARRAYS``)."""
    return f"output.draw.{what}"


def layer_input_site(stack: Stack, layer: int) -> str:
    """The residual stream entering a layer: the embeddings for the first ('embed.src' / 'embed.tgt'), else the
    previous layer's output ('encoder.1.out' enters encoder layer 2)."""
    if layer == 0:
        return embed_site("src" if stack == "encoder" else "tgt")
    return layer_site(stack, layer - 1)


def memory_site() -> str:
    """The encoder's output as the decoder reads it (after the final norm of a pre-norm encoder): 'encoder.out'."""
    return "encoder.out"


def stream_sites(n_encoder_layers: int, n_decoder_layers: int) -> list[str]:
    """The residual stream of a model, in order: each stack's input, then each layer's output ('embed.src',
    'encoder.0.out', ..., 'embed.tgt', 'decoder.0.out', ...): the sites ``Patch`` and ``keep_grad`` take besides
    head outputs."""
    layers = {"encoder": n_encoder_layers, "decoder": n_decoder_layers}
    return [layer_input_site(stack, i) for stack in STACKS for i in range(layers[stack] + 1)]


_OLD_CROSS = re.compile(r"cross\.(\d+)((?:\..+)?)")
_OLD_GATE = re.compile(r"ssru\.(\d+)\.gate")


def migrate_site_name(name: str) -> str:
    """A site or array name written before this grammar, in today's form; any other name unchanged:
    'cross.1.weights' -> 'decoder.1.cross.weights', 'ssru.0.gate' -> 'decoder.0.ssru.gate'."""
    if m := _OLD_CROSS.fullmatch(name):
        return attention_site("cross", int(m[1])) + m[2]
    if m := _OLD_GATE.fullmatch(name):
        return gate_site(int(m[1]))
    return name


# ---------------------------------------------------------------- builders for the remaining names
AttentionArray = Literal["weights", "scores", "scores_raw", "q", "k", "v", "step_rows", "heads", "x", "out"]
OutputArray = Literal["ids", "probs", "top_ids", "top_probs"]
DrawArray = Literal["top_probs", "top_cut", "prob", "rank", "kept", "cut"]
MaskPart = Literal["padding", "causal"]

ATTENTION_ARRAYS: tuple[AttentionArray, ...] = get_args(AttentionArray)
ATTENTION_MAPS: tuple[AttentionArray, ...] = ("weights", "scores", "scores_raw")  # (B, H, Tq, Tk), every block
OUTPUT_ARRAYS: tuple[OutputArray, ...] = get_args(OutputArray)
DRAW_ARRAYS: tuple[DrawArray, ...] = get_args(DrawArray)
MASK_PARTS: tuple[MaskPart, ...] = get_args(MaskPart)


@functools.cache  # asked for every block at every decoding step of a recorded call
def array_of(site: str, what: AttentionArray) -> str:
    """An array under attention site ``site``: array_of('decoder.1.cross', 'heads') -> 'decoder.1.cross.heads'."""
    parse_attention_site(site)
    return f"{site}.{what}"


def parse_attention_array(name: str) -> tuple[str, AttentionArray]:
    """The inverse of ``array_of``: 'decoder.1.cross.heads' -> ('decoder.1.cross', 'heads'). ValueError otherwise."""
    site, _, what = name.rpartition(".")
    for known in ATTENTION_ARRAYS:
        if what == known:
            parse_attention_site(site)
            return site, known
    raise ValueError(f"{name!r} is not an array of an attention site (arrays: {', '.join(ATTENTION_ARRAYS)})")


def heads_of(name: str) -> str | None:
    """The site part of a head-outputs name ('decoder.1.cross.heads' -> 'decoder.1.cross'); None for a name that
    does not end in '.heads' (a residual-stream site). The part is not checked: callers ask the model's shape (or
    ``parse_attention_site``) whether it is an attention site, and name it in their message."""
    site, dot, what = name.rpartition(".")
    return site if dot and what == "heads" else None


def analysis_site(*parts: str) -> str:
    """Where an analysis keeps an array in a trace (``Trace.with_analysis``): analysis_site('importance', 'cross',
    'delta') -> 'analysis.importance.cross.delta'."""
    if not parts or not all(parts):
        raise ValueError(f"an analysis array is named by one or more non-empty parts, got {parts!r}")
    return ".".join(("analysis", *parts))


# ---------------------------------------------------------------- the registry: what each kind of site is
# How a site's chunks join when ``Recorder.freeze`` stitches one call's record (incremental decoding records one
# chunk per step):
#   rows       along the query / position axis (-2); ragged keys right-padded with ``fill``
#   positions  along the first axis: (T, D) positional rows
#   tokens     along the last axis: (B, T) ids
#   steps      one chunk per decoding step, stacked on axis 1: (B,) or (B, k) -> (B, steps[, k])
#   latest     the last chunk covers every earlier one (a KV cache's keys and values)
#   derived    not recorded: made at freeze from other arrays (keep flags, a mask's parts)
#   added      not recorded: added to a frozen trace (``Trace.with_analysis``)
#   none       a name, not an array: the prefix of the arrays under it (an attention block, a layer)
Join = Literal["rows", "positions", "tokens", "steps", "latest", "derived", "added", "none"]
Dtype = Literal["float32", "int64", "bool"]

# the placeholders a pattern may hold: what each matches, and the values ``SiteSpec.examples`` fills in
_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "site": (
        r"encoder\.\d+\.self|decoder\.\d+\.(?:self|cross)",
        tuple(attention_site(k, layer) for k in ATTENTION_KINDS for layer in (0, 1)),
    ),
    "stack": ("|".join(STACKS), STACKS),
    "layer": (r"\d+", ("0", "1")),
    "side": ("|".join(SIDES), SIDES),
    "kind": ("|".join(ATTENTION_KINDS), ATTENTION_KINDS),
    "part": ("|".join(MASK_PARTS), MASK_PARTS),
    "count": ("rank|kept|cut", ("rank", "kept", "cut")),
    "name": (r"[^.\s]+(?:\.[^.\s]+)*", ("importance.cross.delta",)),
}
_FIELD = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class SiteSpec:
    """One kind of site: how its names are written, how its recorded chunks join, the axes of its array.

    pattern: the names, with placeholders from ``_FIELDS`` ('{site}.weights': every attention block's weights).
    dims: the array's axes: B batch, H heads, D d_model, Ts / Tt source / target length, T the length of the side
    or stack the name reads ('ids.src': Ts; 'decoder.0.out': Tt), Tq / Tk the query / key length of the attention
    kind it belongs to ('mask.cross': Tt, Ts); any other letter is any size. () for names that hold no array.
    batched: whether axis 0 is the batch (positional rows and analysis results hold one sentence).
    shares: for 'scores_raw', the sibling array it is when nothing was masked (one array, not two copies).
    """

    pattern: str
    join: Join
    dims: tuple[str, ...] = ()
    fill: float | bool = 0.0
    dtype: Dtype = "float32"
    batched: bool = True
    shares: AttentionArray | None = None

    @property
    def regex(self) -> re.Pattern[str]:
        return _regex(self.pattern)

    def examples(self) -> tuple[str, ...]:
        """Names of this kind, each placeholder filled with a few real values ('encoder.0.self.weights', ...)."""
        names = [""]
        for literal, field in zip(_FIELD.split(self.pattern)[::2], [*_FIELD.findall(self.pattern), None], strict=True):
            names = [n + literal for n in names]
            if field is not None:
                names = [n + value for n in names for value in _FIELDS[field][1]]
        return tuple(names)


@functools.cache
def _regex(pattern: str) -> re.Pattern[str]:
    parts = _FIELD.split(pattern)  # literal, field, literal, field, ...
    return re.compile(
        "".join(re.escape(p) if i % 2 == 0 else f"(?:{_FIELDS[p][0]})" for i, p in enumerate(parts)), re.ASCII
    )


_ATTENTION = ("B", "H", "Tq", "Tk")
_PER_HEAD_Q, _PER_HEAD_K = ("B", "H", "Tq", "dh"), ("B", "H", "Tk", "dh")
_STREAM = ("B", "T", "D")
_NEG_INF = float("-inf")

LAYER = SiteSpec("{stack}.{layer}", "none")
ATTENTION = SiteSpec("{site}", "none")
SSRU = SiteSpec("decoder.{layer}.ssru", "none")
WEIGHTS = SiteSpec("{site}.weights", "rows", _ATTENTION, fill=0.0)
SCORES = SiteSpec("{site}.scores", "rows", _ATTENTION, fill=_NEG_INF)
SCORES_RAW = SiteSpec("{site}.scores_raw", "rows", _ATTENTION, fill=_NEG_INF, shares="scores")
QUERIES = SiteSpec("{site}.q", "rows", _PER_HEAD_Q)
KEYS = SiteSpec("{site}.k", "latest", _PER_HEAD_K)
VALUES = SiteSpec("{site}.v", "latest", _PER_HEAD_K)
STEP_ROWS = SiteSpec("{site}.step_rows", "rows", ("B", "H", "steps", "Tk"))
HEADS = SiteSpec("{site}.heads", "rows", _PER_HEAD_Q)
LAYER_OUT = SiteSpec("{stack}.{layer}.out", "rows", _STREAM)
GATE = SiteSpec("decoder.{layer}.ssru.gate", "rows", _STREAM)
SUBLAYER_X = SiteSpec("{site}.x", "rows", _STREAM)  # recorded with the activations (``core.transformer.blocks``)
SUBLAYER_OUT = SiteSpec("{site}.out", "rows", _STREAM)
SSRU_X = SiteSpec("decoder.{layer}.ssru.x", "rows", _STREAM)
SSRU_OUT = SiteSpec("decoder.{layer}.ssru.out", "rows", _STREAM)
MEMORY = SiteSpec("encoder.out", "rows", _STREAM)
EMBED = SiteSpec("embed.{side}", "rows", _STREAM)
MASK = SiteSpec("mask.{kind}", "rows", ("B", "Tq", "Tk"), fill=False, dtype="bool")
MASK_PART = SiteSpec("mask.{kind}.{part}", "derived", ("B", "Tq", "Tk"), dtype="bool")
PE = SiteSpec("pe.{side}", "positions", ("T", "D"), batched=False)
POSITION_BIAS = SiteSpec("pe.{side}.bias", "rows", ("H", "Tq", "Tk"), batched=False)
KEEP = SiteSpec("keep.{side}", "derived", ("B", "T"), dtype="bool")
IDS = SiteSpec("ids.{side}", "tokens", ("B", "T"), dtype="int64")
OUTPUT_IDS = SiteSpec("output.ids", "steps", ("B", "Tt"), dtype="int64")
OUTPUT_PROBS = SiteSpec("output.probs", "steps", ("B", "Tt"))
OUTPUT_TOP_IDS = SiteSpec("output.top_ids", "steps", ("B", "Tt", "k"), dtype="int64")
OUTPUT_TOP_PROBS = SiteSpec("output.top_probs", "steps", ("B", "Tt", "k"))
DRAW_TOP_PROBS = SiteSpec("output.draw.top_probs", "steps", ("B", "Tt", "k"))
DRAW_TOP_CUT = SiteSpec("output.draw.top_cut", "steps", ("B", "Tt", "k"), dtype="bool")
DRAW_PROB = SiteSpec("output.draw.prob", "steps", ("B", "Tt"))
DRAW_COUNT = SiteSpec("output.draw.{count}", "steps", ("B", "Tt"), dtype="int64")
ANALYSIS = SiteSpec("analysis.{name}", "added", batched=False)

SITES: tuple[SiteSpec, ...] = (
    LAYER, ATTENTION, SSRU, WEIGHTS, SCORES, SCORES_RAW, QUERIES, KEYS, VALUES, STEP_ROWS, HEADS, LAYER_OUT, GATE,
    SUBLAYER_X, SUBLAYER_OUT, SSRU_X, SSRU_OUT, MEMORY,
    EMBED, MASK, MASK_PART, PE, POSITION_BIAS, KEEP, IDS,
    OUTPUT_IDS, OUTPUT_PROBS, OUTPUT_TOP_IDS, OUTPUT_TOP_PROBS, DRAW_TOP_PROBS, DRAW_TOP_CUT, DRAW_PROB, DRAW_COUNT,
    ANALYSIS,
)  # fmt: skip


@functools.cache
def _lookup(name: str) -> SiteSpec | None:
    matches = [spec for spec in SITES if spec.regex.fullmatch(name)]
    assert len(matches) <= 1, f"{name!r} matches more than one site pattern: {[s.pattern for s in matches]}"
    return matches[0] if matches else None


def is_site(name: str) -> bool:
    """Whether ``name`` is written in the site grammar (a recorded array, an attention block or a layer)."""
    return _lookup(name) is not None


def spec_of(name: str) -> SiteSpec:
    """The kind of site ``name`` is: spec_of('decoder.1.cross.weights') is WEIGHTS. KeyError for any other name."""
    spec = _lookup(name)
    if spec is None:
        raise KeyError(f"{name!r} is not a site name (e.g. {', '.join(s.examples()[0] for s in SITES[2:8])} ...)")
    return spec


def is_batched(name: str) -> bool:
    """Whether axis 0 of the array at ``name`` is the batch: not for positional rows and analysis results (one
    sentence's); a name outside the grammar, which only a hand-made trace holds, counts as batched."""
    return not is_site(name) or spec_of(name).batched


def _kind_of(name: str) -> AttentionKind | None:
    """The attention kind whose queries and keys a site's axes run along (a stack's own self-attention for sites
    that are not attention's); None for the sites outside both stacks (the output, analyses)."""
    head, _, rest = name.partition(".")
    if head in STACKS:  # a layer site: '<stack>.<layer>.<part>...'
        parts = rest.split(".")
        return "cross" if len(parts) > 1 and parts[1] == "cross" else ("encoder" if head == "encoder" else "decoder")
    which = rest.split(".")[0]
    for kind in ATTENTION_KINDS:  # 'mask.<kind>...'
        if which == kind:
            return kind
    if which in SIDES:  # '<name>.<side>...': the stack reading that side
        return "encoder" if which == "src" else "decoder"
    return None


@functools.cache
def site_stack(name: str) -> Stack | None:
    """The stack that records site ``name``: 'encoder' for the source side, 'decoder' for the target side
    ('mask.cross', 'pe.tgt.bias', 'decoder.0.out'); None outside both (the output, analyses). A decoding step that
    recomputes the whole prefix records the decoder's sites again (``Recorder.restart_decoder``)."""
    spec_of(name)
    kind = _kind_of(name)
    return None if kind is None else stack_of(kind)


@functools.cache
def site_axes(name: str) -> tuple[str, ...]:
    """The axes of the array at ``name``, lengths resolved to Ts / Tt: site_axes('mask.cross') -> ('B', 'Tt', 'Ts')."""
    dims = spec_of(name).dims
    kind = _kind_of(name)
    query = "Ts" if kind == "encoder" else "Tt"
    key = "Tt" if kind == "decoder" else "Ts"
    return tuple({"T": query, "Tq": query, "Tk": key}.get(d, d) for d in dims)
