"""T5 checkpoint -> Hugging Face T5 folder (``python -m core export-hf``) and back: a folder built with transformers
(``tests/hf_folders.py``), imported, exported and imported again gives the same greedy and beam-4 tokens; the
exported folder holds the original's tensors under the original's names, transformers loads it (its own check at
export: source ids, greedy ids, logits) and its ``generate`` gives core's tokens; what T5 cannot express is refused
by name."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import build_tiny_checkpoint
from hf_beam import set_beam_settings
from hf_folders import ENGLISH, PREFIX, T5_V11, build_t5_folder
from safetensors.torch import load_file

import core
from core import CheckpointError
from core.cli import main
from core.exporters.hf_families import export_hf

transformers = pytest.importorskip("transformers", reason="transformers is a test extra: pip install -e '.[test]'")

TEXTS = [ENGLISH[0], ENGLISH[3], "The dog sleeps near the window."]
MAX_NEW = 10


def tokens(bundle: core.Bundle, text: str, beam_size: int = 1) -> list[int]:
    return [int(i) for i in bundle.translate(text, beam_size=beam_size, max_len=MAX_NEW).trace["output.ids"]]


@pytest.fixture(scope="module", params=["1.0", "1.1", "mt5"])
def round_trip(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"t5-export-{request.param}")
    version = "1.0" if request.param == "1.0" else "1.1"
    original = build_t5_folder(root / "hf", version, seed=4, model_type="mt5" if request.param == "mt5" else "t5")
    set_beam_settings(original, 0.6, "never")  # carried through import, export and re-import (not the defaults)
    assert main(["import-hf", str(original), "--out", str(root / "ckpt")]) == 0
    report = export_hf(root / "ckpt", root / "exported")
    assert main(["import-hf", str(root / "exported"), "--out", str(root / "again")]) == 0
    return SimpleNamespace(
        name=request.param,
        original=original,
        exported=root / "exported",
        report=report,
        first=core.load(root / "ckpt", device="cpu"),
        again=core.load(root / "again", device="cpu"),
    )


def test_the_export_is_checked_by_transformers_at_export(round_trip):
    report = round_trip.report
    assert report["verified"] and report["library"] == "transformers"
    assert report["same_source_ids"] and report["same_greedy_ids"]
    assert report["max_abs_logit_difference"] < 1e-4
    assert "## Check at export" in (round_trip.exported / "README.md").read_text()


def test_reimported_gives_the_same_tokens(round_trip):
    assert round_trip.again.config == round_trip.first.config
    assert (round_trip.first.config.length_penalty, round_trip.first.config.early_stopping) == (0.6, "never")
    assert round_trip.again.tokenizer.source_prefix == PREFIX
    for text in TEXTS:
        assert round_trip.again.encode_source(text) == round_trip.first.encode_source(text)
        assert tokens(round_trip.again, text) == tokens(round_trip.first, text), text
        assert tokens(round_trip.again, text, 4) == tokens(round_trip.first, text, 4), text


def test_the_folder_holds_the_originals_tensors_and_transformers_generates_cores_tokens(round_trip):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    original, exported = (
        load_file(str(round_trip.original / "model.safetensors")),
        load_file(str(round_trip.exported / "model.safetensors")),
    )
    assert set(exported) == set(original)
    for name, tensor in original.items():
        assert torch.equal(exported[name], tensor), name
    config = json.loads((round_trip.exported / "config.json").read_text())
    assert config["model_type"] == ("mt5" if round_trip.name == "mt5" else "t5")
    assert config["feed_forward_proj"] == ("relu" if round_trip.name == "1.0" else "gated-gelu")
    assert config["task_specific_params"] == {"translation_en_to_de": {"prefix": PREFIX}}
    model = AutoModelForSeq2SeqLM.from_pretrained(round_trip.exported).eval()
    tok = AutoTokenizer.from_pretrained(round_trip.exported)
    for text in TEXTS:
        with torch.inference_mode():
            theirs = model.generate(**tok([PREFIX + text], return_tensors="pt"), max_new_tokens=MAX_NEW, num_beams=1)
        assert theirs[0, 1:].tolist() == tokens(round_trip.first, text), text


REFUSED = {  # name: (core checkpoint overrides, what the message names)
    "post-norm": (dict(T5_V11, norm="post", pad_id=0, bos_id=0, eos_id=2, unk_id=3), "norm 'post': T5 has 'pre'"),
    "plain tokenizer": (dict(T5_V11, pad_id=0, bos_id=0, eos_id=2, unk_id=3), "tokenizer Tokenizer"),
    "exact gelu, gated": (
        dict(T5_V11, activation="gelu", pad_id=0, bos_id=0, eos_id=2, unk_id=3),
        "'gated-gelu' runs gelu_new",
    ),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_t5_cannot_express_is_refused_by_name(tmp_path, capsys, name):
    overrides, message = REFUSED[name]
    checkpoint = build_tiny_checkpoint(tmp_path / "ckpt", **overrides)
    with pytest.raises(CheckpointError, match=message):
        export_hf(checkpoint, tmp_path / "hf")
    assert main(["export-hf", str(checkpoint), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "does not fit transformers' T5ForConditionalGeneration" in err and "Traceback" not in err
    assert not (tmp_path / "hf").exists()


def test_a_marian_checkpoint_still_exports_as_marian(tmp_path: Path):
    checkpoint = build_tiny_checkpoint(tmp_path / "ckpt", pe_layout="concatenated_hf")
    export_hf(checkpoint, tmp_path / "hf", verify=False)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "marian"
