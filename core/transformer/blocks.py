"""ONE implementation of each layer's math, run over resolved weights (x-transformers' way).

``decoder_layer`` is THE decoder layer — masked self-attention (or Marian's SSRU), cross-attention, feed-forward,
each a residual sub-layer (post-norm, the paper's, or pre-norm) — and ``encoder_layer`` the encoder's. They read
their matrices from small resolved-weights objects (``DecoderWeights``, ``EncoderWeights``, ``AttentionWeights``,
``FFNWeights``), in which every projection is a ``Linear`` triple ``(fn, weight, bias)`` that computes
``fn(x, weight, bias) = x W^T + b``. Two callers resolve them:

* the modules of ``core.transformer.layers``, at each call: their own tensors with the call's linear (``F.linear``, or
  ``FastWeights.linear``): the reference path, training, teacher-forced passes, the encoder;
* the decoding plan of ``core.fast.plan``, once per decoding call: ``FastWeights``' packed float16 copies, Q/K/V and the
  SSRU's W / W_f fused into one matrix each, and ``bmm`` operands for recorded attention (``zeros``).

How a matrix is stored or fused belongs to the weights (``Projections``: one fused product and a split, or one
product per part), never to the math: both paths run the same lines and record the same sites.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .attention import AttentionWeights, Linear, Projections, Scoring, Tap, apply, attend, flat_kv

if TYPE_CHECKING:
    from ..recording.recorder import Recorder
    from .state import LayerState


class Norm(NamedTuple):
    """A norm's parameters as the layers apply them (``normalize``): LayerNorm (weight, bias) or RMSNorm (weight)."""

    weight: Tensor
    bias: Tensor | None  # None with RMSNorm
    eps: float
    rms: bool = False  # x / sqrt(mean(x^2) + eps) * weight: no mean subtracted, no bias (T5LayerNorm)


class Masks(NamedTuple):
    """What a decoder layer's attention blocks add to their scores, made once per call for every layer:
    the masks (broadcastable to (B, T, Tk), True = may attend; None = nothing masked), the self-attention's
    position bias ((1, H, T, Tk), T5's relative bias; None = none) and the positions that are not padding ((B, T);
    None = all: the feed-forward runs on these alone)."""

    self_mask: Tensor | None
    cross_mask: Tensor | None
    self_bias: Tensor | None = None
    real: Tensor | None = None


def normalize(x: Tensor, norm: Norm) -> Tensor:
    """norm(x) over the last axis: x (..., D) -> (..., D). Calls the C bindings (no module overhead)."""
    if norm.rms:
        return torch.rms_norm(x, (x.shape[-1],), norm.weight, norm.eps)
    return torch.layer_norm(x, (x.shape[-1],), norm.weight, norm.bias, norm.eps)


def sublayer_input(x: Tensor, norm: Norm, pre: bool) -> Tensor:
    """What a sub-layer reads: norm(x) with pre-norm, x itself with post-norm (the paper's)."""
    return normalize(x, norm) if pre else x


def sublayer_output(x: Tensor, y: Tensor, norm: Norm, pre: bool) -> Tensor:
    """The residual connection around a sub-layer's output y: x + y with pre-norm, norm(x + y) with post-norm."""
    return x + y if pre else normalize(x + y, norm)


class Sites(NamedTuple):
    """Where one sub-layer records (``core.sites``): its block ('decoder.1.cross'; an SSRU's 'decoder.1.ssru'), what
    the block reads (``x``: the stream, normed first with pre-norm) and the stream after the sub-layer (``out``); the
    last two with the activations only."""

    block: str
    x: str
    out: str


@dataclass(frozen=True, slots=True)
class FFNWeights:
    """The feed-forward block resolved: act(x W1 + b1) W2 + b2, gated (``up``, T5 v1.1): (act(x W1) * x W_up) W2."""

    inner: Linear
    up: Linear | None
    out: Linear
    activation: Callable[[Tensor], Tensor]

    def linears(self) -> Iterator[Linear]:
        yield from (self.inner, self.out) if self.up is None else (self.inner, self.up, self.out)


@dataclass(frozen=True, slots=True)
class EncoderWeights:
    """One encoder layer resolved, and where it records (``out_site``: its output, 'encoder.{layer}.out')."""

    self_attn: AttentionWeights
    ffn: FFNWeights
    self_norm: Norm
    ffn_norm: Norm
    pre: bool
    self_sites: Sites
    out_site: str


@dataclass(frozen=True, slots=True)
class DecoderWeights:
    """One decoder layer resolved, and where it records.

    self_attn or ssru (the other None): the first sub-layer; ``ssru`` gives (x W, x W_f + b_f). layer: its index
    (the SSRU gates are recorded by layer). zeros: a (1, 1, 1) tensor on the weights' device: recorded attention runs
    as ``bmm`` over B*H on flat keys and values kept in the state (the plan's one query row per sentence); None =
    4-D ``matmul``."""

    self_attn: AttentionWeights | None
    ssru: Projections | None
    cross: AttentionWeights
    ffn: FFNWeights
    self_norm: Norm
    cross_norm: Norm
    ffn_norm: Norm
    pre: bool
    layer: int
    self_sites: Sites
    cross_sites: Sites
    out_site: str
    zeros: Tensor | None = None

    def linears(self) -> Iterator[Linear]:
        """Every resolved projection (the plan's fused ones too)."""
        if self.self_attn is not None:
            yield from self.self_attn.linears()
        if self.ssru is not None:
            yield from self.ssru.linears
        yield from self.cross.linears()
        yield from self.ffn.linears()

    def norms(self) -> tuple[Norm, Norm, Norm]:
        return self.self_norm, self.cross_norm, self.ffn_norm


