"""``python -m core export-ct2`` beyond Marian: T5 (v1.0, v1.1), BART, mBART-50, M2M100 and NLLB checkpoints imported
from tiny Hugging Face folders built here (``tests/hf_folders.py``, ``tests/hf_bart_folders.py``) go through their
family's Hugging Face folder and CTranslate2's own converter; CTranslate2's greedy tokens equal the lab's (the forced
target language given as ``target_prefix``), checked at export and again here on more sentences; what a family's
folder cannot express is refused by name, and nothing is written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import build_tiny_checkpoint
from hf_bart_folders import build_bart_folder, build_m2m100_folder, build_mbart_folder
from hf_folders import ENGLISH, build_t5_folder

import core
from core import CheckpointError
from core.cli import main
from core.exporters.ct2 import export_ct2
from core.exporters.verify import ct2_target_prefix, ct2_translate, ct2_vocabulary
from core.text.hf_tokenizers import FastTokenizer, byte_level_text

ctranslate2 = pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed: pip install -e '.[ct2]'")
pytest.importorskip("transformers", reason="transformers is a test extra: pip install -e '.[test]'")

TEXTS = [ENGLISH[0], ENGLISH[3], "The dog sleeps near the window."]
FOLDERS: dict[str, Callable[[Path], Path]] = {
    "t5 v1.0": lambda path: build_t5_folder(path, "1.0", seed=4),
    "t5 v1.1": lambda path: build_t5_folder(path, "1.1", seed=4),
    "bart": lambda path: build_bart_folder(path, seed=2),
    "mbart-50": lambda path: build_mbart_folder(path, seed=2),
    "m2m100": lambda path: build_m2m100_folder(path, seed=2),
    "nllb": lambda path: build_m2m100_folder(path, nllb=True, seed=2),
}


def ct2_tokens(folder: Path, bundle: core.Bundle, text: str) -> tuple[list[str], list[str]]:
    """(the lab's greedy ids without eos as CTranslate2 names them, CTranslate2's tokens) for ``text``."""
    out = bundle.translate(text, max_len=12, record=core.Record(qkv=False))
    ids = [int(i) for i in out.trace["output.ids"]]
    names = ct2_vocabulary(folder)  # by id; the lab names rows beyond the tokenizer '<row N>', CTranslate2 otherwise
    source = [names[i] for i in out.trace["ids.src"]]
    shown = source  # the lab shows a byte-level piece as its text: BART's 'Ġthe' as '▁the'
    if isinstance(bundle.tokenizer, FastTokenizer) and bundle.tokenizer.byte_level:
        shown = [byte_level_text(n).replace(" ", "\u2581") for n in source]
    assert shown == out.src_tokens  # the two vocabularies agree on every piece used
    prefix = ct2_target_prefix(folder, bundle.config, names)
    (theirs,) = ct2_translate(folder, [source], [prefix] if prefix else None, max_decoding_length=len(ids))
    return [names[i] for i in ids if i != bundle.config.eos_id], theirs


@pytest.mark.parametrize("family", FOLDERS)
def test_ctranslate2_gives_the_labs_greedy_tokens(tmp_path, capsys, family):
    folder = FOLDERS[family](tmp_path / "hf")
    assert main(["import-hf", str(folder), "--out", str(tmp_path / "ckpt")]) == 0
    assert main(["export-ct2", str(tmp_path / "ckpt"), str(tmp_path / "ct2")]) == 0
    assert "greedy output the same" in capsys.readouterr().err
    assert "model.bin" in {p.name for p in (tmp_path / "ct2").iterdir()}
    bundle = core.load(tmp_path / "ckpt", device="cpu")
    lengths = set()
    for text in TEXTS:
        ours, theirs = ct2_tokens(tmp_path / "ct2", bundle, text)
        assert theirs == ours, text
        lengths.add(len(ours))
    assert max(lengths) >= 3  # the model said something: tokens were compared, not two empty lists


def test_the_int8_model_of_a_t5_checkpoint_is_written(tmp_path):
    assert main(["import-hf", str(build_t5_folder(tmp_path / "hf", "1.1", seed=4)), "--out", str(tmp_path / "c")]) == 0
    report = export_ct2(tmp_path / "c", tmp_path / "ct2", quantization="int8")
    assert report["verified"] and report["library"] == "ctranslate2"
    assert (tmp_path / "ct2" / "spiece.model").is_file()  # the tokenizer travels with the model


def test_what_no_family_folder_expresses_is_refused_by_name(tmp_path, capsys):
    checkpoint = build_tiny_checkpoint(tmp_path / "ckpt", positional="learned", start="zeros")
    with pytest.raises(CheckpointError, match="does not fit transformers' MarianMTModel"):
        export_ct2(checkpoint, tmp_path / "ct2")
    assert main(["export-ct2", str(checkpoint), str(tmp_path / "ct2")]) == 2
    assert capsys.readouterr().err.startswith("error: ") and not (tmp_path / "ct2").exists()
