"""Every tensor's shape for one sentence: equal to the recorded array's wherever a site records it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import build_tiny_checkpoint

import core
from core.anatomy.shapes import tensor_shapes
from core.sites import memory_site

ROOT = Path(__file__).resolve().parents[3]


def check(out, config) -> list:
    rows = tensor_shapes(out, config)
    named = [r for r in rows if r.site]
    assert named and all(r.recorded for r in named), [r.site for r in named if not r.recorded]  # no site misnamed
    for r in named:
        assert out.trace[r.site].shape == r.shape, (r.stage, r.name, r.site)
    return list(rows)


@pytest.mark.parametrize(
    "overrides",
    [{}, {"decoder_self": "ssru"}, {"norm": "pre", "output_bias": True}],
    ids=["attention", "ssru", "pre-norm"],
)
def test_tiny_checkpoints(tmp_path, overrides):
    bundle = core.load(build_tiny_checkpoint(tmp_path / "tiny", **overrides), device="cpu")
    out = bundle.translate("the cat sat on the mat", record=core.Record(activations=True), max_len=6)
    rows = check(out, bundle.config)
    Ts, Tt = len(out.src_tokens), len(out.tgt_tokens)
    stages = [r.stage for r in rows]
    assert stages[0] == "source" and stages[-1] == "output" and "memory" in stages
    assert sum(1 for r in rows if r.name == "layer output (add & norm)") == 4  # 2 encoder + 2 decoder layers
    by_name = {(r.stage, r.name): r for r in rows}
    assert by_name["decoder.1", "cross-attention: scores QKᵀ/√d_k"].shape == (2, Tt, Ts)
    assert by_name["encoder.0", "feed-forward hidden act(x·W1 + b1)"].shape == (Ts, 32)
    assert by_name["output", "next-word probabilities softmax(logits)"].shape == (bundle.config.tgt_vocab_size,)
    memory = by_name["memory", "memory (the encoder's output)"]
    assert memory.site == memory_site()  # recorded with activations, after a pre-norm encoder's final norm too
    ssru = overrides.get("decoder_self") == "ssru"
    assert any(r.site == "decoder.0.ssru.gate" for r in rows) == ssru
    assert any(r.site == "decoder.0.self.q" for r in rows) != ssru


def test_a_real_sentence_on_distilled_en_pt():
    bundle = core.load(ROOT / "checkpoints" / "distilled-en-pt", device="cpu")
    out = bundle.translate("Is there any tea left?", record=core.Record(activations=True))
    rows = check(out, bundle.config)
    Ts, Tt = len(out.src_tokens), len(out.tgt_tokens)
    by_site = {r.site: r for r in rows if r.site}
    assert by_site["encoder.5.self.q"].shape == (8, Ts, 32)
    assert by_site["decoder.1.cross.k"].shape == (8, Ts, 32) and by_site["decoder.1.cross.q"].shape == (8, Tt, 32)
    assert by_site["embed.src"].shape == (Ts, 256) and by_site["output.top_ids"].shape == (Tt, 10)
    assert any(r.shape == (32_000,) for r in rows)


def test_without_activations_fewer_sites_are_recorded(tmp_path):
    bundle = core.load(build_tiny_checkpoint(tmp_path / "tiny"), device="cpu")
    out = bundle.translate("the cat", max_len=4)  # activations not recorded
    rows = tensor_shapes(out.trace, bundle.config)
    missing = {r.site for r in rows if r.site and not r.recorded}
    assert "embed.src" in missing and "encoder.0.out" in missing and "encoder.0.self.q" not in missing
    for r in rows:
        if r.recorded:
            assert out.trace[r.site].shape == r.shape
