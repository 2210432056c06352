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

The recorded probability of a drawn piece stays the model's own (before temperature), as for a greedy step; what
the draw did is recorded beside it at the ``output.draw.*`` sites (``Drawn.arrays``: the top pieces' probabilities
in the distribution drawn from, which of them the cut removed, the drawn piece's probability there and its rank, the
pieces kept and cut), so a trace shows the draw itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import InputError
from ..sites import DrawArray


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


def tempered(probs: Tensor, temperature: float) -> Tensor:
    """``probs`` (B, V|S) after temperature alone, renormalised (T = 0: all the mass on the most probable piece)."""
    probs = probs.float()
    if temperature == 0:
        return torch.zeros_like(probs).scatter_(-1, probs.argmax(-1, keepdim=True), 1.0)
    allowed = probs > 0  # what the rules leave; an id they set to 0 stays 0 at any temperature
    logp = probs.clamp_min(1e-45).log()
    logp = logp - logp.max(-1, keepdim=True).values  # 0 for the top piece: no overflow at a tiny temperature
    return torch.softmax(torch.where(allowed, logp / temperature, float("-inf")), dim=-1)


def cut(out: Tensor, sampling: Sampling) -> Tensor:
    """A tempered distribution ``out`` (B, V|S) after the top-k and top-p cut, renormalised."""
    if sampling.top_k is not None and sampling.top_k < out.shape[-1]:
        kth = out.topk(sampling.top_k, dim=-1).values[..., -1:]  # (B, 1)
        out = torch.where(out >= kth, out, 0.0)
    if sampling.top_p is not None and sampling.top_p < 1:
        ordered, order = out.sort(dim=-1, descending=True)
        before = ordered.cumsum(-1) - ordered  # the mass of the more probable pieces
        keep = before < sampling.top_p * ordered.sum(-1, keepdim=True)  # the first piece always (before = 0)
        out = torch.zeros_like(out).scatter_(-1, order, torch.where(keep, ordered, 0.0))
    return out / out.sum(-1, keepdim=True)


def reshaped(probs: Tensor, sampling: Sampling) -> Tensor:
    """The distribution a piece is drawn from (B, V|S): ``probs`` after temperature, top-k and top-p, renormalised
    (T = 0: all the mass on the most probable piece)."""
    return cut(tempered(probs, sampling.temperature), sampling)


@dataclass(frozen=True)
class Drawn:
    """One step's draw: the columns drawn (B,), and the distributions after temperature (B, V|S) and after the cut,
    the one drawn from (B, V|S)."""

    columns: Tensor
    tempered: Tensor
    shaped: Tensor

    def arrays(self, probs: Tensor, top_columns: Tensor, taken: Tensor, chosen: Tensor) -> dict[DrawArray, Tensor]:
        """What the step records at the ``output.draw.*`` sites (``core.sites.draw_site``), for the model's
        distribution ``probs`` (B, V|S), its top columns (B, k), the columns taken (B,) (the drawn ones, or a forced
        id's) and the model's probability of each taken piece (B,) (0 for a forced id off a shortlist)."""
        removed = (self.tempered > 0) & (self.shaped == 0)  # (B, V|S) what the cut took
        taken_p = self.shaped.gather(-1, taken[:, None])[:, 0]
        return {
            "top_probs": self.shaped.gather(-1, top_columns),
            "top_cut": removed.gather(-1, top_columns),
            "prob": torch.where(chosen > 0, taken_p, 0.0),  # a piece the model gives 0 is never drawn
            "rank": (probs > chosen[:, None]).sum(-1) + 1,
            "kept": (self.shaped > 0).sum(-1),
            "cut": removed.sum(-1),
        }


def draw(probs: Tensor, sampling: Sampling, generator: torch.Generator) -> Drawn:
    """One piece per row drawn from ``reshaped(probs)``."""
    warm = tempered(probs, sampling.temperature)
    shaped = cut(warm, sampling)
    return Drawn(torch.multinomial(shaped, 1, generator=generator)[:, 0], warm, shaped)
