"""``python -m core scan``: the command's output, its summary line, going on after an interruption, and its options
checked before any work, each named in one line."""

from __future__ import annotations

import json

import pytest

from core.cli import main


def run_scan(capsys, *args: str) -> tuple[int, str]:
    code = main(["scan", *args])
    return code, capsys.readouterr().err


def test_scan_writes_every_line_and_says_what_it_found(tiny_checkpoint, tmp_path, capsys) -> None:
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("the cat sleeps\tthe cat\n\na dog runs\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    code, err = run_scan(capsys, "--checkpoint", str(tiny_checkpoint), "--pairs", str(pairs), "--out", str(out),
                         "--threshold", "1")  # fmt: skip
    assert code == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["line"] for r in records] == [1, 2, 3]
    assert records[1]["error"] == "line 2: no source text"
    assert records[0]["flagged"] and records[2]["flagged"]  # every share is below 1
    assert "3 pairs scanned: 2 flagged (mean source share < 1.0), 1 not scored" in err
    assert "pair" in err and "100%" in err  # the progress bar, on stderr

    # a torn last line: dropped, redone, and said
    data = out.read_bytes()
    out.write_bytes(data[: len(data) - 10])
    code, err = run_scan(capsys, "--checkpoint", str(tiny_checkpoint), "--pairs", str(pairs), "--out", str(out),
                         "--threshold", "1", "--no-progress")  # fmt: skip
    assert code == 0 and out.read_bytes() == data
    assert "3 pairs scanned, 2 already done" in err and "100%" not in err

    # the same output with another threshold is not this scan's: refused, untouched
    code, err = run_scan(capsys, "--checkpoint", str(tiny_checkpoint), "--pairs", str(pairs), "--out", str(out),
                         "--threshold", "0.0", "--no-progress")  # fmt: skip
    assert code == 2 and "flagged with another threshold than 0.0" in err and out.read_bytes() == data


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--threshold", "2"], "the threshold is a source share, between 0 and 1; got 2.0"),
        (["--workers", "2"], "--workers is the number of Ray actors: give --ray ADDRESS too"),
        (["--ray", "auto", "--workers", "0"], "--workers 0: at least 1"),
        (["--ray", "auto", "--batch-size", "0"], "--batch-size 0: at least 1"),
        (["--batch-tokens", "0"], "--batch-tokens 0: at least 1"),
        (["--ray", "auto", "--device", "cpu"], "--device and --threads are for a scan in this process"),
        (["--ray", "auto", "--threads", "1"], "--device and --threads are for a scan in this process"),
        (["--threads", "100000"], "--threads must be 0 (torch's default) to"),
    ],
)
def test_bad_options_are_named_before_any_work(tiny_checkpoint, tmp_path, capsys, extra, message) -> None:
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a\tb\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    code, err = run_scan(capsys, "--checkpoint", str(tiny_checkpoint), "--pairs", str(pairs), "--out", str(out), *extra)
    assert code == 2 and message in err and "Traceback" not in err
    assert not out.exists()


def test_missing_files_are_named(tiny_checkpoint, tmp_path, capsys) -> None:
    out = str(tmp_path / "out.jsonl")
    code, err = run_scan(
        capsys, "--checkpoint", str(tiny_checkpoint), "--pairs", str(tmp_path / "no.tsv"), "--out", out
    )
    assert code == 2 and f"--pairs {tmp_path / 'no.tsv'}: no such file" in err
    code, err = run_scan(capsys, "--checkpoint", str(tmp_path / "nothing"), "--pairs", out, "--out", out)
    assert code == 2 and "--checkpoint" in err and "no such folder" in err
