"""Core checkpoint -> CTranslate2 model (``python -m core export-ct2``), through the exported Hugging Face folder and
CTranslate2's own TransformersConverter: CTranslate2's greedy tokens equal core's."""

from __future__ import annotations

import os

import pytest
import torch
from conftest import build_tiny_checkpoint
from marian_folders import ENGLISH, marian_like_checkpoint, marian_model, save_folder, write_tokenizer

import core
from core import CheckpointError
from core.cli import main
from core.exporters.ct2 import export_ct2
from core.exporters.verify import ct2_decoding, ct2_translate

ctranslate2 = pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed: pip install -e '.[ct2]'")
pytest.importorskip("transformers", reason="transformers is a test extra: pip install -e '.[test]'")
pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")

TEXTS = ENGLISH[:4] + ["The dog sleeps near the window."]


def assert_same_greedy(folder, bundle) -> None:
    """CTranslate2's greedy pieces equal core's, decoded with the options ``ct2_decoding`` gives (the model's
    generation rules; where core forced eos at its length limit, the pieces before it)."""
    for text in TEXTS:
        out = bundle.translate(text, max_len=16)
        options, ours = ct2_decoding(bundle.config, [int(i) for i in out.trace["output.ids"]], 16)
        (theirs,) = ct2_translate(folder, [out.src_tokens], **options)
        assert theirs == bundle.tokenizer.pieces([i for i in ours if i != bundle.config.eos_id]), text


def test_ctranslate2_gives_core_greedy_tokens(tmp_path, capsys):
    checkpoint = marian_like_checkpoint(tmp_path / "ckpt", activation="swish", scale_embedding=True)
    assert main(["export-ct2", str(checkpoint), str(tmp_path / "ct2")]) == 0
    assert "greedy output the same" in capsys.readouterr().err
    assert {"model.bin", "source.spm", "target.spm", "README.md"} <= {p.name for p in (tmp_path / "ct2").iterdir()}
    assert_same_greedy(tmp_path / "ct2", core.load(checkpoint, device="cpu"))


def test_an_imported_opus_mt_style_folder_serves_with_ctranslate2(tmp_path):
    """An Opus-MT-style folder (eos forced at the length limit, ``forced_eos_token_id``) imported and exported: the
    check at export and CTranslate2's greedy pieces agree with core's (the random model repeats to the limit)."""
    vocab = write_tokenizer(tmp_path / "hf")
    model = marian_model(vocab, seed=5)
    with torch.no_grad():  # Opus-MT's <pad> (the decoder's start) is a zero row, which CTranslate2 relies on
        model.get_input_embeddings().weight[vocab["<pad>"]] = 0.0
    save_folder(model, tmp_path / "hf")
    assert main(["import-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "ckpt")]) == 0
    assert core.load(tmp_path / "ckpt", device="cpu").config.forced_eos_id == 0
    report = export_ct2(tmp_path / "ckpt", tmp_path / "ct2")
    assert report["same_greedy_ids"]
    assert_same_greedy(tmp_path / "ct2", core.load(tmp_path / "ckpt", device="cpu"))


def test_a_start_token_ctranslate2_cannot_represent_is_refused(tmp_path, capsys):
    checkpoint = build_tiny_checkpoint(tmp_path / "ckpt", pe_layout="concatenated_hf")  # starts from <s>'s embedding
    with pytest.raises(CheckpointError, match="start 'bos' with bos_id 1"):
        export_ct2(checkpoint, tmp_path / "ct2")
    assert main(["export-ct2", str(checkpoint), str(tmp_path / "ct2")]) == 2
    assert capsys.readouterr().err.startswith("error: ") and not (tmp_path / "ct2").exists()


def test_an_int8_model_is_written_and_loads(tmp_path):
    checkpoint = marian_like_checkpoint(tmp_path / "ckpt")
    report = export_ct2(checkpoint, tmp_path / "ct2", quantization="int8")
    assert report["verified"] and report["library"] == "ctranslate2"
    threads = (os.cpu_count() or 1) + 1  # the caller's own count: neither the run's 1 nor CTranslate2's default
    torch.set_num_threads(threads)
    try:
        assert ct2_translate(tmp_path / "ct2", [["▁The", "</s>"]])
        assert torch.get_num_threads() == threads  # CTranslate2 sets the process's OpenMP threads: put back
    finally:
        torch.set_num_threads(1)
