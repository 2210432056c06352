"""One recorded teacher-forced pass, and every attention block (and SSRU) of it decomposed (``core.analysis.alti``).

The pass goes through a ``Call`` with the analysis's options and the bundle's fast weights, as the bundle's runs do,
recording q/k/v and activations; each block is decomposed from what was recorded (attention weights, values, the
residual stream entering it, SSRU gates) and beside it is what the run computed there (from the recorded head
outputs through the block's own output projection and norm), so every decomposition is checked against the run.
Shared by ``contributions`` and ``value_norms``.
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from ..bundle import Bundle
from ..config import InferenceOptions, Record
from ..decoding.search import suppressed_columns
from ..errors import InputError
from ..recording.call import Call
from ..recording.recorder import Recorder
from ..recording.trace import Trace
from ..sites import (
    AttentionKind,
    attention_array,
    gate_site,
    layer_input_site,
    output_site,
    ssru_array,
)
from ..transformer.attention import MultiHeadAttention
from ..transformer.layers import SSRU
from ..transformer.model import Transformer
from .alti import Block, attention_block, ssru_block

BlockKey = tuple[AttentionKind, int]  # ('encoder', 0), ('decoder', 1) (an SSRU too), ('cross', 1)


@dataclass(frozen=True)
class Decomposed:
    """One block decomposed, beside what the run computed there (from its recorded head outputs or SSRU input)."""

    block: Block
    actual: Tensor  # (Tq, D)

    @property
    def error(self) -> float:
        """The largest |decomposed - actual| over the block's output."""
        return float((self.block.output - self.actual.to(self.block.output)).abs().max())


def as_float64(a: np.ndarray) -> Tensor:
    """A recorded array as a float64 CPU tensor (the decomposition's precision)."""
    return as_tensor(a, torch.float64)


def as_tensor(a: np.ndarray, dtype: torch.dtype) -> Tensor:
    """A recorded array as a CPU tensor of ``dtype`` (a copy: the trace's arrays are read-only)."""
    return torch.tensor(a, dtype=dtype)


def head_scale(
    options: InferenceOptions, kind: AttentionKind, layer: int, n_heads: int, dtype: torch.dtype = torch.float64
) -> Tensor:
    """(H,) each head's multiplier in a run with ``options``: 0 for a head switched off, else 1."""
    scale = torch.ones(n_heads, dtype=dtype)
    scale[list(options.ablated_heads(kind, layer))] = 0.0
    return scale


def attention_of(model: Transformer, kind: AttentionKind, layer: int) -> MultiHeadAttention:
    """The attention module of block (kind, layer); ValueError when the model has none there (an SSRU decoder)."""
    if kind == "encoder":
        module: MultiHeadAttention | None = list(model.encoder_layers)[layer].self_attn
    else:
        decoder = list(model.decoder_layers)[layer]
        module = decoder.cross_attn if kind == "cross" else decoder.self_attn
    if module is None:
        raise ValueError(f"this model has no {kind} attention in layer {layer} (an SSRU decoder)")
    return module


def decompose(model: Transformer, trace: Trace) -> dict[BlockKey, Decomposed]:
    """Every attention block (and SSRU) of one recorded pass decomposed, in the model's order (``iter_blocks``; this
    keeps every block's (Tq, K, D) vectors at once: for a long sentence, iterate instead)."""
    return dict(iter_blocks(model, trace))


@torch.no_grad()
def iter_blocks(model: Transformer, trace: Trace) -> Iterator[tuple[BlockKey, Decomposed]]:
    """Each attention block (and SSRU) of one recorded pass decomposed, one at a time, in the model's order.

    ``trace``: a teacher-forced pass recorded with ``qkv=True, activations=True`` (``recorded_pass``); its batch
    element ``trace.item``."""
    one = slice(trace.item, trace.item + 1)
    for key, d in iter_batch_blocks(model, trace, one):
        yield key, Decomposed(Block(d.block.vectors[0], d.block.constant[0]), d.actual[0])


