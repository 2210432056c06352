"""Sampling instead of the top choice: temperature, top-k, top-p (nucleus) and a seed.

At each step greedy decoding's distribution (``search.step_probs``: the model's, after its generation rules) is
reshaped and one piece drawn from it:

1. **temperature** T: p_i ∝ p_i^(1/T), i.e. softmax(logit_i / T) over the ids the rules allow (T < 1 sharpens, T > 1
   flattens; T = 0 is the top choice itself, greedy decoding);
2. **top-k**: only the k most probable pieces are kept;
3. **top-p**: only the smallest set of most probable pieces whose probability reaches p (the most probable piece is
   always kept), as Holtzman et al. (2020);
4. the kept pieces renormalised, and one drawn with a ``torch.Generator`` seeded with ``seed``: the same seed, the
   same settings and the same sentence give the same translation.

The recorded probability of a drawn piece stays the model's own (before temperature), as for a greedy step; the
reshaped distribution is not recorded (``reshaped`` makes it again from the model's, as the Steps page does).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import InputError


@dataclass(frozen=True)
class Sampling:
    """How each step's piece is drawn (see the module doc). Checked when made: ``InputError`` naming the value."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0 <= t <= 100:
            raise InputError(f"the temperature is a number from 0 (the top choice) to 100; got {t!r}")
        if self.top_k is not None and (
            isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1
        ):
            raise InputError(f"top-k is a whole number of pieces, at least 1; got {self.top_k!r}")
        p = self.top_p
        if p is not None and (isinstance(p, bool) or not isinstance(p, int | float) or not 0 < p <= 1):
            raise InputError(f"top-p is a probability above 0 and at most 1; got {p!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise InputError(f"the seed is a whole number from 0; got {self.seed!r}")

    def generator(self, device: torch.device) -> torch.Generator:
        return torch.Generator(device=device).manual_seed(self.seed)


def reshaped(probs: Tensor, sampling: Sampling) -> Tensor:
    """The distribution a piece is drawn from (B, V|S): ``probs`` after temperature, top-k and top-p, renormalised
    (T = 0: all the mass on the most probable piece)."""
    probs = probs.float()
    if sampling.temperature == 0:
        return torch.zeros_like(probs).scatter_(-1, probs.argmax(-1, keepdim=True), 1.0)
    allowed = probs > 0  # what the rules leave; an id they set to 0 stays 0 at any temperature
    logp = probs.clamp_min(1e-45).log()
    logp = logp - logp.max(-1, keepdim=True).values  # 0 for the top piece: no overflow at a tiny temperature
    logp = torch.where(allowed, logp / sampling.temperature, float("-inf"))
    out = torch.softmax(logp, dim=-1)
    if sampling.top_k is not None and sampling.top_k < out.shape[-1]:
        kth = out.topk(sampling.top_k, dim=-1).values[..., -1:]  # (B, 1)
        out = torch.where(out >= kth, out, 0.0)
    if sampling.top_p is not None and sampling.top_p < 1:
        ordered, order = out.sort(dim=-1, descending=True)
        before = ordered.cumsum(-1) - ordered  # the mass of the more probable pieces
        keep = before < sampling.top_p * ordered.sum(-1, keepdim=True)  # the first piece always (before = 0)
        out = torch.zeros_like(out).scatter_(-1, order, torch.where(keep, ordered, 0.0))
    return out / out.sum(-1, keepdim=True)


def draw(probs: Tensor, sampling: Sampling, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """(ids (B,), the reshaped distribution (B, V|S)): one piece per row drawn from ``reshaped(probs)``."""
    shaped = reshaped(probs, sampling)
    return torch.multinomial(shaped, 1, generator=generator)[:, 0], shaped
