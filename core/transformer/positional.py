"""Positional encodings: the paper's sinusoids (three layouts) and learned positions (table row E).

Both read position p at row p + ``row_offset`` of their table (``ModelConfig.position_offset``): 0 for the paper's
and Marian's, 2 for BART's learned tables (``BartLearnedPositionalEmbedding``) and M2M100's / NLLB's sinusoids
(``M2M100SinusoidalPositionalEmbedding``: the ``concatenated`` layout, whose rows 0 and 1 fairseq keeps for padding).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_table(n_positions: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """(n_positions, d_model) float32 table, computed on the CPU in float64 whatever the default device (on the meta
    device, where ``core.storage.weights`` builds models to be loaded, torch's ``arange`` would import
    ``torch._dynamo``:
    seconds of every process that loads a checkpoint).

    ``interleaved`` (the paper): PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d)).
    ``concatenated`` (tensor2tensor / Marian C++): the d/2 sines then the d/2 cosines, with
    frequencies exp(-i * ln(10000) / (d/2 - 1)), i = 0 .. d/2-1.
    ``concatenated_hf`` (Hugging Face's MarianMTModel, ``MarianSinusoidalPositionalEmbedding``): the d/2 sines then
    the d/2 cosines at the paper's frequencies 1 / 10000^(2i/d) — not quite Marian C++'s.
    """
    pos = torch.arange(n_positions, dtype=torch.float64, device="cpu")[:, None]  # (P, 1)
    half = d_model // 2
    i = torch.arange(half, dtype=torch.float64, device="cpu")[None, :]  # (1, d/2)
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

    def __init__(self, d_model: int, layout: str, n_cached: int = 512, row_offset: int = 0) -> None:
        super().__init__()
        self.d_model, self.layout, self.row_offset = d_model, layout, row_offset
        table = sinusoidal_table(n_cached, d_model, layout).to(torch.get_default_device())  # e.g. a meta model's
        self.register_buffer("table", table, persistent=False)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Rows for positions offset .. offset+length-1: (T, D)."""
        offset += self.row_offset
        end = offset + length
        if end <= self.table.shape[0]:
            return self.table[offset:end]
        # Longer than cached: compute fresh (never mutate the shared module).
        return sinusoidal_table(end, self.d_model, self.layout).to(self.table.device)[offset:end]


class LearnedPositions(nn.Module):
    """One trained vector per position (the paper's table 3, row E): ``max_positions`` of them, after
    ``row_offset`` rows the model never reads (BART's two)."""

    def __init__(self, d_model: int, max_positions: int, row_offset: int = 0) -> None:
        super().__init__()
        self.row_offset = row_offset
        self.embedding = nn.Embedding(max_positions + row_offset, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Rows for positions offset .. offset+length-1: (T, D)."""
        end = offset + length
        if end + self.row_offset > self.embedding.num_embeddings:
            raise ValueError(
                f"position {end - 1} exceeds the learned table "
                f"({self.embedding.num_embeddings - self.row_offset} positions)"
            )
        return self.embedding.weight[offset + self.row_offset : end + self.row_offset]  # (T, D)


class NoPositions(nn.Module):
    """No absolute positions (T5: position enters through the relative bias of its attention instead): zero rows."""

    anchor: Tensor

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.register_buffer("anchor", torch.zeros(0), persistent=False)  # follows the model to its device

    def forward(self, length: int, offset: int = 0) -> Tensor:
        return self.anchor.new_zeros(length, self.d_model)  # (T, D)


def relative_bucket(relative: Tensor, bidirectional: bool, n_buckets: int, max_distance: int) -> Tensor:
    """T5's bucket of each relative position (key position - query position), int64 in [0, n_buckets).

    Bidirectional (the encoder): half the buckets for keys after the query, half for keys before it. Causal (the
    decoder): keys after the query all share bucket 0 (the causal mask hides them). Within a half, distances below
    half its buckets get a bucket each; larger ones share buckets spaced logarithmically up to ``max_distance``,
    beyond which every distance is the last bucket (transformers' ``T5Attention._relative_position_bucket``)."""
    buckets = torch.zeros_like(relative)
    if bidirectional:
        n_buckets //= 2
        buckets = buckets + (relative > 0).long() * n_buckets
        distance = relative.abs()
    else:
        distance = -torch.clamp(relative, max=0)
    exact = n_buckets // 2
    log_ratio = torch.log(distance.float() / exact) / math.log(max_distance / exact)
    large = exact + (log_ratio * (n_buckets - exact)).long()
    large = torch.clamp(large, max=n_buckets - 1)
    return buckets + torch.where(distance < exact, distance, large)


class RelativePositionBias(nn.Module):
    """T5's learned relative position bias: one scalar per (bucket, head), added to every attention score of one
    stack (computed once per call and shared by all its layers; no bias on cross-attention)."""

    def __init__(self, n_heads: int, n_buckets: int, max_distance: int, *, bidirectional: bool) -> None:
        super().__init__()
        self.n_buckets, self.max_distance, self.bidirectional = n_buckets, max_distance, bidirectional
        self.embedding = nn.Embedding(n_buckets, n_heads)  # (buckets, H), T5's relative_attention_bias
        nn.init.normal_(self.embedding.weight, std=0.02)

    def buckets(self, n_query: int, n_key: int, offset: int = 0) -> Tensor:
        """(Tq, Tk) the bucket of each (query, key) pair, queries at positions [offset, offset + Tq)."""
        device = self.embedding.weight.device
        query = torch.arange(offset, offset + n_query, device=device)[:, None]  # (Tq, 1)
        key = torch.arange(n_key, device=device)[None, :]  # (1, Tk)
        return relative_bucket(key - query, self.bidirectional, self.n_buckets, self.max_distance)

    def forward(self, n_query: int, n_key: int, offset: int = 0) -> Tensor:
        """The bias (1, H, Tq, Tk) of queries at [offset, offset + Tq) against keys [0, Tk)."""
        values = self.embedding(self.buckets(n_query, n_key, offset))  # (Tq, Tk, H)
        return values.permute(2, 0, 1)[None]  # (1, H, Tq, Tk)
