"""The Model map's flow on the other families: the boxes name the model's own norm (T5: RMSNorm) and position
signal (T5: a bias in attention; BART: a learned table per side, from row 2), and still count every parameter."""

from __future__ import annotations

import pytest
from conftest import build_tiny_checkpoint

import core
from core.anatomy import parameter_table, tensor_shapes
from viz_app.figures import model_flow

FAMILIES = {
    "t5": dict(
        d_kv=5,
        attention_scale=False,
        norm="pre",
        norm_kind="rms",
        positional="relative",
        relative_buckets=8,
        relative_max_distance=20,
        linear_bias=False,
        scale_embedding=False,
        gated_ffn=True,
        tie_output=False,
    ),
    "bart": dict(
        positional="learned",
        max_positions=64,
        position_offset=2,
        separate_positions=True,
        embed_norm=True,
        output_bias=True,
    ),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_flow_names_the_family_and_counts_every_parameter(family: str, tmp_path) -> None:
    bundle = core.load(build_tiny_checkpoint(tmp_path / family, **FAMILIES[family]), device="cpu")
    out = bundle.translate("the cat sat on the mat", record=core.Record(activations=True), max_len=6)
    table = parameter_table(bundle.config)
    nodes = model_flow.flow_nodes(tensor_shapes(out, bundle.config), table)
    assert sum(n.parameters for n in nodes) == table.total == sum(p.numel() for p in bundle.model.parameters())
    said = " ".join(f"{n.label} {n.detail}" for n in nodes)
    positions = {n.key: n.detail for n in nodes if n.key.endswith(".positions")}
    if family == "t5":
        assert "RMSNorm (before the sub-layer)" in said and "final RMSNorm of the encoder" in said
        assert "LayerNorm" not in said and "gated" in said
        assert all("relative position bias" in d for d in positions.values()), positions
    else:
        assert positions == {
            "source.positions": "learned table P, one per side, read from row 3",
            "target.positions": "learned table P, one per side, read from row 3",
        }
        assert "RMSNorm" not in said and "LayerNorm(x + FFN(x))" in said
