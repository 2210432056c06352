"""Core checkpoint -> Hugging Face Marian folder (``python -m core export-hf``): transformers' MarianMTModel and
MarianTokenizer load the folder and give core's token ids, greedy ids, logits (1e-4) and attention (1e-5); an
imported folder exported again is the folder's model; what does not fit Marian is refused by name."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import build_tiny_checkpoint
from marian_folders import ENGLISH, marian_like_checkpoint, marian_model, save_folder, write_tokenizer
from safetensors import safe_open

import core
from core import CheckpointError
from core.cli import main
from core.exporters.hf_families import export_hf
from core.importers.hf_families import read_hf_folder
from core.importers.hf_marian_config import config_from_marian

transformers = pytest.importorskip("transformers", reason="transformers is a test extra: pip install -e '.[test]'")
pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")

TEXTS = [ENGLISH[0], ENGLISH[3], "The dog sleeps near the window."]
MAX_NEW = 10
CHECKPOINTS = {  # name: how to build it
    "marian-like (zero start, Marian C++ sinusoids)": lambda d: marian_like_checkpoint(d, activation="relu"),
    "core tiny (<s> start, transformers' sinusoids, swish)": lambda d: build_tiny_checkpoint(
        d, pe_layout="concatenated_hf", activation="swish", norm_eps=1e-5
    ),
    "untied, unscaled, gelu, bias": lambda d: build_tiny_checkpoint(
        d,
        pe_layout="concatenated_hf",
        activation="gelu",
        share_embeddings=False,
        tie_output=False,
        output_bias=True,
        scale_embedding=False,
    ),
}


def load_hf(folder: Path) -> SimpleNamespace:
    from transformers import GenerationConfig, MarianMTModel, MarianTokenizer

    model = MarianMTModel.from_pretrained(folder, attn_implementation="eager").eval()
    saved = GenerationConfig.from_pretrained(folder)  # the folder's bans; no eos forced at the length limit
    model.generation_config = GenerationConfig(
        num_beams=1,
        do_sample=False,
        max_new_tokens=MAX_NEW,
        bad_words_ids=saved.bad_words_ids,
        forced_eos_token_id=None,
        decoder_start_token_id=saved.decoder_start_token_id,
        eos_token_id=saved.eos_token_id,
        pad_token_id=saved.pad_token_id,
    )
    return SimpleNamespace(model=model, tok=MarianTokenizer.from_pretrained(folder))


@pytest.fixture(scope="module", params=list(CHECKPOINTS))
def exported(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    checkpoint = CHECKPOINTS[request.param](root / "ckpt")
    assert main(["export-hf", str(checkpoint), str(root / "hf")]) == 0
    return SimpleNamespace(bundle=core.load(checkpoint, device="cpu"), folder=root / "hf", **vars(load_hf(root / "hf")))


def test_transformers_reproduces_an_exported_checkpoint(exported):
    bundle, model, tok = exported.bundle, exported.model, exported.tok
    start = model.config.decoder_start_token_id
    for text in TEXTS:
        assert tok(text).input_ids == bundle.encode_source(text)[0]
        out = bundle.translate(text, max_len=MAX_NEW)
        ours = [int(i) for i in out.trace["output.ids"]]
        with torch.inference_mode():
            src = torch.tensor([tok(text).input_ids])
            assert model.generate(input_ids=src)[0, 1:].tolist() == ours, text
            theirs = model(input_ids=src, decoder_input_ids=torch.tensor([[start] + ours[:-1]]), output_attentions=True)
            logits = bundle.model(src, torch.tensor([[bundle.config.bos_id] + ours[:-1]]))
        V = logits.shape[-1]
        np.testing.assert_allclose(theirs.logits[..., :V].numpy(), logits.numpy(), atol=1e-4, rtol=0)
        assert theirs.logits.shape[-1] == V or bool((theirs.logits[..., V:] < -1e3).all())  # an appended <pad>
        for kind, arrays in (
            ("encoder", theirs.encoder_attentions),
            ("decoder", theirs.decoder_attentions),
            ("cross", theirs.cross_attentions),
        ):
            for layer, array in enumerate(arrays):
                np.testing.assert_allclose(out.trace.attention(kind, layer), array[0].numpy(), atol=1e-5, rtol=0)
        assert tok.decode(ours, skip_special_tokens=True) == out.text
    readme = (exported.folder / "README.md").read_text()
    assert "greedy output the same" in readme and "## The checkpoint's card" in readme  # checked at export


def test_the_folder_follows_opus_mt_conventions(exported):
    config = json.loads((exported.folder / "config.json").read_text())
    vocab = json.loads((exported.folder / "vocab.json").read_text())
    cfg = exported.bundle.config
    assert config["model_type"] == "marian" and config["architectures"] == ["MarianMTModel"]
    assert (exported.folder / "source.spm").read_bytes() == (exported.folder / "target.spm").read_bytes()
    assert vocab["</s>"] == cfg.eos_id and len(vocab) == config["vocab_size"]
    if cfg.start == "zeros":  # a zero <pad> row, last, is the decoder's start token (what CTranslate2 expects)
        assert vocab["<pad>"] == config["decoder_start_token_id"] == config["pad_token_id"] == cfg.src_vocab_size
        embeddings = exported.model.get_input_embeddings().weight
        assert not bool(embeddings[-1].any())
    else:
        assert config["decoder_start_token_id"] == cfg.bos_id
    with safe_open(str(exported.folder / "model.safetensors"), "pt") as weights:
        has_table = "model.encoder.embed_positions.weight" in set(weights.keys())
    assert has_table == (cfg.pe_layout == "concatenated")  # Marian C++'s sinusoids travel as a table


def test_the_folders_config_names_its_own_sinusoids(exported):
    """config_from_marian alone gives the layout the stored tables hold (no caller has to replace it after)."""
    assert config_from_marian(read_hf_folder(exported.folder)).pe_layout == exported.bundle.config.pe_layout


def test_an_exported_checkpoint_imports_back_to_the_same_model(exported, tmp_path):
    """export-hf then import-hf gives the model back, Marian C++'s sinusoids included (the importer took only
    transformers' own table, so a Bergamot-derived checkpoint could not come back)."""
    assert main(["import-hf", str(exported.folder), "--out", str(tmp_path / "back")]) == 0
    back = core.load(tmp_path / "back", device="cpu")
    assert back.config.pe_layout == exported.bundle.config.pe_layout
    card = (tmp_path / "back" / "card.md").read_text(encoding="utf-8")  # the card names the layout it read
    assert f"`pe_layout: {back.config.pe_layout}`" in card
    for text in TEXTS:
        ours = exported.bundle.translate(text, core.InferenceOptions(), truncate=True)
        again = back.translate(text, core.InferenceOptions(), truncate=True)
        assert again.output_tokens == ours.output_tokens


