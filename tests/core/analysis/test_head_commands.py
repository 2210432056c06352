"""python -m core heads: statistics, labels, the gold-scored alignment heads and a sentence's word links."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.cli import main

REPO = Path(__file__).resolve().parents[3]
DEFAULT = REPO / "checkpoints" / "distilled-en-pt"


def test_a_sentence_on_the_tiny_model_without_gold(tiny_checkpoint, capsys, monkeypatch) -> None:
    monkeypatch.setattr("core.analysis.survey.GOLD_DIR", REPO / "nowhere")
    assert main(["heads", "--checkpoint", str(tiny_checkpoint), "The cat sleeps."]) == 0
    out = capsys.readouterr().out
    assert "Head statistics over the sentence" in out and "no gold data for these languages" in out
    assert "Word alignment of the sentence (layer 2, heads averaged)" in out


def test_json_with_gold_on_the_default_model(capsys) -> None:
    if not DEFAULT.is_dir():
        pytest.skip(f"{DEFAULT} is not there")
    assert main(["heads", "--checkpoint", str(DEFAULT), "--json", "The cat sleeps on the warm chair."]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["heads"]) == (6 * 8) + (2 * 8) * 2  # encoder 6×8, decoder and cross 2×8
    scores = data["alignment_scores"]
    assert scores["n_pairs"] >= 50 and len(scores["head_aer"]) == 2
    a = data["alignment"]
    assert a["source_words"] == "The cat sleeps on the warm chair.".split()
    assert ["cat", "gato"] in a["pairs"] and ["sleeps", "dorme"] in a["pairs"]  # the best head's links
    assert any("alignment" in row["labels"] for row in data["heads"] if row["kind"] == "cross")


def test_a_missing_or_bad_gold_file_is_named(tiny_checkpoint, tmp_path, capsys) -> None:
    assert main(["heads", "--checkpoint", str(tiny_checkpoint), "--gold", str(tmp_path / "no.tsv"), "x"]) == 2
    err = capsys.readouterr().err
    assert "--gold" in err and "no such file" in err
    bad = tmp_path / "bad.tsv"
    bad.write_text("a b\tx\t0-3\n", encoding="utf-8")
    assert main(["heads", "--checkpoint", str(tiny_checkpoint), "--gold", str(bad), "x"]) == 2
    assert "bad.tsv:1: link 0-3 is outside" in capsys.readouterr().err
