"""Scaled dot-product attention: ONE function, ``attend``, that every path calls (full passes, the KV-cached
decoding step, beam search), and the multi-head projections around it.

    attend: scores -> mask -> softmax -> record -> weighted sum -> head interventions

With no ``Tap`` (no per-call ``Recorder``) the computation is ``F.scaled_dot_product_attention`` (same result, fused).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

if TYPE_CHECKING:
    from .recorder import Recorder

KV = tuple[Tensor, Tensor]
LinearFn = Callable[..., Tensor]  # (x, weight, bias) -> x W^T + b: F.linear, or FastWeights.linear


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


def tap(recorder: Recorder | None, site: str, offset: int = 0) -> Tap | None:
    """A ``Tap`` at ``site`` when there is a recorder, else None (the fused path)."""
    return None if recorder is None else Tap(recorder, site, offset)


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, at: Tap | None = None, dropout: float = 0.0) -> Tensor:
    """softmax(q k^T / sqrt(dh) + mask) v for every head.

    q (B, H, Tq, dh); k, v (B, H, Tk, dh).
    mask: bool, broadcastable to (B, Tq, Tk), True = may attend; None = nothing masked. A fully masked row
        gives weights all 0 (not NaN) and a zero output.
    at: where the call's recorder records and intervenes (``Tap``); None = nothing recorded: the computation is
        ``F.scaled_dot_product_attention`` (same result, fused).
    Returns each head's output (B, H, Tq, dh), after the recorder's head interventions.
    """
    B, H, Tq, dh = q.shape
    Tk = k.shape[2]
    scale = dh**-0.5
    mask4 = None if mask is None else mask[:, None]  # (B, 1, Tq|1, Tk)
    if at is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask4, dropout_p=dropout, scale=scale)
    recorder, site, offset, flat, zeros = at
    if flat is not None:  # beta=0 ignores the input; alpha scales inside the kernel
        ignored = zeros if zeros is not None else flat[1][:1, :1, :1]
        scores = torch.baddbmm(ignored, q.reshape(B * H, Tq, dh), flat[0], beta=0.0, alpha=scale)
    else:
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (B, H, Tq, Tk)
    raw = scores = scores.view(B, H, Tq, Tk)
    blocked = None if mask4 is None else ~mask4
    if blocked is not None:
        scores = raw.masked_fill(blocked, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (B, H, Tq, Tk)
    if blocked is not None:  # masked entries exactly 0; a fully masked row is all 0 (not NaN)
        weights = weights.masked_fill(blocked, 0.0)
    recorder.attention(site, weights, scores, raw, q, k, v)
    if dropout:
        weights = F.dropout(weights, dropout)
    if flat is not None:
        ctx = torch.bmm(weights.reshape(B * H, Tq, Tk), flat[1]).view(B, H, Tq, dh)
    else:
        ctx = torch.matmul(weights, v)  # (B, H, Tq, dh)
    if recorder.wants_heads(site):
        ctx = recorder.heads(site, ctx, offset)
    return ctx


class MultiHeadAttention(nn.Module):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, for ``n_heads`` heads in parallel."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        assert d_model % n_heads == 0, "d_model must be divisible by n_heads"
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = dropout

    def split(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, T, D) -> (B, H, T, dh)

    def project_q(self, x: Tensor, lin: LinearFn = F.linear) -> Tensor:
        """Queries of ``x`` (B, Tq, D): (B, H, Tq, dh)."""
        return self.split(lin(x, self.q_proj.weight, self.q_proj.bias))

    def project_kv(self, x: Tensor, lin: LinearFn = F.linear) -> KV:
        """Keys and values of ``x`` (B, Tk, D): two (B, H, Tk, dh) tensors. Cacheable."""
        return (
            self.split(lin(x, self.k_proj.weight, self.k_proj.bias)),
            self.split(lin(x, self.v_proj.weight, self.v_proj.bias)),
        )

    def output(self, ctx: Tensor, lin: LinearFn = F.linear) -> Tensor:
        """Heads' outputs (B, H, Tq, dh) -> concatenated and projected (B, Tq, D)."""
        B, _, Tq, _ = ctx.shape
        return lin(ctx.transpose(1, 2).reshape(B, Tq, self.d_model), self.out_proj.weight, self.out_proj.bias)

    def forward(
        self, x: Tensor, kv: KV, mask: Tensor | None, at: Tap | None = None, lin: LinearFn = F.linear
    ) -> Tensor:
        """Attend from queries ``x`` (B, Tq, D) to ``kv`` (two (B, H, Tk, dh)) -> (B, Tq, D).

        mask: bool, broadcastable to (B, Tq, Tk), True = may attend; None = no mask. at: where a recorder records
        (``Tap``), None = nothing recorded. lin: the call's linear (``Call.linear``)."""
        drop = self.dropout if self.training else 0.0
        return self.output(attend(self.project_q(x, lin), kv[0], kv[1], mask, at, drop), lin)
