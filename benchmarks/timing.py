"""Timing that is fair on a busy 2-core machine: contenders interleaved in the same rounds.

Each round runs every contender once (in a rotated order), so background load hits all of
them alike; warm-up rounds are dropped; we report the median and the spread (min..max of the
kept rounds) in milliseconds, and ratios as the median of per-round ratios measured in the same call.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Stat:
    samples: tuple[float, ...]  # seconds, warm-up excluded

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def ms(self) -> str:
        """'12.3 ms (11.9–13.0)': median and the range of the kept rounds."""
        lo, hi = min(self.samples) * 1e3, max(self.samples) * 1e3
        return (
            f"{self.median * 1e3:.{_digits(self.median)}f} ms ({lo:.{_digits(lo / 1e3)}f}–{hi:.{_digits(hi / 1e3)}f})"
        )


def _digits(seconds: float) -> int:
    return 3 if seconds < 0.001 else 2 if seconds < 0.01 else 1 if seconds < 1 else 0


def interleaved(
    works: Mapping[str, Callable[[], object]], rounds: int = 7, warmup: int = 2, budget_s: float | None = None
) -> dict[str, Stat]:
    """Time each work ``rounds`` times (after ``warmup`` untimed rounds), interleaving contenders.

    ``budget_s`` stops early (keeping at least 3 rounds) when the timed rounds exceed it.
    """
    names = list(works)
    for _ in range(warmup):
        for name in names:
            works[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    spent = 0.0
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            t0 = time.perf_counter()
            works[name]()
            dt = time.perf_counter() - t0
            samples[name].append(dt)
            spent += dt
        if budget_s is not None and r >= 2 and spent > budget_s:
            break
    return {name: Stat(tuple(s)) for name, s in samples.items()}


def paired_ratio(a: Stat, b: Stat) -> float:
    """Median over rounds of a/b, each pair timed back to back in one round: robust to load that drifts
    between rounds (the ratio of the medians can be skewed by a burst that hit only some rounds)."""
    return statistics.median(x / y for x, y in zip(a.samples, b.samples, strict=True))
