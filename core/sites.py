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

Other layer sites::

    encoder.{layer}.out            (B, Ts, D) the residual stream after an encoder layer    (``layer_site``)
    decoder.{layer}.out            (B, Tt, D) the residual stream after a decoder layer
    decoder.{layer}.ssru.gate      (B, Tt, D) SSRU forget gates (SSRU decoders)            (``gate_site``)

Sites outside the layers::

    embed.src, embed.tgt           (B, T, D) token embedding * sqrt(D) (if scale_embedding) + positional encoding
    mask.{kind}                    (B, Tq, Tk) bool, the mask applied (True = may attend)
    mask.{kind}.padding, mask.decoder.causal   its parts
    pe.src, pe.tgt                 (T, D) positional-encoding rows added (zeros when switched off)
    pe.src.bias, pe.tgt.bias       (H, Tq, Tk) the relative position bias the encoder's / decoder's self-attention
                                   adds to its scores (T5; zeros when switched off)   (``position_bias_site``)
    keep.src, keep.tgt             (B, T) bool, True = a real token (not padding)
    ids.src, ids.tgt               (B, T) token ids: source, decoder inputs
    output.ids, output.probs       (B, steps) the token chosen at each step and its probability
    output.top_ids, output.top_probs   (B, steps, k) the k most likely tokens at each step

An attention *kind* ('encoder', 'decoder', 'cross') names a block type; a *stack* ('encoder', 'decoder') names
where the layer is: cross-attention is a kind that lives in the decoder stack (``stack_of``).

Older traces (before this grammar) named cross-attention ``cross.{layer}`` and the SSRU gates
``ssru.{layer}.gate``; ``migrate_site_name`` renames those, and ``Trace.load`` applies it.
"""

from __future__ import annotations

import re
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


def gate_site(layer: int) -> str:
    """The SSRU forget gates of decoder ``layer``: 'decoder.1.ssru.gate'."""
    return f"{layer_name('decoder', layer)}.ssru.gate"


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


def layer_input_site(stack: Stack, layer: int) -> str:
    """The residual stream entering a layer: the embeddings for the first ('embed.src' / 'embed.tgt'), else the
    previous layer's output ('encoder.1.out' enters encoder layer 2)."""
    if layer == 0:
        return embed_site("src" if stack == "encoder" else "tgt")
    return layer_site(stack, layer - 1)


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
