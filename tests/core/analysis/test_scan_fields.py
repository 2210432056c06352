"""The scan's per-pair fields (core.analysis.scan_fields), each with and without what it needs: chrf (a reference
column), invented_words (the target language's word list), language_mismatch, length_ratio, lowest_share_words,
seconds (--timing), and the --parquet table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sacrebleu.metrics import CHRF

import core
from core.analysis.scan import Pair, ScanSettings, score_pair, score_pairs
from core.analysis.scan_fields import field_context
from core.analysis.scan_input import parse_line
from core.cli import main


@pytest.fixture(scope="module")
def bundle(tiny_checkpoint: Path) -> core.Bundle:
    return core.load(tiny_checkpoint, device="cpu")  # en -> de: no German word list is known


@pytest.fixture(scope="module")
def english_bundle(tiny_checkpoint: Path, tmp_path_factory) -> core.Bundle:
    """The tiny model with English as its target language, whose word lists are installed."""
    folder = tmp_path_factory.mktemp("en-en") / "tiny-en"
    shutil.copytree(tiny_checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"target_language": "en"}))
    return core.load(folder, device="cpu")


def score(bundle: core.Bundle, line: str, settings: ScanSettings | None = None) -> dict:
    return score_pair(bundle, parse_line(1, line.encode()), settings or ScanSettings(), "m")


def test_a_third_column_is_the_reference_and_a_fourth_is_a_bad_line() -> None:
    assert parse_line(1, b"the cat\tdie Katze\tdie Katze!") == Pair(1, "the cat", "die Katze", None, "die Katze!")
    assert parse_line(1, b"the cat\t\tdie Katze") == Pair(1, "the cat", None, None, "die Katze")  # own translation
    assert parse_line(1, b"the cat\tdie Katze\t ").reference is None
    error = parse_line(7, b"a\tb\tc\td").error
    assert error is not None and error.startswith("line 7: 4 tab-separated fields")
    assert parse_line(2, ("a\tb\t" + "x" * 6000).encode()).error == (
        "line 2: the reference is longer than 5,000 characters"
    )


def test_chrf_against_the_reference_or_null(bundle) -> None:
    given = score(bundle, "the cat sleeps\tthe cat sleepz\tthe cat sleeps")
    assert given["reference"] == "the cat sleeps"
    want = CHRF().sentence_score("the cat sleepz", ["the cat sleeps"]).score
    assert given["chrf"] == round(want, 6) and 0 < given["chrf"] < 100
    own = score(bundle, "the cat sleeps\t\tthe cat sleeps")  # the model's own translation against the reference
    assert own["own_translation"] and own["chrf"] == round(
        CHRF().sentence_score(own["translation"], ["the cat sleeps"]).score, 6
    )
    assert score(bundle, "the cat sleeps\tthe cat")["chrf"] is None


def test_invented_words_with_the_word_list_or_null_said_once(bundle, english_bundle, capsys) -> None:
    got = score(english_bundle, "Tom sleeps\tTom and the cat sleepz xyzzy")
    assert got["invented_words"] == ["sleepz", "xyzzy"]  # "Tom": a name carried over from the source
    assert score(english_bundle, "the cat sleeps\tthe cat sleeps")["invented_words"] == []
    field_context.cache_clear()
    capsys.readouterr()
    assert score(bundle, "the cat sleeps\tthe cat sleepz")["invented_words"] is None
    assert score(bundle, "a dog runs\tdogz")["invented_words"] is None
    err = capsys.readouterr().err
    assert err.count("invented_words is null: no word list is known for the language 'de'") == 1


def test_language_mismatch_of_the_source(bundle) -> None:
    assert score(bundle, "the dog sleeps in the garden and the cat too\tx")["language_mismatch"] is False
    assert score(bundle, "der Hund schläft heute im Garten und die Katze auch\tx")["language_mismatch"] is True


def test_length_ratio_and_lowest_share_words(bundle) -> None:
    got = score(bundle, "the cat sleeps in the house\tthe cat")
    n_source = len(bundle.encode_source("the cat sleeps in the house")[0])
    assert got["length_ratio"] == round(len(got["target_pieces"]) / n_source, 6)
    words = [(p, s) for p, s in zip(got["target_pieces"], got["token_source_share"], strict=True) if p != "</s>"]
    lowest = sorted(words, key=lambda w: w[1])[:3]
    assert [(w["piece"], w["share"]) for w in got["lowest_share_words"]] == lowest
    assert len(got["lowest_share_words"]) == 3 and "</s>" in got["target_pieces"]


def test_a_line_not_scored_has_every_field_null(bundle) -> None:
    got = score(bundle, "\tonly a translation\treference")
    assert got["error"] == "line 1: no source text" and got["reference"] == "reference"
    for key in ("chrf", "invented_words", "language_mismatch", "length_ratio", "lowest_share_words"):
        assert got[key] is None, key


def test_seconds_only_with_timing_and_a_batch_shares_its_time(bundle) -> None:
    pairs = [parse_line(n, line.encode()) for n, line in enumerate(["the cat\tthe cat", "", "a dog runs"], start=1)]
    assert all("seconds" not in r for r in score_pairs(bundle, pairs, ScanSettings(), "m", batch_size=3))
    timed = score_pairs(bundle, pairs, ScanSettings(timing=True), "m", batch_size=3)
    assert len({r["seconds"] for r in timed}) == 1 and timed[0]["seconds"] > 0  # one batch: its time / 3
    alone = score_pairs(bundle, pairs, ScanSettings(timing=True), "m", batch_size=1)
    assert all(r["seconds"] > 0 for r in alone)


def test_the_command_writes_timing_and_parquet_only_when_asked(tiny_checkpoint, tmp_path, capsys) -> None:
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("the cat sleeps\tthe cat\tthe cat\n\na dog runs\n", encoding="utf-8")
    args = ["scan", "--checkpoint", str(tiny_checkpoint), "--pairs", str(pairs), "--no-progress"]
    plain, table = tmp_path / "plain.jsonl", tmp_path / "plain.parquet"
    assert main([*args, "--out", str(plain)]) == 0 and not table.exists()
    timed, table = tmp_path / "timed.jsonl", tmp_path / "timed.parquet"
    assert main([*args, "--out", str(timed), "--timing", "--parquet", str(table)]) == 0
    assert "3 records -> " in capsys.readouterr().err
    lines = [json.loads(line) for line in timed.read_text(encoding="utf-8").splitlines()]
    assert all(r["seconds"] >= 0 for r in lines) and all("seconds" not in json.loads(x) for x in plain.open())
    got = pq.read_table(table)
    assert set(got.column_names) == {k for r in lines for k in r}  # the JSONL's keys, "error" and "seconds" included
    assert got.column_names[:3] == ["line", "source", "translation"]
    assert got.to_pylist() == [{k: r.get(k) for k in got.column_names} for r in lines]
    assert str(got.schema.field("lowest_share_words").type) == "list<element: struct<piece: string, share: double>>"
    assert main([*args, "--out", str(timed), "--parquet", str(timed)]) == 2  # never over the output
