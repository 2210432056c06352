"""The corpus scan (core.analysis.scan): reading pairs, scoring, flagging, resuming, and losing nothing on Ctrl-C."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.analysis.scan import ScanSettings, model_id, scan
from core.analysis.scan_input import read_pairs
from core.errors import InputError, LabError

GOOD = [
    "the cat sleeps\tthe cat sleeps",
    "a dog runs in the park",  # no translation: the model's own
    "the house is red\tthe the the",
    "we eat bread\t",  # an empty translation column: the model's own
]


def write_pairs(path: Path, lines: list[str | bytes], *, ending: bytes = b"\n") -> Path:
    path.write_bytes(b"".join((x if isinstance(x, bytes) else x.encode()) + ending for x in lines))
    return path


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def full(tiny_checkpoint, tmp_path_factory) -> tuple[Path, Path]:
    """GOOD scanned in one go: (pairs file, output)."""
    folder = tmp_path_factory.mktemp("scan")
    pairs = write_pairs(folder / "pairs.tsv", GOOD)
    out = folder / "out.jsonl"
    scan(tiny_checkpoint, pairs, out, progress=False)
    return pairs, out


def test_read_pairs_names_each_bad_line_and_keeps_the_numbering(tmp_path) -> None:
    path = write_pairs(
        tmp_path / "p.tsv",
        [
            "fine\tbem",
            "",
            "\tonly a translation",
            b"caf\xe9 latin-1\tx",
            "a\tb\tc\td",
            "x" * 6000,
            "source only",
            "windows line\tjanela\r",
        ],
    )
    pairs = read_pairs(path)
    assert [p.line for p in pairs] == list(range(1, 9))
    assert pairs[0].error is None and (pairs[0].source, pairs[0].translation) == ("fine", "bem")
    assert pairs[1].error == "line 2: no source text"
    assert pairs[2].error == "line 3: no source text"
    assert pairs[3].error is not None and pairs[3].error.startswith("line 4: not UTF-8 text")
    assert pairs[4].error is not None and "line 5: 4 tab-separated fields" in pairs[4].error
    assert pairs[5].error == "line 6: the source is longer than 5,000 characters"
    assert pairs[6].error is None and pairs[6].translation is None
    assert pairs[7].translation == "janela"  # the \r of a CRLF file is not part of the text


def test_a_last_line_without_newline_is_read(tmp_path) -> None:
    path = tmp_path / "p.tsv"
    path.write_bytes(b"one\tum\ntwo\tdois")
    assert [(p.source, p.translation) for p in read_pairs(path)] == [("one", "um"), ("two", "dois")]


def test_each_line_scored_in_order_with_shares_that_add_up(full, tiny_checkpoint) -> None:
    _, out = full
    got = records(out)
    assert [r["line"] for r in got] == [1, 2, 3, 4]
    assert [r["source"] for r in got] == [line.split("\t")[0] for line in GOOD]
    assert got[0]["translation"] == "the cat sleeps" and not got[0]["own_translation"]
    assert got[1]["own_translation"] and got[3]["own_translation"]  # no or empty translation column
    for r in got:
        assert "error" not in r
        shares = np.array(r["token_source_share"])
        assert len(shares) == len(r["target_pieces"]) > 0
        assert ((shares >= 0) & (shares <= 1)).all()
        assert r["source_share"] == pytest.approx(shares.mean(), abs=1e-5)
        assert r["mean_logprob"] <= 0
        assert r["flagged"] == (r["source_share"] < ScanSettings().threshold)
        assert r["model"] == model_id(tiny_checkpoint)


def test_the_threshold_decides_the_flag(full, tiny_checkpoint, tmp_path) -> None:
    pairs, out = full
    shares = sorted(r["source_share"] for r in records(out))
    threshold = (shares[1] + shares[2]) / 2  # between the second and third lowest: exactly two flagged
    again = tmp_path / "again.jsonl"
    summary = scan(tiny_checkpoint, pairs, again, ScanSettings(threshold=threshold), progress=False)
    assert summary.flagged == 2
    assert [r["flagged"] for r in records(again)] == [r["source_share"] < threshold for r in records(out)]
    with pytest.raises(InputError, match="between 0 and 1"):
        ScanSettings(threshold=1.5)


def test_bad_lines_get_an_error_and_the_rest_goes_on(tiny_checkpoint, full, tmp_path) -> None:
    pairs = write_pairs(
        tmp_path / "p.tsv",
        [GOOD[0], "", b"\xff\xfe broken", " ".join(["word"] * 400), "a\tb\tc\td", GOOD[2]],
    )
    out = tmp_path / "out.jsonl"
    summary = scan(tiny_checkpoint, pairs, out, progress=False)
    got = records(out)
    assert [r["line"] for r in got] == [1, 2, 3, 4, 5, 6]
    assert summary.errors == 4 and summary.written == 6
    assert got[1]["error"] == "line 2: no source text"
    assert got[2]["error"].startswith("line 3: not UTF-8 text") and got[2]["source"] is None
    assert (
        got[3]["error"].startswith("line 4: the source is ")
        and "pieces long; this model takes at most" in (got[3]["error"])
    )
    assert got[4]["error"].startswith("line 5: 4 tab-separated fields")
    assert all(got[i]["source_share"] is None and got[i]["flagged"] is None for i in (1, 2, 3, 4))
    # the good lines score as they do in a file of good lines only (in other batches: within 1e-4)
    clean = {r["source"]: r for r in records(full[1])}
    for scored, line in ((got[0], GOOD[0]), (got[5], GOOD[2])):
        want = clean[line.split("\t")[0]]
        numbers = ("source_share", "mean_logprob", "token_source_share", "lowest_share_words")
        assert {k: v for k, v in scored.items() if k not in (*numbers, "line")} == {
            k: v for k, v in want.items() if k not in (*numbers, "line")
        }
        for key in numbers[:3]:
            assert scored[key] == pytest.approx(want[key], abs=1e-4)
        for got_word, want_word in zip(scored["lowest_share_words"], want["lowest_share_words"], strict=True):
            assert got_word["piece"] == want_word["piece"]
            assert got_word["share"] == pytest.approx(want_word["share"], abs=1e-4)


def test_ctrl_c_loses_no_written_line_and_the_same_call_goes_on(full, tiny_checkpoint, tmp_path) -> None:
    pairs, whole = full
    out = tmp_path / "out.jsonl"

    def interrupt_after_two(n: int) -> None:
        if n == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        scan(tiny_checkpoint, pairs, out, progress=False, on_record=interrupt_after_two)
    assert out.read_text(encoding="utf-8").splitlines() == whole.read_text(encoding="utf-8").splitlines()[:2]
    summary = scan(tiny_checkpoint, pairs, out, progress=False)
    assert (summary.resumed, summary.written, summary.total) == (2, 2, 4)
    assert out.read_bytes() == whole.read_bytes()
    summary = scan(tiny_checkpoint, pairs, out, progress=False)  # complete: nothing to do
    assert (summary.resumed, summary.written) == (4, 0) and out.read_bytes() == whole.read_bytes()


def test_a_torn_last_line_is_dropped_and_redone(full, tiny_checkpoint, tmp_path) -> None:
    pairs, whole = full
    lines = whole.read_bytes().splitlines(keepends=True)
    out = tmp_path / "out.jsonl"
    out.write_bytes(lines[0] + lines[1][: len(lines[1]) // 2])  # the second line cut mid-write
    summary = scan(tiny_checkpoint, pairs, out, progress=False)
    assert (summary.resumed, summary.written) == (1, 3)
    assert out.read_bytes() == whole.read_bytes()


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda rs: [rs[1], rs[0]], "line 1 is about input line 2"),
        (lambda rs: rs + [rs[0]] * 3, "has 7 lines but 4 pairs"),
        (lambda rs: [rs[0] | {"model": "other:0123456789ab"}], "was scored by model 'other:0123456789ab'"),
        (lambda rs: [rs[0] | {"translation": "something else"}], "scored another translation"),
        (lambda rs: [rs[0] | {"flagged": not rs[0]["flagged"]}], "flagged with another threshold"),
        (lambda rs: ["not json"], "line 1 is not JSON"),
    ],
)
def test_an_output_that_is_not_this_scans_is_refused(full, tiny_checkpoint, tmp_path, change, message) -> None:
    pairs, whole = full
    out = tmp_path / "out.jsonl"
    lines = change(records(whole))
    out.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    before = out.read_bytes()
    with pytest.raises(LabError, match=message):
        scan(tiny_checkpoint, pairs, out, progress=False)
    assert out.read_bytes() == before  # refused: left as it was


def test_the_output_never_overwrites_the_input(tiny_checkpoint, tmp_path) -> None:
    pairs = write_pairs(tmp_path / "p.tsv", GOOD)
    with pytest.raises(LabError, match="would overwrite the input"):
        scan(tiny_checkpoint, pairs, pairs, progress=False)