def feed_forward(w: FFNWeights, x: Tensor, dropout: float = 0.0) -> Tensor:
    """FFN(x): x (B, T, D) -> (B, T, D); dropout on the inner activations (0 outside training)."""
    h = w.activation(apply(w.inner, x))  # (B, T, d_ff)
    if w.up is not None:
        h = h * apply(w.up, x)
    if dropout:
        h = F.dropout(h, dropout)
    return apply(w.out, h)


def ssru(project: Projections, x: Tensor, cell: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Simpler Simple Recurrent Unit (Marian's decoder cell) over x (B, T, D) from the previous cell (B, 1, D) (None:
    zeros); ``project`` gives (x W, x W_f + b_f).

    f_t = sigmoid(x_t W_f + b_f);  c_t = f_t * c_{t-1} + (1 - f_t) * (x_t W) = lerp(x_t W, c_{t-1}, f_t)
    h_t = ReLU(c_t)
    Returns h (B, T, D), the last cell (B, 1, D) and the forget gates f (B, T, D)."""
    xw, gate = project(x)  # (B, T, D) each
    f = torch.sigmoid(gate)
    if x.shape[1] == 1:  # a decoding step
        c = xw * (1.0 - f) if cell is None else torch.lerp(xw, cell, f)
        return torch.relu(c), c, f
    cells: list[Tensor] = []
    for t in range(x.shape[1]):
        xt, ft = xw[:, t : t + 1], f[:, t : t + 1]  # (B, 1, D)
        prev = cells[-1] if cells else cell
        cells.append(xt * (1.0 - ft) if prev is None else torch.lerp(xt, prev, ft))
    return torch.relu(torch.cat(cells, dim=1)), cells[-1], f


def self_attention(
    w: AttentionWeights,
    x: Tensor,
    masks: Masks,
    *,
    site: str,
    state: LayerState | None = None,
    recorder: Recorder | None = None,
    offset: int = 0,
    dropout: float = 0.0,
    zeros: Tensor | None = None,
) -> Tensor:
    """Self-attention of x (B, T, D) (the sub-layer's input) -> (B, T, D), with ``masks.self_mask`` and
    ``masks.self_bias``; recorded at attention ``site``. state: the KV cache the new keys and values join (None: this
    pass's only). zeros: see ``DecoderWeights``."""
    q, k, v = w.queries_keys_values(x)  # (B, H, T, d) each
    if state is not None:
        k, v = state.append_kv(k, v)  # (B, H, offset + T, d) each
    at = None if recorder is None else Tap(recorder, site, offset, None if zeros is None else flat_kv(k, v), zeros)
    return w.output(attend(q, k, v, masks.self_mask, at, Scoring(w.scale, masks.self_bias, dropout)))


def cross_attention(
    w: AttentionWeights,
    x: Tensor,
    memory: Tensor | None,
    mask: Tensor | None,
    *,
    site: str,
    state: LayerState | None = None,
    recorder: Recorder | None = None,
    offset: int = 0,
    dropout: float = 0.0,
    zeros: Tensor | None = None,
) -> Tensor:
    """Attention from x (B, Tq, D) to ``memory`` (B, Ts, D) -> (B, Tq, D); mask (B, 1, Ts) or None. The memory's keys
    and values are projected once per call and kept in ``state`` (memory may be None once they are)."""
    kv = None if state is None else state.cross_kv
    if kv is None:
        assert memory is not None, "cross-attention needs the memory at a call's first step"
        kv = w.keys_values(memory)  # (B, H, Ts, d) each
        if state is not None:
            state.cross_kv = kv
    flat = None
    if recorder is not None and zeros is not None and state is not None:
        if state.cross_flat is None:
            state.cross_flat = flat_kv(*kv)
        flat = state.cross_flat
    at = None if recorder is None else Tap(recorder, site, offset, flat, zeros)
    return w.output(attend(w.queries(x), kv[0], kv[1], mask, at, Scoring(w.scale, None, dropout)))


def _enter(x: Tensor, norm: Norm, pre: bool, recorder: Recorder | None, site: str, offset: int) -> Tensor:
    """A sub-layer's input (``sublayer_input``), recorded at ``site`` with the activations."""
    y = sublayer_input(x, norm, pre)
    if recorder is not None and recorder.record_activations:
        y = recorder.activation(site, y, offset)
    return y


def _leave(
    x: Tensor, y: Tensor, norm: Norm, pre: bool, dropout: float, recorder: Recorder | None, site: str, offset: int
) -> Tensor:
    """The stream after a sub-layer whose output is y (``sublayer_output``; dropout on y in training), recorded at
    ``site`` with the activations."""
    if dropout:
        y = F.dropout(y, dropout)
    x = sublayer_output(x, y, norm, pre)
    if recorder is not None and recorder.record_activations:
        x = recorder.activation(site, x, offset)
    return x


def _ffn_sublayer(
    x: Tensor, w: FFNWeights, norm: Norm, pre: bool, dropout: float, real: Tensor | None = None
) -> Tensor:
    """The stream after the feed-forward sub-layer. ``real`` (B, T) bool: the positions that are not padding, the
    only ones it runs on with gradients off (it acts on each position alone; a padded one keeps its stream, which no
    real position reads; training and attribution run every position, as before, their random draws unchanged);
    None: every position."""
    if real is not None and not torch.is_grad_enabled():
        out = x.clone()
        out[real] = _ffn_sublayer(x[real], w, norm, pre, dropout)  # (N, D): the real positions, packed
        return out
    y = feed_forward(w, sublayer_input(x, norm, pre), dropout)
    if dropout:
        y = F.dropout(y, dropout)
    return sublayer_output(x, y, norm, pre)


def _layer_output(x: Tensor, recorder: Recorder | None, site: str, offset: int) -> Tensor:
    """A layer's output, recorded, patched or made a gradient leaf at ``site`` where the call asks."""
    if recorder is not None and recorder.wants(site):
        return recorder.activation(site, x, offset)
    return x


def encoder_layer(
    w: EncoderWeights,
    x: Tensor,
    mask: Tensor | None,
    *,
    bias: Tensor | None = None,
    recorder: Recorder | None = None,
    dropout: float = 0.0,
) -> Tensor:
    """One encoder layer: x (B, Ts, D) -> (B, Ts, D). mask broadcastable to (B, Ts, Ts), True = may attend; bias
    (1, H, Ts, Ts) added to the scores (T5's relative position bias), None = none. dropout: 0 outside training."""
    pre, sites = w.pre, w.self_sites
    y = _enter(x, w.self_norm, pre, recorder, sites.x, 0)
    y = self_attention(w.self_attn, y, Masks(mask, None, bias), site=sites.block, recorder=recorder, dropout=dropout)
    x = _leave(x, y, w.self_norm, pre, dropout, recorder, sites.out, 0)
    # with a padding mask (B, 1, Ts) the feed-forward, three quarters of a layer's multiplications, runs on the
    # real positions alone (gradients off: ``_ffn_sublayer``)
    real = mask[:, 0] if mask is not None and mask.dim() == 3 and mask.shape[1] == 1 else None
    return _layer_output(_ffn_sublayer(x, w.ffn, w.ffn_norm, pre, dropout, real), recorder, w.out_site, 0)


def decoder_layer(
    w: DecoderWeights,
    x: Tensor,
    masks: Masks,
    *,
    memory: Tensor | None = None,
    state: LayerState | None = None,
    recorder: Recorder | None = None,
    offset: int = 0,
    dropout: float = 0.0,
) -> Tensor:
    """One decoder layer: x (B, T, D) target positions [offset, offset + T) -> (B, T, D).

    Masked self-attention (or the SSRU) -> cross-attention to ``memory`` (B, Ts, D) -> feed-forward, each a
    residual sub-layer. masks: ``Masks``. state: the layer's decoding state (KV cache, SSRU cell, the memory's keys
    and values once projected); None = a full pass that keeps nothing. dropout: 0 outside training. The recorder
    (None = nothing recorded) records every attention, the SSRU gates, each sub-layer's input and the stream after
    it (with the activations), and the layer's output ``w.out_site`` (where it also patches)."""
    pre, zeros, sites = w.pre, w.zeros, w.self_sites
    y = _enter(x, w.self_norm, pre, recorder, sites.x, offset)
    if w.ssru is not None:  # Marian's SSRU instead of self-attention
        y, cell, gates = ssru(w.ssru, y, None if state is None else state.ssru_cell)
        if state is not None:
            state.ssru_cell = cell
        if recorder is not None:
            recorder.gate(w.layer, gates)
    else:
        assert w.self_attn is not None
        y = self_attention(
            w.self_attn,
            y,
            masks,
            site=sites.block,
            state=state,
            recorder=recorder,
            offset=offset,
            dropout=dropout,
            zeros=zeros,
        )
    x = _leave(x, y, w.self_norm, pre, dropout, recorder, sites.out, offset)
    sites = w.cross_sites
    y = _enter(x, w.cross_norm, pre, recorder, sites.x, offset)
    y = cross_attention(
        w.cross,
        y,
        memory,
        masks.cross_mask,
        site=sites.block,
        state=state,
        recorder=recorder,
        offset=offset,
        dropout=dropout,
        zeros=zeros,
    )
    x = _leave(x, y, w.cross_norm, pre, dropout, recorder, sites.out, offset)
    return _layer_output(_ffn_sublayer(x, w.ffn, w.ffn_norm, pre, dropout, masks.real), recorder, w.out_site, offset)
