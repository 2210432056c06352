"""One incremental decoding step (one new target position per sentence, KV cache) without module overhead.

A decoding step multiplies one row per sentence by every decoder matrix, so the arithmetic is small and
eager PyTorch's per-call costs dominate: nn.Module calls, attribute look-ups, 4-D ``matmul`` (which reshapes,
expands and copies around a ``bmm``), the checks in ``fastlinear.linear``. ``StepPlan`` resolves all of that
once per decoding call — the weights (packed float16 copies where ``fastlinear`` may use them), norms and
sizes — and ``run_layers`` runs the decoder layers on it with ``bmm`` over (B*H) heads.

Same computation as ``DecoderLayer.forward`` with a ``LayerState`` (tests/test_step.py compares tokens,
logits and every recorded array): the same recorder calls, the same KV buffers (so beam reordering works
unchanged), the same explicit softmax whether or not a recorder is passed (a step computes the same
numbers traced or not). Only for self-attention decoders in eval mode without grad (``make_plan`` returns
None otherwise, or after ``set_enabled(False)``, and the module path runs).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import fastlinear

if TYPE_CHECKING:
    from .layers import DecoderState
    from .model import Transformer
    from .trace import Recorder

Linear = tuple[Callable[..., Tensor], Tensor, Tensor | None]  # (fn, weight, bias): fn(x, weight, bias) = x W^T + b
Norm = tuple[Tensor, Tensor, float]  # LayerNorm weight, bias, eps

_enabled = True


def set_enabled(flag: bool) -> bool:
    """Use the plan (True, the default) or always the module path (for comparisons and tests); returns the
    previous setting."""
    global _enabled
    previous, _enabled = _enabled, bool(flag)
    return previous


@dataclass(frozen=True)
class LayerPlan:
    qkv: Linear  # self-attention Q, K, V in one (3D, D) matrix
    self_out: Linear
    cross_q: Linear
    cross_out: Linear
    ffn_in: Linear
    ffn_out: Linear
    self_norm: Norm
    cross_norm: Norm
    ffn_norm: Norm


@dataclass(frozen=True)
class StepPlan:
    """Everything a decoding step reads, looked up once per call (never stored on the model)."""

    layers: tuple[LayerPlan, ...]
    output: Linear
    final_norm: Norm | None  # pre-norm models normalise the decoder's output
    pre: bool
    activation: Callable[[Tensor], Tensor]
    n_heads: int
    d_model: int
    ignored: Tensor  # (1, 1, 1) zeros on the model's device: baddbmm's input, ignored with beta=0


def _norm(norm: nn.LayerNorm) -> Norm:
    return norm.weight, norm.bias, norm.eps


def make_plan(model: "Transformer", rows: int) -> StepPlan | None:
    """The plan for steps of ``rows`` sentences, or None when the module path must run (SSRU decoder,
    training mode, grad enabled)."""
    cfg = model.config
    if not _enabled or cfg.decoder_self != "attention" or model.training or torch.is_grad_enabled():
        return None

    def bind(linear: nn.Linear) -> Linear:
        return fastlinear.bind(linear.weight, linear.bias, rows)

    layers = []
    for layer in model.decoder_layers:
        attn = layer.self_attn
        assert attn is not None
        qkv_weight, qkv_bias = attn.fused_qkv()
        layers.append(LayerPlan(
            qkv=fastlinear.bind(qkv_weight, qkv_bias, rows), self_out=bind(attn.out_proj),
            cross_q=bind(layer.cross_attn.q_proj), cross_out=bind(layer.cross_attn.out_proj),
            ffn_in=bind(layer.ffn.linear1), ffn_out=bind(layer.ffn.linear2),
            self_norm=_norm(layer.self_attn_norm), cross_norm=_norm(layer.cross_attn_norm),
            ffn_norm=_norm(layer.ffn_norm)))
    final = model.decoder_norm if isinstance(model.decoder_norm, nn.LayerNorm) else None
    return StepPlan(tuple(layers), fastlinear.bind(model.output.weight, model.output.bias, rows),
                    _norm(final) if final is not None else None, cfg.norm == "pre",
                    torch.relu if cfg.activation == "relu" else F.gelu, cfg.n_heads, cfg.d_model,
                    model.output.weight.new_zeros(1, 1, 1))


def _call(lin: Linear, x: Tensor) -> Tensor:
    return lin[0](x, lin[1], lin[2])


def _attend(q: Tensor, k: Tensor, v: Tensor, kt_v: tuple[Tensor, Tensor], blocked: Tensor | None,
            keep: Tensor | None, scale: float, ignored: Tensor, recorder: "Recorder | None", kind: str,
            layer: int) -> Tensor:
    """One query per sentence: q (B, H, 1, dh), k/v (B, H, Tk, dh) (for the recorder), kt_v the same keys as
    (B*H, dh, Tk) and values as (B*H, Tk, dh), blocked (B, 1, 1, Tk) True = may NOT attend, keep (H,) head
    multipliers -> context (B, H*dh). Records as ``MultiHeadAttention`` does."""
    B, H, Tk, dh = k.shape
    # beta=0 ignores the (1, 1, 1) input; alpha scales inside the kernel (a separate ``* scale`` would wrap the
    # Python float in a tensor and convert it at every call)
    scores = torch.baddbmm(ignored, q.reshape(B * H, 1, dh), kt_v[0], beta=0.0, alpha=scale)  # (B*H, 1, Tk)
    if blocked is None and recorder is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        scores = scores.view(B, H, 1, Tk)
        if blocked is not None:
            scores = scores.masked_fill(blocked, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # (B, H, 1, Tk)
        if blocked is not None:
            weights = weights.masked_fill(blocked, 0.0)
        if recorder is not None:
            recorder.attention(kind, layer, weights, scores, q, k, v)
        weights = weights.view(B * H, 1, Tk)
    ctx = torch.bmm(weights, kt_v[1])  # (B*H, 1, dh)
    if keep is not None:
        ctx = ctx.view(B, H, dh) * keep[None, :, None]
    return ctx.view(B, H * dh)


def _flat(k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """(B, H, Tk, dh) keys and values as bmm operands: keys (B*H, dh, Tk), values (B*H, Tk, dh). Views of the KV
    buffers; a batch's cross-attention keys/values (projected as (B, Ts, H, dh)) are copied, once per call."""
    return k.flatten(0, 1).transpose(1, 2), v.flatten(0, 1)


