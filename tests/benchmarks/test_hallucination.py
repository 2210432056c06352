"""The detached-hallucination set of benchmarks/hallucination.py: how its pairs are made, and how they are scored."""

from __future__ import annotations

import pytest

from benchmarks.hallucination import evaluate, pair_lines, partial


def test_partial_keeps_the_first_half_and_takes_the_rest_from_another() -> None:
    assert partial("a b c d e", "v w x y z") == "a b c x y z"  # 3 of 5 words (rounded up), then 5 // 2 on
    assert partial("a b", "x y") == "a y"


def test_pair_lines_make_four_blocks_and_never_pair_a_sentence_with_its_own_translation() -> None:
    sources = [f"s{i}" for i in range(6)]
    refs = ["r0 r0", "same same", "same same", "r3 r3", "r4 r4", "r5 r5"]  # two sentences share a translation
    lines, kinds = pair_lines(sources, refs, seed=0)
    assert kinds == [k for k in ("correct", "detached", "partial", "own") for _ in range(6)]
    correct, detached, part, own = (lines[i * 6 : (i + 1) * 6] for i in range(4))
    assert correct == [f"s{i}\t{refs[i]}" for i in range(6)]
    assert own == sources
    for i, line in enumerate(detached):
        source, translation = line.split("\t")
        assert source == f"s{i}" and translation != refs[i] and translation in refs  # another sentence's, whole
    for i, line in enumerate(part):
        source, translation = line.split("\t")
        assert source == f"s{i}" and translation.split()[0] == refs[i].split()[0]  # its first half is its own
        assert translation != refs[i]


def test_evaluate_reports_a_perfect_separation_and_its_threshold() -> None:
    def record(kind: str, share: float, logprob: float) -> dict:
        return {"kind": kind, "source_share": share, "mean_logprob": logprob}

    records = (
        [record("correct", 0.9 + i / 1000, -0.1) for i in range(100)]
        + [record("detached", 0.5, -8.0)] * 10
        + [record("partial", 1.0, -4.0)] * 10  # scores as less suspect than every correct pair: AUC 0
        + [record("own", 0.9, -0.1)] * 10
        + [{"kind": "correct", "error": "line 9: no source text"}]
    )
    result = evaluate(records)
    assert result["source_share"]["detached"] == 1.0 and result["source_share"]["partial"] == 0.0
    assert result["source_share"]["both"] == pytest.approx(0.5)
    assert result["mean_logprob"]["both"] == 1.0
    assert result["threshold"] == pytest.approx(0.901)  # 1 of 100 correct below it
    assert result["errors"] == 1 and result["n"]["correct"] == 100
