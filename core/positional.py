"""Positional encodings: the paper's sinusoids (three layouts) and learned positions (table row E)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_table(n_positions: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """(n_positions, d_model) float32 table.

    ``interleaved`` (the paper): PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d)).
    ``concatenated`` (tensor2tensor / Marian C++): the d/2 sines then the d/2 cosines, with
    frequencies exp(-i * ln(10000) / (d/2 - 1)), i = 0 .. d/2-1.
    ``concatenated_hf`` (Hugging Face's MarianMTModel, ``MarianSinusoidalPositionalEmbedding``): the d/2 sines then
    the d/2 cosines at the paper's frequencies 1 / 10000^(2i/d) — not quite Marian C++'s.
    """
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    half = d_model // 2
    i = torch.arange(half, dtype=torch.float64)[None, :]  # (1, d/2)
    if layout == "interleaved":
        angle = pos / torch.pow(10000.0, 2 * i / d_model)  # (P, d/2)
        table = torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).reshape(
            n_positions, d_model
        )  # (P, d/2, 2) -> (P, d)
    elif layout == "concatenated_hf":
        angle = pos / torch.pow(10000.0, 2 * i / d_model)  # (P, d/2)
        table = torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)  # (P, d)
    elif layout == "concatenated":
        inv = torch.exp(-i * math.log(10000.0) / max(half - 1, 1))  # (1, d/2)
        angle = pos * inv  # (P, d/2)
        table = torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)  # (P, d)
    else:
        raise ValueError(f"unknown positional-encoding layout {layout!r}")
    return table.float()


class SinusoidalPositions(nn.Module):
    """Fixed sinusoids. The table is a non-persistent buffer: not saved, no length tied to checkpoints."""

    table: Tensor

    def __init__(self, d_model: int, layout: str, n_cached: int = 512) -> None:
        super().__init__()
        self.d_model, self.layout = d_model, layout
        self.register_buffer("table", sinusoidal_table(n_cached, d_model, layout), persistent=False)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Rows for positions offset .. offset+length-1: (T, D)."""
        end = offset + length
        if end <= self.table.shape[0]:
            return self.table[offset:end]
        # Longer than cached: compute fresh (never mutate the shared module).
        return sinusoidal_table(end, self.d_model, self.layout).to(self.table.device)[offset:end]


class LearnedPositions(nn.Module):
    """One trained vector per position (the paper's table 3, row E)."""

    def __init__(self, d_model: int, max_positions: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(max_positions, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        end = offset + length
        if end > self.embedding.num_embeddings:
            raise ValueError(
                f"position {end - 1} exceeds the learned table ({self.embedding.num_embeddings} positions)"
            )
        return self.embedding.weight[offset:end]  # (T, D)
