"""What a scan's records add up to: how many lines were scored, failed, flagged, in the wrong language, with
invented words, and the corpus chrF of those with a reference — counted from the records themselves (the JSON
lines of ``core scan``, the Corpus page's rows), so a summary says nothing its rows do not."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .scan_fields import CHRF_SCORE


@dataclass(frozen=True)
class ScanTotals:
    """Counts over a scan's records. ``chrf``: sacreBLEU's corpus chrF of the scored translations that have a
    reference (None: none has one); ``mean_source_share``: the mean of the scored pairs' source shares."""

    lines: int
    scored: int
    errors: int
    flagged: int
    wrong_language: int
    with_invented: int
    with_reference: int
    chrf: float | None
    mean_source_share: float | None


def totals(records: Sequence[dict[str, Any]]) -> ScanTotals:
    """The ``ScanTotals`` of ``records`` (a record with an ``error`` is counted as an error and nothing else)."""
    scored = [r for r in records if "error" not in r]
    referenced = [r for r in scored if r.get("reference") is not None]
    chrf = None
    if referenced:
        hypotheses = [str(r["translation"]) for r in referenced]
        chrf = float(CHRF_SCORE.corpus_score(hypotheses, [[str(r["reference"]) for r in referenced]]).score)
    shares = [float(r["source_share"]) for r in scored]
    return ScanTotals(
        lines=len(records),
        scored=len(scored),
        errors=len(records) - len(scored),
        flagged=sum(bool(r.get("flagged")) for r in scored),
        wrong_language=sum(bool(r.get("language_mismatch")) for r in scored),
        with_invented=sum(bool(r.get("invented_words")) for r in scored),
        with_reference=len(referenced),
        chrf=chrf,
        mean_source_share=float(np.mean(shares)) if shares else None,
    )
