"""The configuration a Hugging Face Marian model needs, in core itself (no transformers here): the swish activation,
transformers' sinusoid table, unscaled embeddings and ids decoding never chooses."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import build_tiny_checkpoint, tiny_config

import core
from core import InferenceOptions, ModelConfig, Recorder, Transformer
from core.decoding.search import beam_search, greedy
from core.fast.weights import FastWeights
from core.recording.call import Call
from core.transformer.positional import sinusoidal_table

OPTIONS = InferenceOptions()


def test_the_new_fields_validate_and_survive_json():
    cfg = tiny_config(activation="swish", pe_layout="concatenated_hf", scale_embedding=False, suppress_ids=[9, 5, 9])
    assert cfg.suppress_ids == (5, 9)  # a list from JSON becomes a sorted tuple: the config stays hashable
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg and hash(cfg) == hash(ModelConfig.from_dict(cfg.to_dict()))
    assert cfg.to_dict()["suppress_ids"] == [5, 9]  # what json.loads gives back compares equal
    for bad, message in (
        (dict(suppress_ids=[2]), "suppress_ids holds eos_id 2"),
        (dict(suppress_ids=[64]), "suppress_ids: 64 is outside the target vocabulary"),
        (dict(suppress_ids=[True]), "suppress_ids must be a list of token ids"),
        (dict(suppress_ids=5), "suppress_ids must be a list of token ids"),
        (dict(scale_embedding=1), "scale_embedding must be true or false"),
        (dict(activation="gelu_fast"), "activation must be one of"),
        (dict(pe_layout="xlm"), "pe_layout must be one of"),
    ):
        with pytest.raises(ValueError, match=message):
            tiny_config(**bad)


def test_transformers_sinusoids_are_the_papers_frequencies_concatenated():
    table = sinusoidal_table(50, 16, "concatenated_hf").numpy()
    for p in (0, 1, 7, 49):
        for i in range(8):
            angle = p / 10000 ** (2 * i / 16)
            assert table[p, i] == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[p, 8 + i] == pytest.approx(math.cos(angle), abs=1e-6)
    assert not np.allclose(table, sinusoidal_table(50, 16, "concatenated").numpy(), atol=1e-3)  # not Marian C++'s


@torch.no_grad()
def test_swish_and_unscaled_embeddings_do_what_they_say():
    torch.manual_seed(0)
    model = Transformer(tiny_config(activation="swish", scale_embedding=False)).eval()
    x = torch.randn(2, 3, 16)
    ffn = model.encoder_layers[0].ffn
    h = ffn.linear1(x)
    torch.testing.assert_close(ffn(x), ffn.linear2(h * torch.sigmoid(h)))
    src = torch.tensor([[5, 6, 7, 2]])
    recorder = Recorder(model, activations=True)
    model.encode(src, call=Call(recorder=recorder))
    embedded = recorder.freeze()["embed.src"]
    expected = model.src_embed(src)[0] + sinusoidal_table(4, 16, "interleaved")
    np.testing.assert_allclose(embedded, expected.numpy(), atol=1e-6)


@torch.no_grad()
def test_the_fast_decoding_path_runs_swish_too():
    torch.manual_seed(1)
    model = Transformer(tiny_config(activation="swish")).eval()
    src = torch.tensor([[5, 6, 7, 8, 2]])
    keep = torch.ones_like(src, dtype=torch.bool)
    plain = greedy(model, src, keep, call=Call(options=OPTIONS, max_len=8))
    fast = greedy(model, src, keep, call=Call(options=OPTIONS, fast=FastWeights(model), max_len=8))
    assert plain.tokens.tolist() == fast.tokens.tolist()
    for a, b in zip(plain.steps, fast.steps, strict=True):
        torch.testing.assert_close(a.probs, b.probs, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_suppressed_ids_are_never_chosen_and_the_rest_keep_their_probabilities():
    torch.manual_seed(2)
    free = Transformer(tiny_config(output_bias=True)).eval()
    free.output.bias[9] = 50.0  # id 9 wins every step
    banned = Transformer(tiny_config(output_bias=True, suppress_ids=(9,))).eval()
    banned.load_state_dict(free.state_dict())
    src = torch.tensor([[5, 6, 7, 8, 2]])
    keep = torch.ones_like(src, dtype=torch.bool)
    assert set(greedy(free, src, keep, call=Call(options=OPTIONS, max_len=6)).tokens[0, 1:].tolist()) == {9}
    result = greedy(banned, src, keep, call=Call(options=OPTIONS, max_len=6))
    assert 9 not in result.tokens[0].tolist()
    assert 9 not in beam_search(banned, src, keep, call=Call(options=OPTIONS, max_len=6, beam_size=3))
    first = result.steps[0]
    logits = banned(src, torch.tensor([[banned.config.bos_id]]))[0, -1]
    chosen = int(first.token_ids[0])
    assert float(first.probs[0]) == pytest.approx(
        float(torch.softmax(logits, -1)[chosen]), rel=1e-5
    )  # not renormalised


def test_a_checkpoint_keeps_the_new_fields(tmp_path):
    path = build_tiny_checkpoint(
        tmp_path / "ckpt", activation="swish", pe_layout="concatenated_hf", scale_embedding=False, suppress_ids=(7,)
    )
    bundle = core.load(path, device="cpu")
    assert (bundle.config.activation, bundle.config.pe_layout) == ("swish", "concatenated_hf")
    assert bundle.config.suppress_ids == (7,) and bundle.config.scale_embedding is False
    out = bundle.translate("Is there any tea left?", beam_size=2, max_len=6)
    assert 7 not in out.trace["output.ids"].tolist() and all(
        7 not in row for row in out.trace["output.top_ids"].tolist()
    )
