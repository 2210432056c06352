"""A scan's totals (core.analysis.scan_summary) counted from its records: errors apart, flags, wrong language,
invented words, and sacreBLEU's corpus chrF over the pairs with a reference."""

from __future__ import annotations

from pathlib import Path

import pytest
from sacrebleu.metrics import CHRF

import core
from core.analysis.scan import ScanSettings, score_pairs
from core.analysis.scan_input import parse_pairs
from core.analysis.scan_summary import totals


@pytest.fixture(scope="module")
def records(tiny_checkpoint: Path) -> list[dict]:
    bundle = core.load(tiny_checkpoint, device="cpu")
    data = b"the cat sleeps\tthe cat\tthe cat sleeps\n\t\nthe dog\t\tder Hund\nthe house\n"
    return score_pairs(bundle, parse_pairs(data), ScanSettings(threshold=1.0), "m", batch_size=4)


def test_counts_come_from_the_records(records: list[dict]) -> None:
    t = totals(records)
    assert (t.lines, t.scored, t.errors) == (4, 3, 1)
    assert t.flagged == 3  # a threshold of 1 flags every scored pair
    assert t.with_reference == 2
    referenced = [r for r in records if r.get("reference")]
    want = CHRF().corpus_score([r["translation"] for r in referenced], [[r["reference"] for r in referenced]]).score
    assert t.chrf == pytest.approx(want)
    scored = [r["source_share"] for r in records if "error" not in r]
    assert t.mean_source_share == pytest.approx(sum(scored) / 3)


def test_fields_set_by_hand_are_counted_and_nothing_scored_gives_no_means(records: list[dict]) -> None:
    marked = [r | {"language_mismatch": True, "invented_words": ["xyz"]} if "error" not in r else r for r in records]
    t = totals(marked)
    assert (t.wrong_language, t.with_invented) == (3, 3)
    none = totals([r for r in records if "error" in r])
    assert (none.scored, none.chrf, none.mean_source_share) == (0, None, None)
    assert totals([]).lines == 0