@torch.no_grad()
def iter_batch_blocks(
    model: Transformer,
    trace: Trace,
    items: slice,
    dtype: torch.dtype = torch.float64,
    *,
    encoder: bool = True,
    skip_self: Container[int] = (),
) -> Iterator[tuple[BlockKey, Decomposed]]:
    """``iter_blocks`` of the batch elements ``items`` of a padded pass (``recorded_batch``) at once: every tensor
    with a leading batch axis (B, Tq, K, D) at the batch's padded lengths, computed in ``dtype``. With the padding
    and causal masks on, a padded key gets attention weight 0 (its vector is 0) and padded queries are never read by
    real ones, so each element's real rows and keys are its own pass's (``alti(..., keep=...)`` gives padding no
    share). ``encoder=False``: the decoder's blocks only (a trace whose encoder was not recorded). ``skip_self``:
    decoder layers whose self-attention (or SSRU) is not decomposed, nor yielded: the cross-attention after it reads
    the stream the run recorded there."""
    cfg = model.config
    pre = cfg.norm == "pre"
    options = trace.options

    def rows(name: str) -> Tensor:
        return as_tensor(trace.arrays[name][items], dtype)

    def attend(kind: AttentionKind, layer: int, norm: nn.Module, x: Tensor) -> Decomposed:
        attn = attention_of(model, kind, layer)
        heads = torch.from_numpy(np.array(trace.arrays[attention_array(kind, layer, "heads")][items]))
        total = x + attn.output(heads.to(model_device)).to("cpu", dtype)  # (B, Tq, D) residual + attention
        values = rows(attention_array(kind, layer, "v"))  # (B, H, Tk, dv)
        block = attention_block(
            rows(attention_array(kind, layer, "weights")),
            values,
            attn.out_proj,
            x,
            head_scale(options, kind, layer, values.shape[1], dtype),
            cross=kind == "cross",
            norm=None if pre else norm,
            total=total,
        )
        return Decomposed(block, _finish(norm, total, pre))

    model_device = next(model.parameters()).device
    for layer, enc in enumerate(model.encoder_layers if encoder else []):
        x = rows(layer_input_site("encoder", layer))
        yield ("encoder", layer), attend("encoder", layer, enc.self_attn_norm, x)
    for layer, dec in enumerate(model.decoder_layers):
        x = rows(layer_input_site("decoder", layer))
        if layer in skip_self:
            after = ssru_array(layer, "out") if dec.ssru is not None else attention_array("decoder", layer, "out")
            yield ("cross", layer), attend("cross", layer, dec.cross_attn_norm, rows(after))
            continue
        if dec.ssru is not None:
            gates = rows(gate_site(layer))
            each = [_ssru(dec.ssru, dec.self_attn_norm, x[b], gates[b], pre) for b in range(x.shape[0])]
            own = Decomposed(
                Block(torch.stack([d.block.vectors for d in each]), torch.stack([d.block.constant for d in each])),
                torch.stack([d.actual for d in each]),
            )
        else:
            own = attend("decoder", layer, dec.self_attn_norm, x)
        yield ("decoder", layer), own
        yield ("cross", layer), attend("cross", layer, dec.cross_attn_norm, own.actual)  # reads the self block's output


def _finish(norm: nn.Module, total: Tensor, pre: bool) -> Tensor:
    """The block's output as the layer computes it from ``total`` (its input + its sub-layer's output): itself with
    pre-norm, norm(total) with post-norm."""
    return total if pre else _apply(norm, total)


def _apply(module: nn.Module, x: Tensor) -> Tensor:
    """``module`` (a norm) on x (T, D) in its own dtype and device, back in x's dtype on the CPU."""
    p = next(module.parameters(), None)
    with torch.no_grad():
        return module(x if p is None else x.to(p)).to("cpu", x.dtype)


def _ssru(cell: SSRU, norm: nn.Module, x: Tensor, gates: Tensor, pre: bool) -> Decomposed:
    inputs = _apply(norm, x) if pre else x  # what the cell reads
    block = ssru_block(inputs, gates, cell.W.weight.detach().cpu(), x, None if pre else norm)
    with torch.no_grad():
        p = cell.W.weight
        h, _, _ = cell(inputs.to(p)[None], None)
    return Decomposed(block, _finish(norm, x + h[0].to("cpu", x.dtype), pre))


def recorded_pass(
    bundle: Bundle, src_ids: list[int], out_ids: list[int], options: InferenceOptions
) -> tuple[Trace, np.ndarray]:
    """One teacher-forced pass over ``out_ids`` recorded with q/k/v and activations, through a ``Call`` with
    ``options`` and the bundle's fast weights (as its runs): the trace and log p of each output id (T,)."""
    trace, (logprob,) = recorded_batch(bundle, [(src_ids, out_ids)], options)
    return trace, logprob


def recorded_batch(
    bundle: Bundle, rows: Sequence[tuple[Sequence[int], Sequence[int]]], options: InferenceOptions
) -> tuple[Trace, list[np.ndarray]]:
    """``recorded_pass`` of several (source ids, output ids) rows as ONE padded batch (``recorded_states``): the
    batch's trace and each row's log p of its output ids (T_i,) (``row_logprobs``)."""
    trace, states = recorded_states(bundle, rows, options)
    return trace, row_logprobs(bundle, [out_ids for _, out_ids in rows], states, options)


