"""The Model map's pure builders: one flow node per block with tensor_shapes' shapes, counts that add up to the
model's own, the paper's table and the decoding-cost sentences computed from core.anatomy."""

from __future__ import annotations

import pytest
from conftest import build_tiny_checkpoint, tiny_config

import core
from core.anatomy import decoding_cost, parameter_table, table_3, tensor_shapes
from core.anatomy import paper as paper_module
from viz_app.figures import model_accounting, model_flow, model_map


@pytest.fixture(scope="module", params=[{}, {"decoder_self": "ssru"}, {"norm": "pre", "output_bias": True}])
def run(request, tmp_path_factory):
    folder = build_tiny_checkpoint(tmp_path_factory.mktemp("map") / "tiny", **request.param)
    bundle = core.load(folder, device="cpu")
    out = bundle.translate("the cat sat on the mat", record=core.Record(activations=True), max_len=6)
    return bundle, out


def test_one_node_per_block_with_the_shapes_of_tensor_shapes(run) -> None:
    bundle, out = run
    shapes = tensor_shapes(out, bundle.config)
    table = parameter_table(bundle.config)
    nodes = model_flow.flow_nodes(shapes, table, src_tokens=out.src_tokens, out_tokens=out.output_tokens)
    for n in nodes:
        if n.key == "embed.tgt":  # tensor_shapes lists the target side's sum only: the embedding has its shape
            assert n.shape == next(r for r in shapes if r.name.startswith("decoder input (")).shape
        else:
            assert n.output in shapes and all(r in shapes for r in n.rows)
        assert n.shape_text == "×".join(str(d) for d in n.output.shape)
        if n.site is not None:
            assert n.site in out.trace, n.key
    total = sum(p.numel() for p in bundle.model.parameters())
    assert sum(n.parameters for n in nodes) == table.total == total
    counted = {b.name for b in table.blocks if b.count}  # every counted block is in exactly one box
    assert counted <= {n.key for n in nodes} | {"positions", "output.bias"}
    fig = model_map.flow_figure(nodes, title="map", selected=nodes[3].key)
    boxes = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(boxes) == len(nodes)
    shown = [a.text for a in fig.layout.annotations]
    assert all(any(f"<b>{n.shape_text}</b>" in t for t in shown) for n in nodes)
    assert list(dict.fromkeys(fig.data[0].customdata)) == [n.key for n in nodes]
    ssru = bundle.config.decoder_self == "ssru"
    assert any(n.key.endswith(".ssru") for n in nodes) == ssru
    pre = bundle.config.norm == "pre"
    assert any(n.key == "encoder_norm" for n in nodes) == pre
    first = [n.key for n in nodes if n.key.startswith("encoder.0.")]
    assert first[0].endswith("_norm") == pre  # pre-norm: LayerNorm before the sub-layer


def test_collapsed_layers_keep_the_total(run) -> None:
    bundle, out = run
    table = parameter_table(bundle.config)
    nodes = model_flow.flow_nodes(tensor_shapes(out, bundle.config), table, expanded={"encoder.0", "decoder.0"})
    assert {"encoder.1", "decoder.1"} <= {n.key for n in nodes}
    assert sum(n.parameters for n in nodes) == table.total


def test_tables_total_equals_numel(run) -> None:
    bundle, _ = run
    table = parameter_table(bundle.config)
    numel = sum(p.numel() for p in bundle.model.parameters())
    layers = model_accounting.layer_frame(table)
    assert layers.iloc[-1]["layer"] == "total" and layers.iloc[-1]["parameters"] == numel
    assert layers.iloc[:-1]["parameters"].sum() == numel
    # layers counted from 1, as every page counts them
    assert "encoder layer 1" in set(layers["layer"]) and not any("encoder.0" in x for x in layers["layer"])
    assert (
        model_accounting.layer_name("decoder.1") == "decoder layer 2"
        and model_accounting.layer_name("output") == "output"
    )
    assert model_accounting.block_frame(table)["parameters"].sum() == numel
    said = model_accounting.total_sentence(table, numel)
    assert f"{numel:,}" in said and "the same as" in said
    assert "misses 5" in model_accounting.total_sentence(table, numel + 5)


def test_activation_figure_has_the_norm_per_token(run) -> None:
    _, out = run
    values = out.trace["encoder.0.out"]
    fig = model_map.activation_figure(values, out.src_tokens, title="t")
    assert fig.data[0].type == "heatmap" and fig.data[1].type == "bar"
    assert len(fig.data[1].x) == len(out.src_tokens)


def test_paper_sentences_are_computed() -> None:
    said = model_accounting.vocabulary_sentence()
    assert "no single vocabulary gives both base's 65 and big's 213" in said
    low, high = paper_module.common_vocab([r for r in paper_module.TABLE_3 if r.group != "big"])
    assert f"{low:,}" in said and f"{high:,}" in said
    counts = table_3()
    base = next(c for c in counts if c.row.label == "base")
    verdict = model_accounting.paper_verdict(base)
    assert "which rounds to the printed figure" in verdict and "3,152,384 with them" in verdict
    big = next(c for c in counts if c.row.label == "big")
    assert "does not round" in model_accounting.paper_verdict(big)
    unprinted = next(c for c in counts if c.row.published is None)
    assert "prints no parameter figure" in model_accounting.paper_verdict(unprinted)
    frame = model_accounting.paper_frame(counts)
    assert len(frame) == len(paper_module.TABLE_3)
    assert len(model_accounting.paper_figure(counts).data) == 2


def test_cost_sentences_follow_the_numbers(cfg) -> None:
    cost = decoding_cost(cfg, src_len=7, out_len=5)
    said = model_accounting.cache_sentence(cost)
    assert f"{int(cost.cache_bytes[-1]):,} bytes" in said
    assert f"{cost.saving:.1f}× the work" in model_accounting.work_sentence(cost)
    assert "saves nothing yet" in model_accounting.work_sentence(decoding_cost(cfg, src_len=7, out_len=1))
    ssru = decoding_cost(tiny_config(decoder_self="ssru"), src_len=7, out_len=5)
    assert "no growing cache" in model_accounting.cache_sentence(ssru)
    fig = model_accounting.cost_figure(cost, title="cost")
    assert {t.name for t in fig.data} >= {"work with the cache", "work without"}