def test_an_imported_folder_exports_back_to_the_same_model(tmp_path):
    from transformers import MarianTokenizer

    vocab = write_tokenizer(tmp_path / "hf")
    original = marian_model(vocab, seed=7, pad_bias=2.0)
    save_folder(original, tmp_path / "hf")
    assert main(["import-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "ckpt")]) == 0
    report = export_hf(tmp_path / "ckpt", tmp_path / "again")
    assert report["same_greedy_ids"] and report["max_abs_logit_difference"] < 1e-4
    again = load_hf(tmp_path / "again")
    first, second = MarianTokenizer.from_pretrained(tmp_path / "hf"), again.tok
    for text in TEXTS:
        ids = first(text).input_ids
        assert second(text).input_ids == ids
        src, dec = torch.tensor([ids]), torch.tensor([[vocab["<pad>"]] + ids[:5]])
        with torch.inference_mode():
            np.testing.assert_allclose(
                again.model(input_ids=src, decoder_input_ids=dec).logits.numpy(),
                original(input_ids=src, decoder_input_ids=dec).logits.numpy(),
                atol=1e-5,
                rtol=0,
            )
    config = json.loads((tmp_path / "again" / "config.json").read_text())
    assert config["exported_from"]["checkpoint"] == str((tmp_path / "ckpt").resolve())
    assert json.loads((tmp_path / "again" / "generation_config.json").read_text())["bad_words_ids"] == [
        [vocab["<pad>"]]
    ]


def test_a_different_layernorm_eps_is_exported_with_a_note(tmp_path):
    checkpoint = marian_like_checkpoint(tmp_path / "ckpt", norm_eps=1e-6)  # as the Bergamot-derived checkpoints
    report = export_hf(checkpoint, tmp_path / "hf")
    assert report["same_greedy_ids"] and 0 < report["max_abs_logit_difference"] < 1e-3
    readme = (tmp_path / "hf" / "README.md").read_text()
    assert "LayerNorm eps: this model uses 1e-06" in readme and "max |logit difference|" in readme


REFUSED = {
    "SSRU decoder": (dict(decoder_self="ssru", pe_layout="concatenated_hf"), "decoder_self 'ssru'"),
    "learned positions": (dict(positional="learned"), "positional 'learned'"),
    "interleaved sinusoids": (dict(pe_layout="interleaved"), "pe_layout 'interleaved'"),
    "pre-norm": (dict(norm="pre", pe_layout="concatenated_hf"), "norm 'pre'"),
    "zero start beside a <pad> piece": (
        dict(start="zeros", pe_layout="concatenated_hf"),
        "vocabulary has a '<pad>' piece",
    ),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_does_not_fit_marian_is_refused_by_name(tmp_path, capsys, name):
    overrides, message = REFUSED[name]
    checkpoint = build_tiny_checkpoint(tmp_path / "ckpt", **overrides)
    with pytest.raises(CheckpointError, match=message):
        export_hf(checkpoint, tmp_path / "hf")
    assert main(["export-hf", str(checkpoint), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "config.json" in err and message in err and "Traceback" not in err
    assert not (tmp_path / "hf").exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_an_existing_folder_is_replaced_only_with_force(tmp_path, capsys):
    checkpoint = build_tiny_checkpoint(tmp_path / "ckpt", pe_layout="concatenated_hf")
    (tmp_path / "hf").mkdir()
    assert main(["export-hf", str(checkpoint), str(tmp_path / "hf"), "--no-verify"]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert main(["export-hf", str(checkpoint), str(tmp_path / "hf"), "--no-verify", "--force"]) == 0
    assert "not checked: --no-verify" in (tmp_path / "hf" / "README.md").read_text()
