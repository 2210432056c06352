"""The Model map page on the tiny checkpoints (a self-attention and an SSRU decoder): the flow with this sentence's
shapes, the parameter total, picking a block, the paper's table 3, the decoding cost and its measurement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from apptest_helpers import ok, texts
from conftest import build_tiny_checkpoint
from streamlit.testing.v1 import AppTest

import core
from core.anatomy import parameter_table, tensor_shapes, translation_cost
from viz_app.figures import model_accounting

APP = Path(__file__).resolve().parents[2] / "viz_app" / "app.py"
TIMEOUT = 120
SENTENCE = "Is there any tea left?"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("map_checkpoints")
    build_tiny_checkpoint(base / "tiny", seed=3)
    build_tiny_checkpoint(base / "tiny-ssru", seed=0, decoder_self="ssru", pe_layout="concatenated", start="zeros")
    return base


@pytest.mark.parametrize("name", ["tiny", "tiny-ssru"])
def test_the_map_shows_this_sentences_shapes_and_the_total(root: Path, name: str, monkeypatch) -> None:
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(root))
    monkeypatch.setenv("LAB_CHECKPOINT", name)
    torch.set_num_threads(1)
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update({"page": "map", "text": SENTENCE})
    ok(at.run(timeout=TIMEOUT))
    bundle = core.load(root / name, device="cpu")
    out = bundle.translate(SENTENCE, truncate=True, record=core.Record(activations=True))
    total = sum(p.numel() for p in bundle.model.parameters())
    shown = texts(at)
    assert f"{total:,}" in [m.value for m in at.metric]
    assert f"**{total:,} parameters**" in shown
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    flow = charts[0]
    boxes = [s for s in flow["layout"]["shapes"] if s["type"] == "rect"]
    notes = " ".join(a["text"] for a in flow["layout"]["annotations"])
    for row in tensor_shapes(out, bundle.config):
        if row.stage.startswith("encoder.") and row.name.startswith("self-attention: output"):
            assert f"<b>{'×'.join(map(str, row.shape))}</b>" in notes
    assert len(boxes) == len(set(flow["data"][0]["customdata"]))
    assert ("SSRU instead of self-attention" in notes) == (name == "tiny-ssru")
    cost = translation_cost(out, bundle.config)
    assert model_accounting.cache_sentence(cost) in shown and model_accounting.work_sentence(cost) in shown
    assert "no single vocabulary gives both" in shown

    keys = at.selectbox(key="map_block").options
    at.selectbox(key="map_block").set_value(at.selectbox(key="map_block").options[-1])
    ok(at.run(timeout=TIMEOUT))
    assert len(keys) == len(boxes)
    if name != "tiny-ssru":  # a block of an opened layer is named with its layer, counted from 1
        assert any(k.startswith("encoder layer 1 · self-attention · ") for k in keys), keys
    assert [m.value for m in at.metric if m.label == "parameters this block adds"]

    at.button(key="map_measure").click()
    ok(at.run(timeout=TIMEOUT))
    assert any(t.startswith("Measured on this machine") for t in texts(at).split("\n"))
    assert parameter_table(bundle.config).total == total
