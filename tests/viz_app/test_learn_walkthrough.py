"""The Learn page's arithmetic by hand (viz_app/learn/walkthrough.py): the softmax of one query equals torch's, a
blocked key gets weight 0, a fully masked row gets all-zero weights as the engine records it, and the arithmetic
between the values core recorded closes for every block."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import build_tiny_checkpoint

import core
from core.sites import attention_array
from viz_app.learn.walkthrough import Walkthrough, softmax_by_hand


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


@pytest.mark.parametrize("overrides", [{}, {"norm": "pre"}, {"decoder_self": "ssru"}], ids=["post", "pre", "ssru"])
def test_the_walkthrough_arithmetic_closes_between_core_s_recorded_values(tmp_path, overrides) -> None:
    """From each block's recorded input x the page's arithmetic reaches the recorded q, k, v; from the recorded heads
    and W_O the recorded stream after the sub-layer (no copy of the layer runs)."""
    bundle = core.load(build_tiny_checkpoint(tmp_path / "m", seed=2, **overrides), device="cpu")
    run = bundle.record_more(bundle.translate("The cat sleeps on the warm chair.", max_len=6))
    for kind in run.trace.kinds:
        for layer in range(2):
            walk = Walkthrough(bundle, run.trace, kind, layer)
            x_q, x_kv = walk.inputs()
            Q, K, V = run.trace.qkv(kind, layer)
            for head in range(Q.shape[0]):
                (wq, bq), (wk, bk), (wv, bv) = (walk.projection(n, head) for n in ("q", "k", "v"))
                np.testing.assert_allclose(x_q @ wq + bq, Q[head], atol=1e-5)
                np.testing.assert_allclose(x_kv @ wk + bk, K[head], atol=1e-5)
                np.testing.assert_allclose(x_kv @ wv + bv, V[head], atol=1e-5)
            np.testing.assert_allclose(walk.input_by_hand(), x_q, atol=1e-5)
            heads = run.trace[attention_array(kind, layer, "heads")]
            _, by_hand, recorded = walk.after(walk.project_heads(np.asarray(heads, dtype=np.float64)))
            np.testing.assert_allclose(by_hand, recorded, atol=1e-5, err_msg=f"{kind} {layer}")
