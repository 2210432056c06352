"""The per-call plan for incremental decoding steps (one new target position per sentence, KV cache).

A decoding step multiplies one row per sentence by every decoder matrix, so the arithmetic is small and
eager PyTorch's per-call costs dominate: nn.Module calls, attribute look-ups, 4-D ``matmul`` around a
``bmm``. ``make_plan`` resolves each decoder layer's weights once per decoding call (``DecoderLayer.weights``, bound
to the packed float16 copies of a ``FastWeights`` where they apply, Q/K/V and the SSRU's W / W_f fused into one
matrix each), and ``run_layers`` runs the one decoder layer, ``core.transformer.blocks.decoder_layer``, on them: the
same lines as ``DecoderLayer.forward``, the same ``attend`` (with ``bmm`` operands when recording; untraced, its fused
``scaled_dot_product_attention``), the same recorder calls and KV buffers (tests/core/test_plan.py compares them).
Only in eval mode without grad; the model runs the module path otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..transformer.attention import Linear
from ..transformer.blocks import DecoderWeights, Masks, Norm, decoder_layer, normalize
from ..transformer.layers import norm_of
from ..transformer.state import LayerState
from .weights import FastModel, FastWeights

if TYPE_CHECKING:
    from ..recording.recorder import Recorder


class PlanModel(FastModel, Protocol):
    """What ``make_plan`` reads of a model (a ``Transformer`` is one): besides ``FastModel``'s parts, its mode, the
    decoder's final norm and output scale, and the output rows of a shortlist."""

    @property
    def training(self) -> bool: ...

    @property
    def decoder_norm(self) -> nn.Module: ...

    @property
    def output_scale(self) -> float: ...

    def output_rows(self, vocab: Tensor) -> tuple[Tensor, Tensor | None]: ...


@dataclass(frozen=True)
class StepPlan:
    """Everything a decoding step reads, looked up once per call (never stored on the model)."""

    layers: tuple[DecoderWeights, ...]
    output: Linear
    final_norm: Norm | None  # pre-norm models normalise the decoder's output
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
    if model.training or torch.is_grad_enabled():
        return None

    def bind(weight: Tensor, bias: Tensor | None) -> Linear:
        return fast.bind(weight, bias, rows)

    def memory(weight: Tensor, bias: Tensor | None) -> Linear:  # the memory's keys and values: once, at any rows
        return fast.linear, weight, bias

    zeros = model.output.weight.new_zeros(1, 1, 1)
    layers = tuple(
        layer.weights(
            bind,
            memory=memory,
            fused=(fast.fused_qkv if layer.self_attn is not None else fast.fused_ssru)[i],
            zeros=zeros,
        )
        for i, layer in enumerate(model.decoder_layers)
    )
    final = None if isinstance(model.decoder_norm, nn.Identity) else model.decoder_norm
    return StepPlan(
        layers,
        bind(model.output.weight, model.output.bias) if vocab is None else (F.linear, *model.output_rows(vocab)),
        norm_of(final) if final is not None else None,
        model.output_scale,
        zeros,
    )


def run_layers(
    plan: StepPlan, x: Tensor, memory: Tensor, state: DecoderState, masks: Masks, recorder: Recorder | None
) -> Tensor:
    """x (B, 1, D) embedded new positions -> logits (B, 1, V) ((B, 1, S) with the plan's vocab). memory (B, Ts, D):
    its keys and values are projected at the first step and kept in ``state``; each layer's new self-attention key
    and value is appended to its buffers.
    masks: no self-attention mask (one new position sees every cached one); the cross mask (B, 1, Ts), True = real
    source token, None = no padding; the self-attention's position bias (1, H, 1, Tk), None = none."""
    offset = state.length - 1  # the position this step computes
    for weights, layer_state in zip(plan.layers, state.layers, strict=True):
        x = decoder_layer(weights, x, masks, memory=memory, state=layer_state, recorder=recorder, offset=offset)
    if plan.final_norm is not None:
        x = normalize(x, plan.final_norm)
    if plan.output_scale != 1.0:
        x = x * plan.output_scale
    return plan.output[0](x, plan.output[1], plan.output[2])  # (B, 1, V)
