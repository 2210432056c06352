"""Attention masks. ONE convention everywhere in this project: ``True`` = may attend.

PyTorch's ``nn.MultiheadAttention`` uses the opposite polarity for ``key_padding_mask``
(True = blocked); ``F.scaled_dot_product_attention``'s boolean ``attn_mask`` uses ours.
Convert only at that boundary (see ``to_pytorch_key_padding``).
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(keep: Tensor) -> Tensor:
    """(B, Tk) bool keep-flags -> (B, 1, Tk): query rows broadcast, padded keys False."""
    return keep[:, None, :]  # (B, 1, Tk)


def causal_mask(
    n_query: int, n_key: int | None = None, *, offset: int = 0, device: torch.device | None = None
) -> Tensor:
    """(Tq, Tk) lower-triangular: query i (at absolute position offset+i) may attend keys 0..offset+i."""
    n_key = n_query + offset if n_key is None else n_key
    q = torch.arange(n_query, device=device)[:, None] + offset  # (Tq, 1)
    k = torch.arange(n_key, device=device)[None, :]  # (1, Tk)
    return k <= q  # (Tq, Tk)


def combine(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of broadcastable masks; ``None`` means 'no restriction'."""
    out: Tensor | None = None
    for m in masks:
        if m is None:
            continue
        out = m if out is None else out & m
    return out


def to_pytorch_key_padding(keep: Tensor) -> Tensor:
    """Our keep-flags (True = real token) -> nn.MultiheadAttention's key_padding_mask (True = ignore)."""
    return ~keep


def full_mask(mask: Tensor | None, batch: int, n_query: int, n_key: int, device: torch.device | None = None) -> Tensor:
    """Expand a broadcastable mask (or None = nothing masked, all True on ``device``) to an explicit
    (B, Tq, Tk) bool tensor."""
    if mask is None:
        return torch.ones(batch, n_query, n_key, dtype=torch.bool, device=device)
    if mask.dim() == 2:
        mask = mask[None]
    return mask.expand(batch, n_query, n_key)
