"""The per-call plan for incremental decoding steps (one new target position per sentence, KV cache).

A decoding step multiplies one row per sentence by every decoder matrix, so the arithmetic is small and
eager PyTorch's per-call costs dominate: nn.Module calls, attribute look-ups, 4-D ``matmul`` around a
``bmm``. ``make_plan`` resolves the weights once per decoding call (the packed float16 copies of a
``FastWeights`` where they apply), and ``run_layers`` runs the decoder layers on it. It is the same
computation as ``DecoderLayer.forward`` with a ``LayerState``: the same ``attend`` (with ``bmm`` operands when
recording; untraced, its fused ``scaled_dot_product_attention``, measured faster for one query row), the same
``residual`` halves, the same recorder calls and KV buffers (tests/core/test_plan.py compares them).
The SSRU decoders of Marian's models (``decoder_self="ssru"``) run on it too: W and W_f as one matrix, the cell
update as one ``lerp``. Only in eval mode without grad; the model runs the module path otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import Scoring, Tap, attend, flat_kv
from .fast import FastModel, FastWeights, Linear
from .layers import ACTIVATIONS, LayerState, Masks, Norm, norm_of, normalize, sublayer_input, sublayer_output
from .sites import attention_site, layer_site

if TYPE_CHECKING:
    from .config import ModelConfig
    from .recorder import Recorder


class PlanModel(FastModel, Protocol):
    """What ``make_plan`` reads of a model (a ``Transformer`` is one): besides ``FastModel``'s parts, its config,
    mode, decoder's final norm and the output rows of a shortlist."""

    @property
    def config(self) -> ModelConfig: ...

    @property
    def training(self) -> bool: ...

    @property
    def decoder_norm(self) -> nn.Module: ...

    @property
    def output_scale(self) -> float: ...

    def output_rows(self, vocab: Tensor) -> tuple[Tensor, Tensor | None]: ...


@dataclass(frozen=True)
class LayerPlan:
    qkv: Linear | None  # self-attention Q, K, V in one (3D, D) matrix (None: an SSRU layer)
    ssru: Linear | None  # the SSRU's W and W_f in one (2D, D) matrix, bias (0, b_f) (None: self-attention)
    self_out: Linear | None  # self-attention's output projection (None: an SSRU layer)
    cross_q: Linear
    cross_out: Linear
    ffn_in: Linear
    ffn_up: Linear | None  # a gated FFN's linear branch (None: a plain FFN)
    ffn_out: Linear
    self_norm: Norm
    cross_norm: Norm
    ffn_norm: Norm
    self_site: str
    cross_site: str
    out_site: str
    layer: int


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
    d_head: int
    d_value: int
    scale: float | None  # ``Scoring.scale``: None = 1/sqrt(d_head)
    output_scale: float  # the decoder output's factor before the projection (T5 v1.0: d_model**-0.5)
    zeros: Tensor  # (1, 1, 1) on the model's device: ``baddbmm``'s ignored input (beta=0)


@dataclass
class DecoderState:
    """Incremental decoding state of one call: one LayerState per decoder layer, the positions seen so far, and
    the per-call step plan (``StepPlan``) when the fast path runs."""

    layers: list[LayerState] = field(default_factory=list)
    length: int = 0
    # (rows, vocab, plan): made by the model at the first fast step, made again when the rows or the vocab change
    plan: tuple[int, Tensor | None, StepPlan | None] | None = None

    @classmethod
    def empty(cls, n_layers: int) -> DecoderState:
        return cls([LayerState() for _ in range(n_layers)], 0)

    def reorder(self, index: Tensor, same_source: bool = False) -> None:
        for layer in self.layers:
            layer.reorder(index, same_source)


def make_plan(model: PlanModel, fast: FastWeights, rows: int, vocab: Tensor | None = None) -> StepPlan | None:
    """The plan for steps of ``rows`` sentences, or None when the module path must run (training mode, grad
    enabled). vocab: (S,) the only ids the output layer scores (its rows gathered once, here), None = every id."""
    cfg = model.config
    if model.training or torch.is_grad_enabled():
        return None

    def bind(linear: nn.Linear) -> Linear:
        return fast.bind(linear.weight, linear.bias, rows)

    def fused(weights: tuple[Tensor, Tensor | None]) -> Linear:
        return fast.bind(weights[0], weights[1], rows)

    layers = []
    for i, layer in enumerate(model.decoder_layers):
        attn = layer.self_attn
        layers.append(
            LayerPlan(
                qkv=None if attn is None else fused(fast.fused_qkv[i]),
                ssru=None if attn is not None else fused(fast.fused_ssru[i]),
                self_out=None if attn is None else bind(attn.out_proj),
                cross_q=bind(layer.cross_attn.q_proj),
                cross_out=bind(layer.cross_attn.out_proj),
                ffn_in=bind(layer.ffn.linear1),
                ffn_up=None if layer.ffn.linear_up is None else bind(layer.ffn.linear_up),
                ffn_out=bind(layer.ffn.linear2),
                self_norm=norm_of(layer.self_attn_norm),
                cross_norm=norm_of(layer.cross_attn_norm),
                ffn_norm=norm_of(layer.ffn_norm),
                self_site=attention_site("decoder", i),
                cross_site=attention_site("cross", i),
                out_site=layer_site("decoder", i),
                layer=i,
            )
        )
    final = None if isinstance(model.decoder_norm, nn.Identity) else model.decoder_norm
    return StepPlan(
        tuple(layers),
        bind(model.output) if vocab is None else (F.linear, *model.output_rows(vocab)),
        norm_of(final) if final is not None else None,
        cfg.norm == "pre",
        ACTIVATIONS[cfg.activation],
        cfg.n_heads,
        cfg.d_model,
        cfg.d_head,
        cfg.d_value,
        None if cfg.attention_scale else 1.0,
        model.output_scale,
        model.output.weight.new_zeros(1, 1, 1),
    )


