"""The Corpus page's scans, kept by the server for every session: keyed by the input's digest, the model and the
settings, so a second visit (or another session with the same file) finds the rows already scored.

A ``CorpusScan`` grows one batch at a time (``advance``): the records scored so far stay when the script is stopped
(Cancel, another widget, another page), and the next ``advance`` goes on from there. At most ``MAX_SCANS`` scans
are kept, the least recently used dropped first.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import streamlit as st

import core
from core.analysis.head_spread import HeadSpread
from core.analysis.heads import HeadStatistics
from core.analysis.scan import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BATCH_TOKENS,
    Pair,
    ScanSettings,
    batches,
    is_flagged,
    model_id,
    score_batch,
)
from core.analysis.scan_input import parse_pairs
from core.analysis.scan_summary import ScanTotals, totals
from core.analysis.survey import survey_sentences
from viz_app.cache import cached
from viz_app.session.server import load_bundle

# scans kept for all sessions: a record of the distilled model's is about 4.5 kB in memory (200 built-in sentences,
# tracemalloc), so 10,000 rows are about 45 MB and 8 full scans at most about 360 MB
MAX_SCANS = 8


@dataclass
class CorpusScan:
    """One input scanned by one model with one setting: its pairs and the records scored so far, in input order."""

    key: str
    pairs: list[Pair]
    settings: ScanSettings
    model: str
    records: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _view: dict[tuple[int, float], tuple[list[dict[str, Any]], ScanTotals]] = field(
        default_factory=dict, init=False, repr=False
    )

    @property
    def done(self) -> bool:
        return len(self.records) >= len(self.pairs)

    def at(self, threshold: float) -> tuple[list[dict[str, Any]], ScanTotals]:
        """The records scored so far flagged at ``threshold`` (``flagged_at``) and their totals, made once per
        (records so far, threshold): the page's other reruns (a filter, a row picked) reuse them (the corpus chrF of
        1,000 references takes about 0.1 s)."""
        key = (len(self.records), threshold)
        found = self._view.get(key)
        if found is None:
            records = flagged_at(self.records[: key[0]], threshold)
            found = (records, totals(records))
            self._view.clear()  # the latest view only
            self._view[key] = found
        return found


@st.cache_resource(show_spinner=False)
def _scans() -> tuple[OrderedDict[str, CorpusScan], threading.Lock]:
    return OrderedDict(), threading.Lock()


@st.cache_resource(show_spinner=False, max_entries=16)
def model_of(path: str, mtimes: tuple[float, float]) -> str:
    """``scan.model_id`` of a checkpoint folder (its files' digest: read once per folder and modification times of
    the two files it hashes)."""
    return model_id(path)


def scan_key(data: bytes, model: str, settings: ScanSettings) -> str:
    """The key of a scan: the input's SHA-256, the model's id and the switches (not the threshold: a flag is the
    source share against it, drawn again by ``flagged_at`` when it changes)."""
    digest = hashlib.sha256(data).hexdigest()
    return f"{digest}|{model}|{settings.options.describe()}"


def scan_for(checkpoint: Path, data: bytes) -> CorpusScan:
    """The scan of ``data`` (a pairs file's bytes, ``parse_pairs``) by the checkpoint (as trained, at the default
    threshold), started (no record yet) when there is none. Shared by every session that brings the same bytes:
    what the page calls them (a file's name) stays the page's."""
    mtimes = ((checkpoint / "config.json").stat().st_mtime, (checkpoint / "model.safetensors").stat().st_mtime)
    model = model_of(str(checkpoint), mtimes)
    settings = ScanSettings()
    key = scan_key(data, model, settings)
    scans, lock = _scans()
    with lock:
        found = scans.get(key)
        if found is None:
            found = CorpusScan(key, parse_pairs(data), settings, model)
            scans[key] = found
            while len(scans) > MAX_SCANS:
                scans.popitem(last=False)
        scans.move_to_end(key)
    return found


def advance(bundle: core.Bundle, scan: CorpusScan, on_batch: Callable[[int], None]) -> None:
    """Score ``scan``'s remaining pairs a batch at a time (the CLI's batches: ``scan.batches``, ``scan.score_batch``),
    calling ``on_batch(records so far)`` after each: the place where Streamlit stops the script when asked."""
    while not scan.done:
        with scan.lock:  # two sessions on one scan take turns; each batch is appended whole
            start = len(scan.records)
            if start < len(scan.pairs):
                batch = next(batches(bundle, scan.pairs[start:], DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TOKENS))
                scan.records.extend(score_batch(bundle, batch, scan.settings, scan.model))
        on_batch(len(scan.records))


@cached("Measuring every head on these sentences (one translation each) …")
def heads_over(path: str, sources: tuple[str, ...]) -> tuple[HeadStatistics, HeadSpread]:
    """Head statistics over ``sources`` and each one's own (``survey.survey_sentences``), in the shared cache."""
    return survey_sentences(load_bundle(path), list(sources))


def flagged_at(records: list[dict[str, Any]], threshold: float) -> list[dict[str, Any]]:
    """The records with their flag for ``threshold`` (``scan.is_flagged`` of the source share), as the CLI's
    ``--threshold`` would have written them; a line not scored unchanged."""
    return [
        r if r.get("source_share") is None else {**r, "flagged": is_flagged(r["source_share"], threshold)}
        for r in records
    ]