def run_layers(plan: StepPlan, x: Tensor, state: "DecoderState", cross_keep: Tensor | None,
               head_keep: list[tuple[Tensor | None, Tensor | None]], recorder: "Recorder | None") -> Tensor:
    """x (B, 1, D) embedded new positions -> logits (B, 1, V). ``state``'s layers hold the cross-attention
    keys/values already; each layer's new self-attention key/value is appended to its buffers.
    cross_keep (B, 1, Ts): True = real source token; None = no padding."""
    B = x.shape[0]
    H, D = plan.n_heads, plan.d_model
    dh = D // H
    scale = 1.0 / math.sqrt(dh)
    blocked = None if cross_keep is None else ~cross_keep[:, None]  # (B, 1, 1, Ts)
    pre, act = plan.pre, plan.activation
    h = x.reshape(B, D)  # (B, D)
    ln = torch.layer_norm  # (the C binding: F.layer_norm's Python wrapper costs a microsecond a call)
    for i, (lp, ls) in enumerate(zip(plan.layers, state.layers)):
        # masked self-attention: one new position sees every cached one, so no mask
        y = ln(h, (D,), *lp.self_norm) if pre else h
        qkv = _call(lp.qkv, y).view(B, 3, H, 1, dh)  # (B, 3, H, 1, dh)
        k, v = ls.append_kv(qkv[:, 1], qkv[:, 2])  # (B, H, t, dh) each
        ctx = _attend(qkv[:, 0], k, v, _flat(k, v), None, head_keep[i][0], scale, plan.ignored, recorder,
                      "decoder", i)
        y = _call(lp.self_out, ctx)
        h = h + y if pre else ln(h + y, (D,), *lp.self_norm)
        # cross-attention to the source: its keys and values are the same at every step
        y = ln(h, (D,), *lp.cross_norm) if pre else h
        assert ls.cross_kv is not None
        if ls.cross_flat is None:
            ls.cross_flat = _flat(*ls.cross_kv)
        q = _call(lp.cross_q, y).view(B, H, 1, dh)
        ctx = _attend(q, *ls.cross_kv, ls.cross_flat, blocked, head_keep[i][1], scale, plan.ignored, recorder,
                      "cross", i)
        y = _call(lp.cross_out, ctx)
        h = h + y if pre else ln(h + y, (D,), *lp.cross_norm)
        # feed-forward
        y = ln(h, (D,), *lp.ffn_norm) if pre else h
        y = _call(lp.ffn_out, act(_call(lp.ffn_in, y)))
        h = h + y if pre else ln(h + y, (D,), *lp.ffn_norm)
    if plan.final_norm is not None:
        h = ln(h, (D,), *plan.final_norm)
    return _call(plan.output, h)[:, None]  # (B, 1, V)
