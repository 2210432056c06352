"""Parameter accounting: every block's formula and count, totals equal to the model's numel, shared matrices once."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import build_tiny_checkpoint, tiny_config

import core
from core import Transformer
from core.anatomy.parameters import Architecture, check_parameters, evaluate, parameter_table, render

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ["distilled-en-pt", "distilled-pt-en", "ding-en-de"]
IMPORTED = sorted(p.name for p in (ROOT / "checkpoints").glob("bergamot-*") if (p / "config.json").exists())

VARIANTS = [
    {},
    {"norm": "pre"},
    {"decoder_self": "ssru"},
    {"decoder_self": "ssru", "norm": "pre", "output_bias": True},
    {"share_embeddings": False},
    {"share_embeddings": False, "tgt_vocab_size": 48},
    {"share_embeddings": False, "tie_output": False, "tgt_vocab_size": 40},
    {"tie_output": False},
    {"tie_output": False, "output_bias": True},
    {"positional": "learned", "max_positions": 50},
    {"n_encoder_layers": 3, "n_decoder_layers": 1, "d_ff": 24, "n_heads": 4},
    # BART (learned tables per side from row 2, embedding norms) and mBART (the same, pre-norm)
    {
        "positional": "learned",
        "max_positions": 50,
        "position_offset": 2,
        "separate_positions": True,
        "embed_norm": True,
    },
    {"positional": "learned", "position_offset": 2, "separate_positions": True, "embed_norm": True, "norm": "pre"},
    {"pe_layout": "concatenated", "position_offset": 2, "norm": "pre"},  # M2M100 / NLLB
]


def test_paper_encoder_layer_is_3_152_384():
    """The issue's figure: an encoder layer of d_model 512, d_ff 2048 with biases."""
    table = parameter_table(Architecture(37000, 37000, 512, 2048, 8, 64, 64, 6, 6))
    assert table.group_totals()["encoder.0"] == 3_152_384
    attention = table.block("encoder.0.self_attn")
    assert (attention.formula, attention.numbers, attention.size) == (
        "4·d_model² + 4·d_model",
        "4·512² + 4·512",
        1_050_624,
    )
    ffn = table.block("encoder.0.ffn")
    assert (ffn.formula, ffn.size) == ("2·d_model·d_ff + d_ff + d_model", 2_099_712)
    assert table.block("encoder.0.ffn_norm").formula == "2·d_model"


@pytest.mark.parametrize("overrides", VARIANTS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "base")
def test_tiny_variants_add_up_to_the_models_numel(overrides):
    config = tiny_config(**overrides)
    model = Transformer(config)
    table = parameter_table(config)
    check = check_parameters(table, model)
    assert check.ok, check
    assert table.total == sum(p.numel() for p in model.parameters()) == check.numel
    for block in table.blocks:  # the number shown is the formula's value and the tensors' size
        assert block.size == sum(p.numel for p in block.pieces)


def test_shared_matrices_are_counted_once_and_named():
    table = parameter_table(tiny_config())  # shared embeddings, tied output
    assert {b.name: b.shared_with for b in table.shared} == {"embed.tgt": "embed.src", "output.projection": "embed.src"}
    assert table.block("embed.tgt").count == 0 and table.block("embed.tgt").size == 64 * 16
    untied = parameter_table(tiny_config(share_embeddings=False, tgt_vocab_size=48))
    assert {b.name: b.shared_with for b in untied.shared} == {"output.projection": "embed.tgt"}
    assert untied.block("embed.tgt").formula == "V_tgt·d_model" and untied.block("embed.tgt").count == 48 * 16
    assert parameter_table(tiny_config(tie_output=False)).block("output.projection").count == 64 * 16


def test_variant_blocks_and_formulas():
    ssru = parameter_table(tiny_config(decoder_self="ssru", norm="pre", output_bias=True))
    names = [b.name for b in ssru.blocks]
    assert "decoder.0.ssru" in names and "decoder.0.self_attn" not in names
    assert ssru.block("decoder.0.ssru").formula == "2·d_model² + d_model"  # W, and W_f with its bias
    assert ssru.block("decoder.0.ssru").size == 2 * 16 * 16 + 16
    assert ssru.block("encoder_norm").group == "final norms" and ssru.block("decoder_norm").size == 32
    assert ssru.block("output.bias").formula == "V" and ssru.block("output.bias").count == 64
    assert "encoder_norm" not in [b.name for b in parameter_table(tiny_config()).blocks]  # post-norm: none
    learned = parameter_table(tiny_config(positional="learned", max_positions=50)).block("positions")
    assert (learned.formula, learned.numbers, learned.count) == ("P·d_model", "50·16", 800)
    sinusoidal = parameter_table(tiny_config()).block("positions")
    assert (sinusoidal.formula, sinusoidal.count) == ("0", 0)


def test_head_size_apart_from_d_model_over_h():
    arch = Architecture(100, 100, 512, 2048, 8, 16, 64, 1, 1, attention_bias=False)
    block = parameter_table(arch).block("encoder.0.self_attn")
    assert block.formula == "2·d_model·h·d_k + 2·d_model·h·d_v"
    assert block.size == 2 * 512 * 8 * 16 + 2 * 512 * 8 * 64
    assert render([(3, ("a", "a", "a", "b"))]) == "3·a³·b"
    assert evaluate([(3, ("a", "a", "a", "b"))], {"a": 2, "b": 5}) == 120


def test_a_wrong_table_is_caught():
    """check_parameters fails on a table for another model (a test that can fail)."""
    model = Transformer(tiny_config())
    check = check_parameters(parameter_table(tiny_config(d_ff=24)), model)
    assert not check.ok and check.wrong_shape and check.counted != check.numel
    check = check_parameters(parameter_table(tiny_config(share_embeddings=False)), model)
    assert not check.ok and check.missing == ()  # tgt_embed.weight is in the state dict, as the src one's alias
    assert check.wrongly_shared == () and check.counted != check.numel


def test_tiny_checkpoint_round_trip(tmp_path):
    path = build_tiny_checkpoint(tmp_path / "tiny", decoder_self="ssru", output_bias=True)
    bundle = core.load(path, device="cpu")
    check = check_parameters(parameter_table(bundle.config), bundle.model)
    assert check.ok, check


@pytest.mark.parametrize("name", COMMITTED + IMPORTED)  # the imported ones where `make models` made them
def test_checkpoints_add_up(name):
    path = ROOT / "checkpoints" / name
    model, _, _ = core.load_checkpoint(path)
    table = parameter_table(model.config)
    check = check_parameters(table, model)
    assert check.ok, check
    assert table.total == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("version", ["v1.0", "v1.1"])
def test_t5_shapes_add_up_to_the_models_numel(version):
    from hf_folders import T5_V10, T5_V11

    config = tiny_config(**(T5_V10 if version == "v1.0" else T5_V11))  # d_kv 5, RMSNorm, no biases, relative bias
    model = Transformer(config)
    table = parameter_table(config)
    check = check_parameters(table, model)
    assert check.ok, check
    assert table.total == sum(p.numel() for p in model.parameters())
    ffn = table.block("encoder.0.ffn")
    assert ffn.formula == ("3·d_model·d_ff" if version == "v1.1" else "2·d_model·d_ff")
    assert table.block("encoder.0.ffn_norm").formula == "d_model"  # a gain, no bias
    assert table.block("decoder.1.self_attn").formula == "2·d_model·h·d_k + 2·d_model·h·d_v"
    bias = table.block("positions.decoder")
    assert (bias.formula, bias.numbers, bias.count) == ("B·h", "8·2", 16)
