"""How well a score separates two groups: ROC AUC from ranks, and the flag threshold that keeps false flags rare.

Used to evaluate the scan's hallucination flag (``benchmarks/hallucination.py``): positives are detached
translations, negatives correct ones, and a score is "higher = more suspicious" (e.g. minus the source share).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import InputError


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``values`` (n,), ties sharing the mean of the ranks they span."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    ranks = np.empty(len(values), dtype=np.float64)
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2 + 1  # the mean of ranks start+1 .. end+1
        start = end + 1
    return ranks


def roc_auc(positive: Sequence[float], negative: Sequence[float]) -> float:
    """The area under the ROC curve of a score meant to be higher for ``positive`` than for ``negative`` items:
    the chance that a random positive scores above a random negative, a tie counting half (Mann-Whitney U over
    the two group sizes). 1 separates perfectly, 0.5 is chance."""
    pos, neg = np.asarray(positive, dtype=np.float64), np.asarray(negative, dtype=np.float64)
    if pos.size == 0 or neg.size == 0:
        raise InputError(f"ROC AUC needs both groups: {pos.size} positive and {neg.size} negative scores")
    if not (np.isfinite(pos).all() and np.isfinite(neg).all()):
        raise InputError("ROC AUC needs finite scores (a NaN or infinity is among them)")
    ranks = average_ranks(np.concatenate([pos, neg]))
    u = ranks[: pos.size].sum() - pos.size * (pos.size + 1) / 2
    return float(u / (pos.size * neg.size))


def largest_threshold(negative: Sequence[float], max_false_rate: float) -> float:
    """The largest t such that at most ``max_false_rate`` of ``negative`` lie strictly below t: flagging
    "value < t" flags at most that share of them. With k = floor(rate * n) allowed, t is the (k+1)-th smallest
    value (every value below it is one of the k smallest)."""
    values = np.sort(np.asarray(negative, dtype=np.float64))
    if values.size == 0 or not 0.0 <= max_false_rate < 1.0:
        raise InputError(f"needs values and a rate in [0, 1); got {values.size} values, rate {max_false_rate}")
    k = int(np.floor(max_false_rate * values.size + 1e-9))
    return float(values[k])
