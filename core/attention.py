"""Multi-head scaled dot-product attention.

Two paths with the same result: the fast path (``F.scaled_dot_product_attention``) when
nothing is recorded, and an explicit softmax path when a recorder is passed, which records
the weights after softmax and before dropout, and the scaled scores with masked entries -inf.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import fastlinear
from .fastlinear import linear

if TYPE_CHECKING:
    from .trace import Recorder

KV = tuple[Tensor, Tensor]


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

    def _split(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, T, D) -> (B, H, T, dh)

    def project_kv(self, x: Tensor) -> KV:
        """Keys and values of ``x`` (B, Tk, D): two (B, H, Tk, dh) tensors. Cacheable."""
        return (self._split(linear(x, self.k_proj.weight, self.k_proj.bias)),
                self._split(linear(x, self.v_proj.weight, self.v_proj.bias)))

    def fused_qkv(self) -> tuple[Tensor, Tensor | None]:
        """The Q, K and V projections as ONE (3D, D) matrix and (3D,) bias: a copy, kept until a weight changes.

        Column-major like the decoder's other matrices (see ``Transformer._decoding_layout``): a decoding
        step then streams all three in one matmul instead of three (and ``fastlinear`` packs it once).
        """
        projections = (self.q_proj, self.k_proj, self.v_proj)

        def make() -> tuple[Tensor, Tensor | None]:
            weight = torch.cat([p.weight.t() for p in projections], dim=1).t()  # (3D, D), strides (1, 3D)
            bias = None if self.q_proj.bias is None else torch.cat([p.bias for p in projections])
            return weight, bias
        sources = [p.weight for p in projections] + [p.bias for p in projections if p.bias is not None]
        return fastlinear.derived(self.q_proj.weight, sources, make)

    def project_qkv(self, x: Tensor, fused: tuple[Tensor, Tensor | None]) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values of ``x`` (B, T, D) with ``fused_qkv()``: three (B, H, T, dh) tensors."""
        q, k, v = linear(x, *fused).split(self.d_model, dim=-1)  # (B, T, D) each
        return self._split(q), self._split(k), self._split(v)

    def forward(
        self,
        x: Tensor,
        kv: KV,
        mask: Tensor | None,
        *,
        head_keep: Tensor | None = None,
        recorder: "Recorder | None" = None,
        site: tuple[str, int] = ("encoder", 0),
        q: Tensor | None = None,
    ) -> Tensor:
        """Attend from queries ``x`` (B, Tq, D) to ``kv``.

        mask: bool, broadcastable to (B, Tq, Tk), True = may attend; None = no mask.
        head_keep: (H,) 0/1 multipliers on each head's output (ablation); None = all heads.
        q: the queries (B, H, Tq, dh) when already projected (``project_qkv``); None = project ``x``.
        Returns (B, Tq, D).
        """
        B, Tq, _ = x.shape
        if q is None:
            q = self._split(linear(x, self.q_proj.weight, self.q_proj.bias))  # (B, H, Tq, dh)
        k, v = kv  # (B, H, Tk, dh) each
        mask4 = None if mask is None else mask[:, None]  # (B, 1, Tq|1, Tk)
        drop = self.dropout if self.training else 0.0
        if recorder is None:
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask4, dropout_p=drop)  # (B, H, Tq, dh)
        else:
            scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.d_head))  # (B, H, Tq, Tk)
            if mask4 is not None:
                blocked = ~mask4
                scores = scores.masked_fill(blocked, float("-inf"))
            weights = torch.softmax(scores, dim=-1)  # (B, H, Tq, Tk)
            if mask4 is not None:  # masked entries exactly 0; a fully masked row is all 0 (not NaN)
                weights = weights.masked_fill(blocked, 0.0)
            recorder.attention(site[0], site[1], weights, scores, q, k, v)
            ctx = torch.matmul(F.dropout(weights, drop, self.training) if drop else weights, v)  # (B, H, Tq, dh)
        if head_keep is not None:
            ctx = ctx * head_keep[None, :, None, None]
        ctx = ctx.transpose(1, 2).reshape(B, Tq, self.d_model)  # (B, H, Tq, dh) -> (B, Tq, D)
        return linear(ctx, self.out_proj.weight, self.out_proj.bias)