def recorded_states(
    bundle: Bundle,
    rows: Sequence[tuple[Sequence[int], Sequence[int]]],
    options: InferenceOptions,
    *,
    encoder: bool = True,
) -> tuple[Trace, Tensor]:
    """The recorded pass of ``recorded_batch`` without the vocabulary: sources and decoder inputs padded on the right,
    the source padding masked (``options.padding_mask``), later target positions hidden by the causal mask. The
    batch's trace (with both masks on, row i's first len(src_i) source and len(out_i) target positions are its own
    pass's, up to rounding) and the final decoder states of the real positions, row after row (N, D): what
    ``row_logprobs`` projects, for these rows alone or with other batches' (one projection for all of them).
    ``encoder=False``: the encoder runs with the same options but unrecorded (the trace holds the decoder's sites)."""
    if not rows or any(not out_ids for _, out_ids in rows):
        raise ValueError("recorded_batch needs at least one row, each with at least one output id")
    model, cfg = bundle.model, bundle.config
    recorder = Recorder(model, qkv=True, activations=True)
    src, keep = bundle.padded([list(src_ids) for src_ids, _ in rows])  # (B, Ts) each
    tgt, real = bundle.padded([[cfg.bos_id, *out_ids[:-1]] for _, out_ids in rows])  # (B, Tt)
    with torch.inference_mode():
        call = Call(options, recorder, bundle.fast).begin(model)  # one recorder for both halves
        encode = call if encoder else Call(options, fast=bundle.fast).begin(model)
        memory = model.encode(src, keep, encode)  # (B, Ts, D)
        states = model.decoder_states(tgt, memory, keep, call, tgt_keep=real)[real]  # (N, D): no padded position
    return recorder.freeze(bundle.tokenizer.piece), states


def row_logprobs(
    bundle: Bundle, outputs: Sequence[Sequence[int]], states: Tensor, options: InferenceOptions
) -> list[np.ndarray]:
    """Each row's log p of its output ids (T_i,), from the final decoder states of every row's real positions, row
    after row ((N, D), N the outputs' total length; ``recorded_states``), through a ``Call`` with ``options`` and
    the bundle's fast weights (``forced_logprob``)."""
    ids = torch.tensor([i for out_ids in outputs for i in out_ids], device=bundle.device)  # (N,)
    with torch.inference_mode():
        chosen = forced_logprob(bundle.model, states, ids, Call(options, fast=bundle.fast))  # (N,)
    ends = np.cumsum([len(out_ids) for out_ids in outputs])[:-1]
    return np.split(chosen.cpu().numpy().astype(np.float64), ends)


# The most positions ``forced_logprob`` projects on the vocabulary at once, in blocks of like sizes: the (rows, V)
# logits of one block at a time (64 x 32000 float32: 8 MiB), not of a whole batch's positions (a 4096-position
# budget: 500 MiB). No slower than one block here (32 pairs' 297 positions, distilled-en-pt, one thread).
LOGPROB_ROWS = 64


def forced_logprob(model: Transformer, states: Tensor, ids: Tensor, call: Call) -> Tensor:
    """log p of ``ids`` (N,) after the final decoder states ``states`` (N, D) (the real positions only: no padded
    one is projected on the vocabulary); -inf for an id decoding never chooses (``suppress``: applied after the
    softmax, the others not renormalised). Projected in blocks of at most ``LOGPROB_ROWS`` positions."""
    blocks = -(-states.shape[0] // LOGPROB_ROWS)  # as few as fit, of like sizes
    parts = []
    for rows, chosen_ids in zip(states.tensor_split(blocks), ids.tensor_split(blocks), strict=True):
        logp = model.logits(rows, call).float().log_softmax(-1)  # (rows, V); faster here than logsumexp
        parts.append(logp.gather(-1, chosen_ids[:, None])[:, 0])
    chosen = torch.cat(parts)  # (N,)
    banned = suppressed_columns(model.config, None, ids.device)
    return chosen if banned is None else chosen.masked_fill(torch.isin(ids, banned), float("-inf"))


def scored_ids(
    bundle: Bundle, text: str, translation: str | None, options: InferenceOptions, truncate: bool = False
) -> tuple[list[int], list[int], bool]:
    """What an analysis of ``text`` scores: the source ids, the output ids (the model's own greedy translation, or
    ``translation`` encoded), and whether each output token needs a pass of its own (greedy with the causal mask
    off: each step saw only the words before it). ``truncate``: a source beyond the model's limit is cut as
    ``Bundle.translate(truncate=True)`` cuts it (else InputError). InputError on unusable text or options."""
    options.whole_vocabulary("contributions")
    src_ids, _ = bundle.encode_source(text, truncate=truncate)
    if translation is None:
        out = bundle.translate(text, options, truncate=truncate, record=Record(qkv=False))
        return src_ids, [int(i) for i in out.trace[output_site("ids")]], not options.causal_mask
    if not isinstance(translation, str):
        raise InputError(f"translation must be text (a str) or None, got {type(translation).__name__}")
    return src_ids, bundle.encode_target(translation), False
