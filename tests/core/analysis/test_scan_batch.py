"""The batched scan (core.analysis.scan.score_batch, batches): the records one pair at a time gives, within 1e-4 for
every number and equal in text and flags, in input order, with bad lines named and skipped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import build_tiny_checkpoint

import core
from core.analysis import scan as scan_module
from core.analysis.contributions import batch_contributions, batch_source_shares, contributions
from core.analysis.scan import (
    GROUP_PAD_ROWS,
    Pair,
    ScanSettings,
    batches,
    decoding_groups,
    from_batch,
    local_records,
    score_pair,
    score_pairs,
)
from core.analysis.scan_input import parse_line
from core.config import InferenceOptions
from core.errors import InputError

NUMBERS = ("source_share", "mean_logprob")


def longest_source(bundle: core.Bundle) -> str:
    """A source of exactly the most pieces the scan accepts (``max_source_tokens - 1``)."""
    limit = bundle.max_source_tokens - 1
    words = ["the", "cat", "sleeps", "dog", "a", "runs"]
    text = ""
    for i in range(10 * limit):
        for word in (words[i % len(words)], *words):
            longer = f"{text} {word}".strip()
            if len(bundle.tokenizer.encode(longer)) <= limit:
                text = longer
                break
        if len(bundle.tokenizer.encode(text)) == limit:
            return text
    raise AssertionError("no source of exactly the limit found")


@pytest.fixture(scope="module")
def bundle(tiny_checkpoint: Path) -> core.Bundle:
    return core.load(tiny_checkpoint, device="cpu")


@pytest.fixture(scope="module")
def pairs(bundle: core.Bundle) -> list[Pair]:
    longest = longest_source(bundle)
    lines = [
        "the cat sleeps\tthe cat sleeps\tthe cat is asleep",  # a reference: chrf
        "a dog runs in the park",  # the model's own translation
        f"{longest}\tthe cat",  # the longest accepted source, a translation given
        "",  # no source: named and skipped
        "the house is red\tthe the the",
        " ".join(["word"] * 400),  # too many pieces: named and skipped
        longest,  # the longest accepted source, the model's own translation
        "we eat bread\t",
        "a\tb\tc\td",  # four fields
        "it rains\tit rains today and the cat sleeps in the house",
    ]
    return [parse_line(n, line.encode()) for n, line in enumerate(lines, start=1)]


def assert_same(batched: list[dict[str, Any]], alone: list[dict[str, Any]]) -> None:
    assert [r["line"] for r in batched] == [r["line"] for r in alone]  # input order
    for b, a in zip(batched, alone, strict=True):
        assert set(b) == set(a)
        for key in a:
            if key in NUMBERS and a[key] is not None:
                assert b[key] == pytest.approx(a[key], abs=1e-4), (a["line"], key)
            elif key == "token_source_share" and a[key] is not None:
                assert b[key] == pytest.approx(a[key], abs=1e-4), a["line"]
            elif key == "lowest_share_words" and a[key] is not None:
                assert [w["piece"] for w in b[key]] == [w["piece"] for w in a[key]], a["line"]
                assert [w["share"] for w in b[key]] == pytest.approx([w["share"] for w in a[key]], abs=1e-4)
            else:
                assert b[key] == a[key], (a["line"], key)  # text, pieces, flags, errors


@pytest.mark.parametrize("batch_size, batch_tokens", [(4, 4096), (16, 4096), (16, 300)])
def test_a_batched_scan_gives_the_records_of_one_pair_at_a_time(bundle, pairs, batch_size, batch_tokens) -> None:
    settings = ScanSettings()
    alone = [score_pair(bundle, pair, settings, "m") for pair in pairs]
    assert sum("error" in r for r in alone) == 3 and sum(r["own_translation"] and "error" not in r for r in alone) == 3
    batched = score_pairs(bundle, pairs, settings, "m", batch_size=batch_size, batch_tokens=batch_tokens)
    assert_same(batched, alone)


def test_batches_keep_the_order_and_the_token_budget(bundle, pairs) -> None:
    runs = list(batches(bundle, pairs, 3, 300))
    assert [p for run in runs for p in run] == pairs
    assert all(1 <= len(run) <= 3 for run in runs)
    # the longest source (256 pieces with eos) is over the budget with anything beside it: alone
    assert [len(run) for run in runs if any(p.line in (3, 7) for p in run)] == [1, 1]
    with pytest.raises(InputError, match="at least 1"):
        list(batches(bundle, pairs, 0, 300))


def test_the_local_runner_batches_and_keeps_order(tiny_checkpoint, pairs) -> None:
    settings = ScanSettings()
    one = list(local_records(tiny_checkpoint, pairs, settings, device="cpu", batch_size=1))
    many = list(local_records(tiny_checkpoint, pairs, settings, device="cpu", batch_size=8, batch_tokens=2048))
    assert_same(many, one)


def test_batch_contributions_are_each_rows_contributions(bundle) -> None:
    texts = [("the cat sleeps", "the cat"), ("a dog runs in the park today", "the the the the dog")]
    rows = [(bundle.encode_source(s)[0], bundle.encode_target(t)) for s, t in texts]
    for got, (s, t) in zip(batch_contributions(bundle, rows), texts, strict=True):
        want = contributions(bundle, s, translation=t)
        assert got.target_pieces == want.target_pieces and got.source_pieces == want.source_pieces
        assert got.prefix_pieces == want.prefix_pieces and got.forced
        for name in want.ARRAYS:
            assert getattr(got, name) == pytest.approx(getattr(want, name), abs=1e-4), name
    with pytest.raises(InputError, match="padding and causal masks"):
        batch_contributions(bundle, rows, options=InferenceOptions(padding_mask=False))


VARIANTS = {
    "as the tiny one": {},
    "an SSRU decoder": {"decoder_self": "ssru"},
    "one decoder layer": {"n_decoder_layers": 1},
    "three decoder layers, pre-norm": {"n_decoder_layers": 3, "norm": "pre"},
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_source_shares_without_the_encoder_are_the_contributions_shares(variant, tmp_path) -> None:
    """The scan's batches leave the encoder and the first decoder layer's self-attention undecomposed (each row of
    the encoder's composition sums to 1, and that self-attention moves only columns no later layer reads): the same
    shares as the whole decomposition of each pair alone, on models whose encoder contributions are far from the
    identity."""
    bundle = core.load(build_tiny_checkpoint(tmp_path / "tiny", seed=4, **VARIANTS[variant]), device="cpu")
    texts = [("the cat sleeps", "the cat"), ("a dog runs in the park today", "the the the the dog")]
    rows = [(bundle.encode_source(s)[0], bundle.encode_target(t)) for s, t in texts]
    for got, (s, t) in zip(batch_source_shares(bundle, rows, forced=[True, False]), texts, strict=True):
        whole = contributions(bundle, s, translation=t)
        assert abs(whole.encoder - np.eye(len(whole.source_pieces))).max() > 0.1  # the encoder mixes the sources
        want = whole.shares()
        assert (got.source_pieces, got.target_pieces) == (want.source_pieces, want.target_pieces)
        assert got.token_source_share == pytest.approx(want.token_source_share, abs=1e-6)
        assert got.token_logprob == pytest.approx(want.token_logprob, abs=1e-5)
        assert got.source_share == pytest.approx(want.source_share, abs=1e-6)
    assert [s.forced for s in batch_source_shares(bundle, rows, forced=[True, False])] == [True, False]


def test_a_scan_resumed_inside_a_batch_scores_that_batch_whole(tiny_checkpoint, pairs, monkeypatch) -> None:
    """Resumed at any line, the local runner gives the uninterrupted run's records of the lines after it, to the
    byte: the batch holding that line is scored whole again, not cut where the interruption fell. Written with 12
    decimals here, where a batch of other rows shows (the last line scored alone differs from it in a batch)."""
    monkeypatch.setattr(scan_module, "DIGITS", 12)
    settings = ScanSettings()
    whole = list(local_records(tiny_checkpoint, pairs, settings, device="cpu", batch_size=4))
    assert list(from_batch([[1, 2, 3], [4, 5], [6]], 4)) == [([4, 5], 1), ([6], 0)]  # type: ignore[list-item]
    for start in (1, 5, 9):
        rest = list(local_records(tiny_checkpoint, pairs, settings, start=start, device="cpu", batch_size=4))
        assert [json.dumps(r) for r in rest] == [json.dumps(r) for r in whole[start:]]
    assert list(local_records(tiny_checkpoint, pairs, settings, start=len(pairs), device="cpu")) == []


def test_without_the_padding_mask_each_pair_is_scored_alone(bundle, pairs) -> None:
    settings = ScanSettings(options=InferenceOptions(padding_mask=False))
    good = [p for p in pairs if p.error is None][:3]
    alone = [score_pair(bundle, pair, settings, "m") for pair in good]
    assert score_pairs(bundle, good, settings, "m", batch_size=8) == alone


def test_decoding_groups_cut_where_padding_passes_step_rows_rows_a_step() -> None:
    short = {i: 5 for i in range(6)}  # six rows of 5: a 30-piece source beside them pads 6 x 25 > GROUP_PAD_ROWS x 30
    assert decoding_groups({**short, 6: 31, 7: 30}) == [[0, 1, 2, 3, 4, 5], [7, 6]]  # shortest first
    few = {i: 5 + 20 * i for i in range(GROUP_PAD_ROWS + 1)}  # at most GROUP_PAD_ROWS rows of padding: never cut
    assert decoding_groups(few) == [list(few)]
    assert decoding_groups({}) == []
