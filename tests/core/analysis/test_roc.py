"""ROC AUC from ranks and the false-flag threshold (core.analysis.roc), against cases worked by hand."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from core.analysis.roc import average_ranks, largest_threshold, roc_auc
from core.errors import InputError


def test_average_ranks_share_ties() -> None:
    assert average_ranks(np.array([10.0, 20.0, 20.0, 5.0])).tolist() == [2.0, 3.5, 3.5, 1.0]


def test_auc_of_a_hand_worked_case_with_ties() -> None:
    # positives 3, 2, 2 against negatives 1, 2: of the 6 pairs, 4 are won and 2 tied -> (4 + 2 * 0.5) / 6
    assert roc_auc([3, 2, 2], [1, 2]) == pytest.approx(5 / 6)
    assert roc_auc([5, 6], [1, 2, 3]) == 1.0
    assert roc_auc([1, 2], [5, 6]) == 0.0
    assert roc_auc([1, 1], [1, 1, 1]) == 0.5


def test_auc_equals_the_pairwise_definition() -> None:
    rng = np.random.default_rng(0)
    pos, neg = rng.integers(0, 6, 40), rng.integers(0, 5, 30)  # many ties
    pairs = [1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg)]
    assert roc_auc(pos, neg) == pytest.approx(np.mean(pairs))


def test_auc_refuses_an_empty_group_or_nan() -> None:
    with pytest.raises(InputError, match="0 positive"):
        roc_auc([], [1.0])
    with pytest.raises(InputError, match="finite"):
        roc_auc([float("nan")], [1.0])


def test_largest_threshold_keeps_false_flags_within_the_rate() -> None:
    correct = [0.9, 0.8, 0.95, 0.7]
    assert largest_threshold(correct, 0.25) == 0.8  # flags 0.7 only: 1 of 4
    assert largest_threshold(correct, 0.0) == 0.7  # flags none
    rng = np.random.default_rng(1)
    values = rng.random(1000)
    t = largest_threshold(values, 0.01)
    assert (values < t).sum() == 10 and (values <= t).sum() == 11  # the largest such t: 10 below it, the 11th at it
