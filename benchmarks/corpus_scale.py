"""A corpus of 10,000 pairs end to end (issue 45, deliverable 6): the scan on this machine, then the Corpus page
holding all of its rows.

    python -m benchmarks.corpus_scale [--pairs 10000] [--checkpoint distilled-en-pt] [--unit 200]

1. **The scan**: ``core.analysis.scan.scan`` (the CLI's path: default batches, JSON lines written and flushed) of
   ``--pairs`` built-in sentences of the checkpoint's source language (``builtin_sentences``, cycled when there
   are fewer), the model's own translations scored, torch on one thread. Wall time, pairs per second, and the
   process's peak resident memory before and after (``resource``). Beside it the unit: ``--unit`` traced
   translations (``Bundle.translate``) of the same sentences, timed in the same process, extrapolated to
   ``--pairs``.
2. **The page**: the Corpus page (AppTest, the app's own script) with the server's store holding the scan's
   records, against the same page holding its first 240: the time of a first visit (summary, table, scatter,
   histograms), of a rerun after the "Show" filter changes, and after a text search; medians of 3.

Writes ``benchmarks/corpus_scale.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import torch

import core
from core.analysis import corpus_sets
from core.analysis.corpus_sets import CorpusSet, tsv
from core.analysis.scan import ScanSettings, scan
from core.analysis.sentences import builtin_sentences

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "viz_app" / "app.py"
SMALL = 240  # the page's comparison: the built-in set's size


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sentences(language: str, n: int) -> list[str]:
    found, _ = builtin_sentences(language, n)
    return [found[i % len(found)] for i in range(n)]


def scan_corpus(checkpoint: Path, texts: list[str], work: Path) -> tuple[float, list[dict], float, float]:
    """(seconds, records, peak MB before, peak MB after) of the CLI's scan of ``texts``."""
    pairs = work / "pairs.tsv"
    pairs.write_bytes(tsv(texts))
    before = peak_mb()
    start = time.perf_counter()
    scan(checkpoint, pairs, work / "out.jsonl", ScanSettings(), progress=False)
    seconds = time.perf_counter() - start
    records = [json.loads(line) for line in (work / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    return seconds, records, before, peak_mb()


def unit_seconds(checkpoint: Path, texts: list[str]) -> float:
    bundle = core.load(checkpoint)
    bundle.translate(texts[0])  # warm
    start = time.perf_counter()
    for text in texts:
        bundle.translate(text)
    return (time.perf_counter() - start) / len(texts)


def page_times(checkpoint: Path, records: list[dict], rounds: int = 3) -> dict[str, float]:
    """Median seconds of the Corpus page's first visit and of two reruns, holding ``records`` (a built-in set made
    of their sources, its scan put in the server's store as a finished scan would leave it)."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from viz_app.corpus import store

    data = tsv([str(r["source"]) for r in records])
    chosen = CorpusSet("scale", f"{len(records):,} built-in sentences", data)
    corpus_sets.builtin_sets = lambda *args: [chosen]  # type: ignore[assignment]  # the page's only set
    os.environ["LAB_CHECKPOINT_ROOT"], os.environ["LAB_CHECKPOINT"] = str(checkpoint.parent), checkpoint.name
    times: dict[str, list[float]] = {"first visit": [], "filter changed": [], "text searched": []}
    for _ in range(rounds):
        st.cache_data.clear()  # the page's list of sets
        store._scans.clear()
        found = store.scan_for(checkpoint, data)
        found.records.extend(dict(r) for r in records)
        at = AppTest.from_file(str(APP), default_timeout=600)
        at.switch_page("views/corpus.py")
        steps: dict[str, Callable[[], object]] = {
            "first visit": lambda at=at: at.run(timeout=600),
            "filter changed": lambda at=at: at.selectbox(key="corpus_show").select("flagged").run(timeout=600),
            "text searched": lambda at=at: at.text_input(key="corpus_contains").input("the").run(timeout=600),
        }
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
            assert not at.exception, [e.message for e in at.exception]
            if name == "first visit":  # the whole scan on the page, not a message instead
                shown = [m.value for m in at.markdown]
                assert any("pairs scanned:" in m for m in shown), f"the page did not show the scan: {shown[:3]}"
                assert len(at.dataframe[0].value) == len(records)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--checkpoint", default="distilled-en-pt")
    parser.add_argument("--unit", type=int, default=200, help="traced translations timed for the unit")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "corpus_scale.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    checkpoint = ROOT / "checkpoints" / args.checkpoint
    language = core.load(checkpoint).languages[0]
    texts = sentences(language, args.pairs)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        seconds, records, before, after = scan_corpus(checkpoint, texts, Path(tmp))
    unit = unit_seconds(checkpoint, texts[: args.unit])
    large = page_times(checkpoint, records)
    small = page_times(checkpoint, records[:SMALL])
    rows = "\n".join(
        f"| {name} | {small[name]:.2f} s | {large[name]:.2f} s | {large[name] / small[name]:.2f}× |" for name in large
    )
    text = f"""# A 10,000-pair corpus, end to end

`python -m benchmarks.corpus_scale --pairs {args.pairs} --checkpoint {args.checkpoint} --unit {args.unit}`, \
{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()} ({os.cpu_count()} cores, load average
{load:.1f} at the start), torch {torch.__version__} on 1 thread.

## The scan

{args.pairs:,} built-in sentences ({language}), the model's own translations scored, the CLI's default batches:
**{seconds:.0f} s**, {args.pairs / seconds:.0f} pairs/s; peak resident memory {before:.0f} MB before the scan,
{after:.0f} MB after. The same number of traced translations (`Bundle.translate`, {args.unit} timed, extrapolated):
{unit * args.pairs:.0f} s — the scan took {seconds / (unit * args.pairs):.2f}× of it.

## The Corpus page holding the rows

AppTest runs of the page's script (median of 3), with the server's store holding the scan's records:

| step | {SMALL} rows | {len(records):,} rows | ratio |
|---|---|---|---|
{rows}
"""
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
