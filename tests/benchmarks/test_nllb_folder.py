"""benchmarks.nllb_folder's config is NLLB-200-distilled-600M's shape: 615 M parameters (the published size), one
shared embedding tied to the output, 12 + 12 pre-norm layers; and the lab opens a folder of that config (a tiny
stand-in: the same config with small sizes, the same tokenizer recipe) with the target language forced first."""

from __future__ import annotations

import pytest
import torch

import core
from benchmarks import nllb_folder
from core.cli import main

transformers = pytest.importorskip("transformers", reason="transformers is a test extra: pip install -e '.[test]'")


def test_the_config_has_nllb_600ms_parameter_count():
    config = transformers.M2M100Config(**nllb_folder.NLLB_600M)
    with torch.device("meta"):  # nothing allocated
        model = transformers.M2M100ForConditionalGeneration(config)
    n = sum(p.numel() for p in model.parameters())  # tied weights counted once
    assert 610e6 < n < 620e6, n
    assert model.lm_head.weight is model.model.shared.weight
    assert (config.encoder_layers, config.decoder_layers, config.d_model) == (12, 12, 1024)


def test_a_small_folder_of_the_same_recipe_imports_with_the_target_language_forced(tmp_path, monkeypatch):
    missing = [str(p) for p in nllb_folder.CORPUS if not p.is_file()]
    if missing:
        pytest.skip(f"{missing} missing: make downloads builds data/ding-split (the tokenizer's corpus)")
    small = dict(nllb_folder.NLLB_600M, encoder_layers=1, decoder_layers=1, d_model=16, encoder_ffn_dim=32)
    small.update(decoder_ffn_dim=32, encoder_attention_heads=2, decoder_attention_heads=2, vocab_size=16_300)
    monkeypatch.setattr(nllb_folder, "NLLB_600M", small)
    monkeypatch.setattr(nllb_folder, "SPM_PIECES", 2000)
    folder = nllb_folder.build(tmp_path / "nllb")
    assert main(["import-hf", str(folder), "--out", str(tmp_path / "ckpt")]) == 0
    bundle = core.load(tmp_path / "ckpt", device="cpu")
    assert bundle.languages == (nllb_folder.SOURCE, nllb_folder.TARGET)
    out = bundle.translate("The waiter brought us two glasses.", max_len=4)
    assert out.src_tokens[0] == nllb_folder.SOURCE and out.src_tokens[-1] == "</s>"
    assert bundle.tokenizer.piece(int(out.trace["output.ids"][0])) == nllb_folder.TARGET
    assert bundle.config.tgt_vocab_size == 16_300  # spare rows beyond the tokenizer, as in the real folder
