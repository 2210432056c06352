"""Decoding cost per step, with and without the KV cache: formulas against torch's own count of the matrix
products, cache sizes, and the measured times' shape."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_config
from torch.utils.flop_counter import FlopCounterMode

import core
from core import Transformer
from core.anatomy.cost import decoding_cost, translation_cost
from core.anatomy.timing import measure_steps
from core.fast.plan import DecoderState

ROOT = Path(__file__).resolve().parents[3]


def flops(fn) -> int:
    """Matrix-product FLOPs torch counts while ``fn`` runs (on the CPU its fused attention is not counted: there the
    count is the projections' only, which is what the test compares)."""
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return int(counter.get_total_flops())


@pytest.mark.parametrize(
    "overrides", [{}, {"decoder_self": "ssru"}, {"norm": "pre", "d_ff": 24, "n_decoder_layers": 3}], ids=str
)
@torch.inference_mode()
def test_linear_products_match_torchs_count(overrides):
    config = tiny_config(**overrides)
    torch.manual_seed(0)
    model = Transformer(config).eval()
    Ts, n = 7, 5
    src, tgt = torch.randint(4, 60, (1, Ts)), torch.randint(4, 60, (1, n))
    cost = decoding_cost(config, src_len=Ts, out_len=n)
    memory = model.encode(src)
    state = DecoderState.empty(config.n_decoder_layers)
    for t in range(n):
        cached = flops(lambda t=t: model.decode(tgt[:, t : t + 1], memory, None, state=state))
        uncached = flops(lambda t=t: model.decode(tgt[:, : t + 1], memory, None))
        assert cached == 2 * (cost.linear_cached[t] + cost.output_cached[t])
        assert uncached == 2 * (cost.linear_uncached[t] + cost.output_uncached[t])
    attention_products = config.n_encoder_layers * 2 * Ts * Ts * config.d_model
    assert flops(lambda: model.encode(src)) == 2 * (cost.encoder_macs - attention_products)


def test_a_worked_example():
    """d_model 16, d_ff 32, vocabulary 64, two decoder layers, 7 source pieces: step 1 (T = 2) by hand."""
    cost = decoding_cost(tiny_config(), src_len=7, out_len=5)
    d, ff, V, Ts, T = 16, 32, 64, 7, 2
    assert cost.attention_cached[1] == 2 * (2 * T * d + 2 * Ts * d)
    assert cost.linear_cached[1] == 2 * (4 * d * d + 2 * d * d + 2 * d * ff)
    assert cost.linear_cached[0] - cost.linear_cached[1] == 2 * 2 * Ts * d * d  # the source's K, V at step 0
    assert (
        cost.macs_uncached[1]
        == 2 * (4 * T * d * d + 2 * T * T * d + 2 * T * d * d + 2 * Ts * d * d)
        + 2 * (2 * T * Ts * d + 2 * T * d * ff)
        + T * d * V
    )
    assert cost.macs_cached[0] == cost.macs_uncached[0]  # the first step computes the same either way
    assert np.all(np.diff(cost.macs_uncached) > np.diff(cost.macs_cached))  # the prefix grows, the step does not
    assert cost.saving > 1
    assert list(cost.self_kv_bytes) == [2 * t * d * 4 for t in range(1, 6)]  # float32
    assert cost.cross_kv_bytes == 2 * Ts * d * 4 and cost.state_bytes == 0
    assert cost.cache_bytes[-1] == 2 * (2 * 5 * d * 4 + 2 * Ts * d * 4)
    half = decoding_cost(tiny_config(), src_len=7, out_len=5, dtype=torch.float16)
    assert half.cross_kv_bytes * 2 == cost.cross_kv_bytes
    with pytest.raises(ValueError):
        decoding_cost(tiny_config(), src_len=0, out_len=3)


def test_an_ssru_decoder_keeps_a_state_not_a_growing_cache():
    cost = decoding_cost(tiny_config(decoder_self="ssru"), src_len=7, out_len=5)
    assert not cost.self_kv_bytes.any() and cost.state_bytes == 16 * 4
    assert len(set(cost.cache_bytes.tolist())) == 1  # the same after every step
    assert "SSRU" in cost.keeps and "no growing cache" in cost.keeps
    assert "every position so far" in decoding_cost(tiny_config(), src_len=7, out_len=5).keeps
    with pytest.raises(ValueError):
        cost.self_kv_bytes[0] = 1  # read-only


@pytest.fixture(scope="module")
def en_pt():
    bundle = core.load(ROOT / "checkpoints" / "distilled-en-pt", device="cpu")
    return bundle, bundle.translate("Is there any tea left?")


def test_translation_cost_reads_the_sentence(en_pt):
    bundle, out = en_pt
    cost = translation_cost(out, bundle.config)
    assert (cost.src_len, cost.out_len) == (len(out.src_tokens), len(out.output_tokens))
    assert cost.n_layers == 2 and cost.cross_kv_bytes == 2 * len(out.src_tokens) * 256 * 4


def test_measured_steps_have_the_sentences_shape(en_pt):
    bundle, out = en_pt
    measured = measure_steps(bundle.model, out, repeats=2)
    n = len(out.output_tokens)
    assert measured.cached.shape == measured.uncached.shape == (n,)
    assert np.all(measured.cached > 0) and np.all(np.isfinite(measured.uncached)) and measured.encoder > 0
    assert measured.repeats == 2 and measured.device == "cpu"
    with pytest.raises(ValueError):
        measure_steps(bundle.model, out, repeats=0)
