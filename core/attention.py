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
        return self._split(self.k_proj(x)), self._split(self.v_proj(x))

    def forward(
        self,
        x: Tensor,
        kv: KV,
        mask: Tensor | None,
        *,
        head_keep: Tensor | None = None,
        recorder: "Recorder | None" = None,
        site: tuple[str, int] = ("encoder", 0),
    ) -> Tensor:
        """Attend from queries ``x`` (B, Tq, D) to ``kv``.

        mask: bool, broadcastable to (B, Tq, Tk), True = may attend; None = no mask.
        head_keep: (H,) 0/1 multipliers on each head's output (ablation); None = all heads.
        Returns (B, Tq, D).
        """
        B, Tq, _ = x.shape
        q = self._split(self.q_proj(x))  # (B, H, Tq, dh)
        k, v = kv  # (B, H, Tk, dh) each
        mask4 = None if mask is None else mask[:, None]  # (B, 1, Tq|1, Tk)
        drop = self.dropout if self.training else 0.0
        if recorder is None:
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask4, dropout_p=drop)  # (B, H, Tq, dh)
        else:
            scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.d_head))  # (B, H, Tq, Tk)
            if mask4 is not None:
                scores = scores.masked_fill(~mask4, float("-inf"))
            weights = torch.softmax(scores, dim=-1)  # (B, H, Tq, Tk)
            if mask4 is not None:  # masked entries exactly 0; a fully masked row is all 0 (not NaN)
                weights = weights.masked_fill(~mask4, 0.0)
            recorder.attention(site[0], site[1], weights, scores, q, k, v)
            ctx = torch.matmul(F.dropout(weights, drop, self.training), v)  # (B, H, Tq, dh)
        if head_keep is not None:
            ctx = ctx * head_keep[None, :, None, None]
        ctx = ctx.transpose(1, 2).reshape(B, Tq, self.d_model)  # (B, H, Tq, dh) -> (B, Tq, D)
        return self.out_proj(ctx)
