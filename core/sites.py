"""Site names: ONE vocabulary for everything a call records or changes.

Attention sites (one per attention block)::

    encoder.{layer}.self     encoder self-attention
    decoder.{layer}.self     decoder masked self-attention
    cross.{layer}            decoder cross-attention

Arrays under an attention site (``Trace`` keys are ``site + "." + array``)::

    weights     (B, H, Tq, Tk) after softmax, before dropout; masked entries 0
    scores      (B, H, Tq, Tk) QK^T/sqrt(d_k) after the mask, masked entries -inf
    scores_raw  (B, H, Tq, Tk) the same before the mask
    q, k, v     (B, H, Tq|Tk, dh) per-head queries, keys, values (recorded with ``qkv=True``)
    step_rows   (B, H, steps, Tk) the row each decoding step computed, when each step recomputed the prefix
    heads       (B, H, Tq, dh) each head's output before the output projection (an intervention site)

Other sites::

    embed.src, embed.tgt           (B, T, D) token embedding * sqrt(D) (if scale_embedding) + positional encoding
    encoder.{layer}.out            (B, Ts, D) the residual stream after an encoder layer
    decoder.{layer}.out            (B, Tt, D) the residual stream after a decoder layer
    mask.{kind}                    (B, Tq, Tk) bool, the mask applied (True = may attend)
    mask.{kind}.padding, mask.decoder.causal   its parts
    pe.src, pe.tgt                 (T, D) positional-encoding rows added (zeros when switched off)
    ssru.{layer}.gate              (B, Tt, D) SSRU forget gates (SSRU decoders)
    keep.src, keep.tgt             (B, T) bool, True = a real token (not padding)
    ids.src, ids.tgt               (B, T) token ids: source, decoder inputs
    output.ids, output.probs       (B, steps) the token chosen at each step and its probability
    output.top_ids, output.top_probs   (B, steps, k) the k most likely tokens at each step
"""

from __future__ import annotations

from typing import Literal, get_args

AttentionKind = Literal["encoder", "decoder", "cross"]
Side = Literal["src", "tgt"]
Stack = Literal["encoder", "decoder"]

ATTENTION_KINDS: tuple[AttentionKind, ...] = get_args(AttentionKind)
SIDES: tuple[Side, ...] = get_args(Side)


def attention_site(kind: AttentionKind, layer: int) -> str:
    """'encoder.3.self', 'decoder.1.self' or 'cross.0'."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"kind must be one of {ATTENTION_KINDS}, got {kind!r}")
    return f"cross.{layer}" if kind == "cross" else f"{kind}.{layer}.self"


def parse_attention_site(site: str) -> tuple[AttentionKind, int]:
    """The inverse of ``attention_site``: 'cross.1' -> ('cross', 1). Raises ValueError on anything else."""
    parts = site.split(".")
    if len(parts) == 2 and parts[0] == "cross" and parts[1].isdigit():
        return "cross", int(parts[1])
    if len(parts) == 3 and parts[0] in ("encoder", "decoder") and parts[1].isdigit() and parts[2] == "self":
        return ("encoder" if parts[0] == "encoder" else "decoder"), int(parts[1])
    raise ValueError(f"{site!r} is not an attention site (expected e.g. 'encoder.0.self', 'decoder.1.self', 'cross.2')")


def layer_site(stack: Stack, layer: int) -> str:
    """The residual stream after a layer: 'encoder.2.out', 'decoder.0.out'."""
    return f"{stack}.{layer}.out"


def embed_site(side: Side) -> str:
    return f"embed.{side}"


def layer_input_site(stack: Stack, layer: int) -> str:
    """The residual stream entering a layer: the embeddings for the first ('embed.src' / 'embed.tgt'), else the
    previous layer's output ('encoder.1.out' enters encoder layer 2)."""
    if layer == 0:
        return embed_site("src" if stack == "encoder" else "tgt")
    return layer_site(stack, layer - 1)
