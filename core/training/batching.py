"""Batches by token count and padding/shifting of target sequences for teacher forcing."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Batch:
    """One padded batch. keep-flags: True = real token. tgt_in starts with <s>; tgt_out ends with </s>."""

    src: Tensor  # (B, Ts)
    src_keep: Tensor  # (B, Ts)
    tgt_in: Tensor  # (B, Tt)
    tgt_out: Tensor  # (B, Tt), pad positions = -100 (ignored by the loss)
    tgt_keep: Tensor  # (B, Tt)

    @property
    def n_target_tokens(self) -> int:
        return int(self.tgt_keep.sum())

    def to(self, device: torch.device | str) -> Batch:
        return Batch(*(t.to(device) for t in (self.src, self.src_keep, self.tgt_in, self.tgt_out, self.tgt_keep)))


def collate(src_ids: list[list[int]], tgt_ids: list[list[int]], pad_id: int, bos_id: int, eos_id: int) -> Batch:
    """Lists of ids (no specials) -> Batch; eos appended to sources and targets, <s> prepended to decoder inputs."""
    srcs = [s + [eos_id] for s in src_ids]
    outs = [t + [eos_id] for t in tgt_ids]
    ins = [[bos_id] + t for t in tgt_ids]
    ts, tt = max(map(len, srcs)), max(map(len, outs))
    src = torch.tensor([s + [pad_id] * (ts - len(s)) for s in srcs], dtype=torch.long)
    src_keep = torch.tensor([[True] * len(s) + [False] * (ts - len(s)) for s in srcs])
    tgt_in = torch.tensor([t + [pad_id] * (tt - len(t)) for t in ins], dtype=torch.long)
    tgt_out = torch.tensor([t + [-100] * (tt - len(t)) for t in outs], dtype=torch.long)
    tgt_keep = torch.tensor([[True] * len(t) + [False] * (tt - len(t)) for t in outs])
    return Batch(src, src_keep, tgt_in, tgt_out, tgt_keep)


def token_batches(
    src_lens: list[int], tgt_lens: list[int], max_tokens: int, seed: int, epoch: int, shuffle: bool = True
) -> list[list[int]]:
    """Group example indices into batches of at most ``max_tokens`` padded tokens (max of both sides).

    Examples are sorted by length inside random buckets so padding stays low; batch order is shuffled.
    Deterministic for a given (seed, epoch).
    """
    rng = random.Random(seed * 1_000_003 + epoch)
    order = list(range(len(src_lens)))
    if shuffle:
        rng.shuffle(order)
    bucket = max(1, max_tokens * 2)
    batches: list[list[int]] = []
    for start in range(0, len(order), bucket):
        chunk = sorted(order[start : start + bucket], key=lambda i: (tgt_lens[i], src_lens[i]))
        current: list[int] = []
        width = 0
        for i in chunk:
            w = max(width, src_lens[i] + 1, tgt_lens[i] + 1)
            if current and w * (len(current) + 1) > max_tokens:
                batches.append(current)
                current, w = [], max(src_lens[i] + 1, tgt_lens[i] + 1)
            current.append(i)
            width = w
        if current:
            batches.append(current)
    if shuffle:
        rng.shuffle(batches)
    return batches
