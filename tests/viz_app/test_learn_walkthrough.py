"""The Learn page's arithmetic by hand (viz_app/learn/walkthrough.py): the softmax of one query equals torch's, a
blocked key gets weight 0, and a fully masked row gets all-zero weights as the engine records it."""

from __future__ import annotations

import math

import numpy as np
import torch

from viz_app.learn.walkthrough import softmax_by_hand


def test_the_softmax_by_hand_equals_torchs_with_the_mask_applied() -> None:
    rng = np.random.default_rng(0)
    q, keys, values = rng.normal(size=8), rng.normal(size=(5, 8)), rng.normal(size=(5, 8))
    mask = np.array([True, True, False, True, False])
    hand = softmax_by_hand(q, keys, values, mask)
    scores = torch.tensor(keys @ q / math.sqrt(8)).masked_fill(~torch.tensor(mask), float("-inf"))
    expected = torch.softmax(scores, -1).numpy()
    np.testing.assert_allclose(hand.weights, expected, atol=1e-12)
    assert hand.weights[2] == 0.0 and hand.weights[4] == 0.0 and np.isneginf(hand.masked[[2, 4]]).all()
    np.testing.assert_allclose(hand.output, expected @ values, atol=1e-12)
    np.testing.assert_allclose(hand.scaled, hand.dots / math.sqrt(8))


def test_a_fully_masked_row_gets_zero_weights_not_nan() -> None:
    q, keys = np.ones(4), np.ones((3, 4))
    hand = softmax_by_hand(q, keys, keys, np.zeros(3, dtype=bool))
    assert np.array_equal(hand.weights, np.zeros(3)) and np.array_equal(hand.output, np.zeros(4))
