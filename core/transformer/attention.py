"""Scaled dot-product attention: ONE function, ``attend``, that every path calls (full passes, the KV-cached
decoding step, beam search), and the multi-head projections around it.

    attend: (value interventions) scores -> mask -> softmax -> record -> weighted sum -> head interventions

With no ``Tap`` (no per-call ``Recorder``) the computation is ``F.scaled_dot_product_attention`` (same result, fused).
``AttentionWeights`` is one block's projections resolved for a path (``MultiHeadAttention.weights``): each an
``(fn, weight, bias)`` triple, Q/K/V as one fused product where the path fused them (``Projections``); the layer
functions of ``core.transformer.blocks`` read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

if TYPE_CHECKING:
    from ..config import ModelConfig
    from ..recording.recorder import Recorder

KV = tuple[Tensor, Tensor]
LinearFn = Callable[..., Tensor]  # (x, weight, bias) -> x W^T + b: F.linear, or FastWeights.linear
Linear = tuple[Callable[..., Tensor], Tensor, Tensor | None]  # (fn, weight, bias): fn(x, weight, bias) = x W^T + b
Bind = Callable[[Tensor, Tensor | None], Linear]  # (weight, bias) -> the Linear a path runs for them


def flat_kv(k: Tensor, v: Tensor) -> KV:
    """(B, H, Tk, dh) keys and values as ``bmm`` operands: keys (B*H, dh, Tk), values (B*H, Tk, dh)."""
    return k.flatten(0, 1).transpose(1, 2), v.flatten(0, 1)


class Tap(NamedTuple):
    """Where ``attend`` records and intervenes, given only when a recorder runs (untraced, no Tap is made).

    site: e.g. 'decoder.1.cross' (``core.sites``). offset: the absolute position of the first query (incremental
    decoding).
    flat: the same keys and values as ``flat_kv`` gives them, kept by the caller across decoding steps; then the
        products run as ``bmm`` over B*H (one query row per sentence is small, and 4-D ``matmul`` reshapes and
        copies around the same ``bmm``). zeros: with ``flat``, a (1, 1, 1) tensor on q's device that ``baddbmm``
        ignores (beta=0), made once by the caller so a step does not slice one out per call."""

    recorder: Recorder
    site: str
    offset: int = 0
    flat: KV | None = None
    zeros: Tensor | None = None


class Scoring(NamedTuple):
    """How ``attend`` scores besides the mask: scores = q k^T * scale + bias.

    scale: None = 1/sqrt(dh) (the paper's); 1.0 for T5, which does not scale. bias: broadcastable to
    (B, H, Tq, Tk), added before the mask (T5's relative position bias); None = none. dropout: on the weights, in
    training."""

    scale: float | None = None
    bias: Tensor | None = None
    dropout: float = 0.0


PLAIN = Scoring()


def tap(recorder: Recorder | None, site: str, offset: int = 0) -> Tap | None:
    """A ``Tap`` at ``site`` when there is a recorder, else None (the fused path)."""
    return None if recorder is None else Tap(recorder, site, offset)


def attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, at: Tap | None = None, scoring: Scoring = PLAIN
) -> Tensor:
    """softmax(q k^T * scale + bias + mask) v for every head (scale 1/sqrt(dh) and no bias unless ``scoring`` says).

    q (B, H, Tq, dh); k, v (B, H, Tk, dh).
    mask: bool, broadcastable to (B, Tq, Tk), True = may attend; None = nothing masked. A fully masked row
        gives weights all 0 (not NaN) and a zero output.
    at: where the call's recorder records and intervenes (``Tap``); None = nothing recorded: the computation is
        ``F.scaled_dot_product_attention`` (same result, fused).
    scoring: the scale, position bias and dropout (``Scoring``); ``scores_raw`` records scaled scores plus bias.
    Returns each head's output (B, H, Tq, dh), after the recorder's head interventions.
    """
    B, H, Tq, dh = q.shape
    Tk = k.shape[2]
    scale = dh**-0.5 if scoring.scale is None else scoring.scale
    bias, dropout = scoring.bias, scoring.dropout
    mask4 = None if mask is None else mask[:, None]  # (B, 1, Tq|1, Tk)
    if at is None:
        if bias is not None:  # one additive mask: the bias, -inf where blocked (a fully blocked row gives 0 here too)
            mask4 = bias if mask4 is None else bias.masked_fill(~mask4, float("-inf"))  # (B|1, H, Tq, Tk)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask4, dropout_p=dropout, scale=scale)
    recorder, site, offset, flat, zeros = at
    scaled = recorder.values(site, v)  # (B, H, Tk, dv): v itself unless the call scales some values here
    if scaled is not v:
        v, flat = scaled, None if flat is None else (flat[0], scaled.flatten(0, 1))
    if flat is not None:  # beta=0 ignores the input; alpha scales inside the kernel
        ignored = zeros if zeros is not None else flat[1][:1, :1, :1]
        scores = torch.baddbmm(ignored, q.reshape(B * H, Tq, dh), flat[0], beta=0.0, alpha=scale)
    else:
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (B, H, Tq, Tk)
    raw = scores = scores.view(B, H, Tq, Tk)
    if bias is not None:
        raw = scores = scores + bias  # (B, H, Tq, Tk)
    blocked = None if mask4 is None else ~mask4
    if blocked is not None:
        scores = raw.masked_fill(blocked, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (B, H, Tq, Tk)
    if blocked is not None:  # masked entries exactly 0; a fully masked row is all 0 (not NaN)
        weights = weights.masked_fill(blocked, 0.0)
    recorder.attention(site, weights, scores, raw)
    recorder.qkv(site, q, k, v)
    if dropout:
        weights = F.dropout(weights, dropout)
    if flat is not None:
        ctx = torch.bmm(weights.reshape(B * H, Tq, Tk), flat[1]).view(B, H, Tq, v.shape[-1])
    else:
        ctx = torch.matmul(weights, v)  # (B, H, Tq, dh)
    if recorder.wants_heads(site):
        ctx = recorder.heads(site, ctx, offset)
    return ctx


def binder(lin: LinearFn) -> Bind:
    """The ``Bind`` of a call's linear function: each weight as it is, run by ``lin`` (the modules' path)."""
    return lambda weight, bias: (lin, weight, bias)


def apply(linear: Linear, x: Tensor) -> Tensor:
    """x W^T + b through a resolved ``Linear``: x (..., in) -> (..., out)."""
    return linear[0](x, linear[1], linear[2])


@dataclass(frozen=True, slots=True)
class Projections:
    """Several projections of one input: ONE fused matrix whose output is split into parts of ``sizes`` (the plan's
    Q/K/V, the SSRU's W / W_f), or one ``Linear`` per part (the modules)."""

    linears: tuple[Linear, ...]
    sizes: tuple[int, ...]

    def __call__(self, x: Tensor) -> tuple[Tensor, ...]:
        """x (B, T, in) -> one (B, T, size) tensor per part."""
        if len(self.linears) == 1:
            return apply(self.linears[0], x).split(self.sizes, dim=-1)
        return tuple([apply(linear, x) for linear in self.linears])


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, T, H*d) -> (B, H, T, d); a decoding step's one position needs a view only."""
    B, T, _ = x.shape
    if T == 1:
        return x.view(B, n_heads, 1, -1)
    return x.view(B, T, n_heads, -1).transpose(1, 2)


def join_heads(ctx: Tensor) -> Tensor:
    """(B, H, T, d) -> (B, T, H*d): the heads' outputs side by side."""
    B, H, T, d = ctx.shape
    if T == 1:
        return ctx.reshape(B, 1, H * d)
    return ctx.transpose(1, 2).reshape(B, T, H * d)


@dataclass(frozen=True, slots=True)
class AttentionWeights:
    """One attention block resolved: its projections, heads and scale.

    kv: the keys and values of what the block attends to (widths H*dh, H*dv). qkv: queries, keys and values of one
    input as one fused product (the plan's self-attention); None = ``q``, then ``kv``."""

    q: Linear
    kv: Projections
    qkv: Projections | None
    out: Linear
    n_heads: int
    scale: float | None  # ``Scoring.scale``: None = 1/sqrt(dh)

    def queries(self, x: Tensor) -> Tensor:
        """x (B, Tq, D) -> (B, H, Tq, dh)."""
        return split_heads(apply(self.q, x), self.n_heads)

    def keys_values(self, x: Tensor) -> KV:
        """x (B, Tk, D) -> keys (B, H, Tk, dh), values (B, H, Tk, dv)."""
        k, v = self.kv(x)
        return split_heads(k, self.n_heads), split_heads(v, self.n_heads)

    def queries_keys_values(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The three of one input x (B, T, D), each (B, H, T, d)."""
        if self.qkv is None:
            return self.queries(x), *self.keys_values(x)
        q, k, v = self.qkv(x)
        H = self.n_heads
        return split_heads(q, H), split_heads(k, H), split_heads(v, H)

    def output(self, ctx: Tensor) -> Tensor:
        """The heads' outputs (B, H, Tq, dv) joined and projected: (B, Tq, D)."""
        return apply(self.out, join_heads(ctx))

    def linears(self) -> Iterator[Linear]:
        yield self.q
        yield from self.kv.linears
        if self.qkv is not None:
            yield from self.qkv.linears
        yield self.out


class MultiHeadAttention(nn.Module):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, for ``n_heads`` heads in parallel.

    d_head: each head's size (None: d_model / n_heads; T5's d_kv may differ, so the heads span n_heads * d_head
    features); scaled: False drops the 1/sqrt(d_k) (T5)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        *,
        d_head: int | None = None,
        d_value: int | None = None,
        scaled: bool = True,
    ) -> None:
        super().__init__()
        if d_head is None:
            assert d_model % n_heads == 0, "d_model must be divisible by n_heads"
            d_head = d_model // n_heads
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_head
        self.d_value = d_head if d_value is None else d_value
        inner, values = n_heads * d_head, n_heads * self.d_value
        self.q_proj = nn.Linear(d_model, inner, bias=bias)
        self.k_proj = nn.Linear(d_model, inner, bias=bias)
        self.v_proj = nn.Linear(d_model, values, bias=bias)
        self.out_proj = nn.Linear(values, d_model, bias=bias)
        self.dropout = dropout
        self.scale = None if scaled else 1.0  # ``Scoring.scale``

    @classmethod
    def of(cls, cfg: ModelConfig) -> MultiHeadAttention:
        """The attention block ``cfg`` describes (head size, scaling, biases)."""
        return cls(
            cfg.d_model,
            cfg.n_heads,
            cfg.dropout,
            cfg.linear_bias,
            d_head=cfg.d_head,
            d_value=cfg.d_value,
            scaled=cfg.attention_scale,
        )

    def weights(
        self, bind: Bind, *, fused: tuple[Tensor, Tensor | None] | None = None, memory: Bind | None = None
    ) -> AttentionWeights:
        """This block's projections resolved by ``bind``. fused: Q, K and V as one matrix and bias
        (``FastWeights.fused_qkv``: self-attention's one product); memory: how the keys and values of what the block
        attends to are projected, when that is not ``bind`` (the plan's cross-attention, once per call)."""
        inner, values = self.n_heads * self.d_head, self.n_heads * self.d_value
        kv_bind = bind if memory is None else memory
        p = self.q_proj, self.k_proj, self.v_proj, self.out_proj
        return AttentionWeights(
            bind(p[0].weight, p[0].bias),
            Projections((kv_bind(p[1].weight, p[1].bias), kv_bind(p[2].weight, p[2].bias)), (inner, values)),
            None if fused is None else Projections((bind(*fused),), (inner, inner, values)),
            bind(p[3].weight, p[3].bias),
            self.n_heads,
            self.scale,
        )

    def project_q(self, x: Tensor, lin: LinearFn = F.linear) -> Tensor:
        """Queries of ``x`` (B, Tq, D): (B, H, Tq, dh)."""
        return self.weights(binder(lin)).queries(x)

    def project_kv(self, x: Tensor, lin: LinearFn = F.linear) -> KV:
        """Keys and values of ``x`` (B, Tk, D): two (B, H, Tk, dh) tensors. Cacheable."""
        return self.weights(binder(lin)).keys_values(x)

    def output(self, ctx: Tensor, lin: LinearFn = F.linear) -> Tensor:
        """Heads' outputs (B, H, Tq, dh) -> concatenated and projected (B, Tq, D)."""
        return self.weights(binder(lin)).output(ctx)

    def forward(
        self,
        x: Tensor,
        kv: KV,
        mask: Tensor | None,
        at: Tap | None = None,
        lin: LinearFn = F.linear,
        bias: Tensor | None = None,
    ) -> Tensor:
        """Attend from queries ``x`` (B, Tq, D) to ``kv`` (two (B, H, Tk, dh)) -> (B, Tq, D).

        mask: bool, broadcastable to (B, Tq, Tk), True = may attend; None = no mask. at: where a recorder records
        (``Tap``), None = nothing recorded. lin: the call's linear (``Call.linear``). bias: (1|B, H, Tq, Tk) added
        to the scores (T5's relative position bias), None = none."""
        w = self.weights(binder(lin))
        scoring = Scoring(self.scale, bias, self.dropout if self.training else 0.0)
        return w.output(attend(w.queries(x), kv[0], kv[1], mask, at, scoring))