def _call(lin: Linear, x: Tensor) -> Tensor:
    return lin[0](x, lin[1], lin[2])


def run_layers(plan: StepPlan, x: Tensor, state: DecoderState, masks: Masks, recorder: Recorder | None) -> Tensor:
    """x (B, 1, D) embedded new positions -> logits (B, 1, V) ((B, 1, S) with the plan's vocab). ``state``'s
    layers hold the cross-attention keys/values already; each layer's new self-attention key/value is appended to
    its buffers.
    masks: no self-attention mask (one new position sees every cached one); the cross mask (B, 1, Ts), True = real
    source token, None = no padding; the self-attention's position bias (1, H, 1, Tk), None = none."""
    B, D = x.shape[0], plan.d_model
    h = x.reshape(B, D)  # (B, D)
    for i in range(len(plan.layers)):
        h = _run_layer(plan, i, state, h, masks, recorder)
    if plan.final_norm is not None:
        h = normalize(h, plan.final_norm)
    if plan.output_scale != 1.0:
        h = h * plan.output_scale
    return _call(plan.output, h)[:, None]  # (B, 1, V)


def _run_layer(
    plan: StepPlan, i: int, state: DecoderState, h: Tensor, masks: Masks, recorder: Recorder | None
) -> Tensor:
    """Decoder layer ``i`` of a step: h (B, D) -> (B, D). The sub-layers are written out (no closures per step)
    between the same ``sublayer_input`` / ``sublayer_output`` halves of the residual that the modules use."""
    lp, ls = plan.layers[i], state.layers[i]
    offset = state.length - 1  # the position this step computes
    B = h.shape[0]
    H, D, dh, dv = plan.n_heads, plan.d_model, plan.d_head, plan.d_value
    pre, cross_mask = plan.pre, masks.cross_mask
    y = sublayer_input(h, lp.self_norm, pre)
    if lp.ssru is not None:  # SSRU: c = f * c_prev + (1 - f) * (y W), f = sigmoid(y W_f + b_f); out = ReLU(c)
        xw, gate = _call(lp.ssru, y).split(D, dim=1)  # (B, D) each
        f = torch.sigmoid(gate)  # (B, D)
        c = xw * (1.0 - f) if ls.ssru_cell is None else torch.lerp(xw, ls.ssru_cell, f)  # (B, D)
        ls.ssru_cell = c
        if recorder is not None:
            recorder.gate(lp.layer, f[:, None])
        h = sublayer_output(h, torch.relu(c), lp.self_norm, pre)
    else:  # masked self-attention: one new position sees every cached one, so no mask
        assert lp.qkv is not None and lp.self_out is not None
        q, k, v = _call(lp.qkv, y).split((H * dh, H * dh, H * dv), dim=1)  # (B, H*dh), (B, H*dh), (B, H*dv)
        k, v = ls.append_kv(k.view(B, H, 1, dh), v.view(B, H, 1, dv))  # (B, H, t, dh), (B, H, t, dv)
        at = None if recorder is None else Tap(recorder, lp.self_site, offset, flat_kv(k, v), plan.zeros)
        ctx = attend(q.view(B, H, 1, dh), k, v, None, at, Scoring(plan.scale, masks.self_bias))  # (B, H, 1, dv)
        h = sublayer_output(h, _call(lp.self_out, ctx.reshape(B, H * dv)), lp.self_norm, pre)
    # cross-attention: the source's keys and values are the same at every step
    y = sublayer_input(h, lp.cross_norm, pre)
    assert ls.cross_kv is not None
    if ls.cross_flat is None and recorder is not None:
        ls.cross_flat = flat_kv(*ls.cross_kv)
    q = _call(lp.cross_q, y).view(B, H, 1, dh)
    at = None if recorder is None else Tap(recorder, lp.cross_site, offset, ls.cross_flat, plan.zeros)
    ctx = attend(q, *ls.cross_kv, cross_mask, at, Scoring(plan.scale))
    h = sublayer_output(h, _call(lp.cross_out, ctx.reshape(B, H * dv)), lp.cross_norm, pre)
    # feed-forward
    y = sublayer_input(h, lp.ffn_norm, pre)
    inner = plan.activation(_call(lp.ffn_in, y))  # (B, d_ff)
    if lp.ffn_up is not None:
        inner = inner * _call(lp.ffn_up, y)
    h = sublayer_output(h, _call(lp.ffn_out, inner), lp.ffn_norm, pre)
    if recorder is not None and recorder.wants(lp.out_site):
        h = recorder.activation(lp.out_site, h[:, None], offset)[:, 0]
    return h
