"""Does a low source share find detached translations? A hallucination set from the held-out sentences, scanned.

    python -m benchmarks.hallucination [--n 200] [--seed 0] [--ray ADDRESS] [--workers N]

The set (for both distilled checkpoints, the same sentences): ``n`` Ding **test** sentences (held out of every
training input of the distilled students; ``core.distill.fidelity.heldout_sentences``) with at least 4 words, drawn
with ``seed``. English -> Portuguese: the source is the English, its correct translation the teacher's
(``bergamot-en-pt``) greedy output. Portuguese -> English: the source is that Portuguese (what ``distilled-pt-en``
was held out on), its correct translation ``bergamot-pt-en``'s greedy output. Each source is then scanned four
times (``core.analysis.scan``, one file per checkpoint, resumable):

* ``correct``: the correct translation;
* ``detached``: the correct translation of another sentence of the set (fluent, fully detached);
* ``partial``: the first half of the correct translation's words, then the second half of another sentence's;
* ``own``: no translation given: the model's own greedy translation.

Reported, per checkpoint: ROC AUC of minus the source share and of minus the mean log-probability (higher = more
suspect; Dale et al. 2023 compare the two) for detached vs correct, partial vs correct and both vs correct; the
threshold rule (the largest source share that flags at most 1 % of the correct pairs of *both* checkpoints) and
what it flags of each group and of the models' own translations. The teacher translations and the scans are kept
under ``data/hallucination/`` (not committed; regenerated from the Ding split and the imported Bergamot teachers,
which ``make downloads`` and ``make models`` fetch). Writes ``benchmarks/hallucination.md``.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import platform
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch

import core
from core.analysis.roc import largest_threshold, roc_auc
from core.analysis.scan import Runner, ScanSettings, local_records, scan
from core.analysis.scan_ray import ray_records
from core.distill.data import read_lines
from core.distill.fidelity import heldout_sentences
from core.training.evaluate import translate_many

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "data" / "hallucination"
KINDS = ("correct", "detached", "partial", "own")
MAX_FALSE_FLAGS = 0.01  # the threshold rule: at most 1 % of correct pairs flagged, on each checkpoint
MIN_WORDS = 4


@dataclass(frozen=True)
class Direction:
    checkpoint: str  # the model scanned
    source_column: int  # in the teacher table: 0 English, 1 Portuguese
    reference_column: int  # its correct translation: 1 the Portuguese, 2 the English back


DIRECTIONS = (Direction("distilled-en-pt", 0, 1), Direction("distilled-pt-en", 1, 2))


def teacher_table(n: int, seed: int) -> list[tuple[str, str, str]]:
    """(English, bergamot-en-pt's Portuguese, bergamot-pt-en's English of that) for the drawn held-out sentences;
    made once and kept in ``data/hallucination/teacher-<n>-<seed>.tsv``."""
    path = WORK / f"teacher-{n}-{seed}.tsv"
    if path.is_file():
        rows = [tuple(line.split("\t")) for line in read_lines(path)]
        if len(rows) == n and all(len(r) == 3 for r in rows):
            return [(r[0], r[1], r[2]) for r in rows]
    held = [s for s in heldout_sentences(ROOT / "data" / "ding-split") if len(s.split()) >= MIN_WORDS and "\t" not in s]
    random.Random(seed).shuffle(held)
    english = held[:n]  # a larger n keeps the smaller one's sentences
    portuguese = translate_with("bergamot-en-pt", english)
    back = translate_with("bergamot-pt-en", portuguese)
    rows = list(zip(english, portuguese, back, strict=True))
    WORK.mkdir(parents=True, exist_ok=True)
    path.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    return rows


def translate_with(name: str, sentences: list[str]) -> list[str]:
    bundle = core.load(ROOT / "checkpoints" / name, device="cpu")
    return [t.replace("\t", " ").replace("\n", " ") for t in translate_many(bundle.model, bundle.tokenizer, sentences)]


def partial(right: str, other: str) -> str:
    """The first half of ``right``'s words (rounded up), then the second half of ``other``'s."""
    a, b = right.split(), other.split()
    return " ".join(a[: math.ceil(len(a) / 2)] + b[len(b) // 2 :])


def pair_lines(sources: list[str], references: list[str], seed: int) -> tuple[list[str], list[str]]:
    """The scan's input lines and each line's kind: every source with its correct translation, another's
    (detached), half of each (partial), and alone (own), in four blocks. Another = the next one in a shuffled
    order whose translation differs."""
    n = len(sources)
    order = list(range(n))
    random.Random(seed + 1).shuffle(order)
    donor = {}
    for p, i in enumerate(order):
        q = (p + 1) % n
        while references[order[q]] == references[i]:
            q = (q + 1) % n
        donor[i] = order[q]
    lines, kinds = [], []
    for kind in KINDS:
        for i, source in enumerate(sources):
            other = references[donor[i]]
            translation = {"correct": references[i], "detached": other, "partial": partial(references[i], other)}
            lines.append(source if kind == "own" else f"{source}\t{translation[kind]}")
            kinds.append(kind)
    return lines, kinds


def scanned(direction: Direction, rows: list[tuple[str, str, str]], seed: int, runner: Runner) -> list[dict]:
    """The scan of one checkpoint's set (resumed if a previous run was stopped), its records with their kind."""
    sources = [r[direction.source_column] for r in rows]
    references = [r[direction.reference_column] for r in rows]
    lines, kinds = pair_lines(sources, references, seed)
    folder = WORK / f"{direction.checkpoint}-{len(rows)}-{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    pairs = folder / "pairs.tsv"
    pairs.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    out = folder / "scan.jsonl"
    settings = ScanSettings(threshold=0.0)  # flags are decided below, from the threshold this set gives
    scan(ROOT / "checkpoints" / direction.checkpoint, pairs, out, settings, runner=runner)
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return [r | {"kind": k} for r, k in zip(records, kinds, strict=True)]


def values(records: list[dict], kind: str, field: str) -> np.ndarray:
    return np.array([r[field] for r in records if r["kind"] == kind and "error" not in r], dtype=np.float64)


def evaluate(records: list[dict]) -> dict:
    """AUCs of -source share and -mean log-probability, and the per-checkpoint 1 %-false-flag threshold."""
    out: dict = {
        "errors": sum("error" in r for r in records),
        "n": {k: len(values(records, k, "source_share")) for k in KINDS},
    }
    for field in ("source_share", "mean_logprob"):
        correct = -values(records, "correct", field)
        detached, part = -values(records, "detached", field), -values(records, "partial", field)
        out[field] = {
            "detached": roc_auc(detached, correct),
            "partial": roc_auc(part, correct),
            "both": roc_auc(np.concatenate([detached, part]), correct),
        }
        out[f"{field}_median"] = {k: float(np.median(values(records, k, field))) for k in KINDS}
    out["threshold"] = largest_threshold(values(records, "correct", "source_share"), MAX_FALSE_FLAGS)
    return out


def flag_rates(records: list[dict], threshold: float) -> dict[str, float]:
    return {k: float((values(records, k, "source_share") < threshold).mean()) for k in KINDS}


def report(results: dict, threshold: float, rates: dict, args: argparse.Namespace, seconds: float) -> str:
    lines = [
        "# Hallucination detection by source share: the detached set",
        "",
        f"Made by `python -m benchmarks.hallucination --n {args.n} --seed {args.seed}` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC ({platform.machine()}, torch {torch.__version__}; this run "
        f"{seconds / 60:.1f} min, the scans it found done in `data/hallucination/` not counted); the recipe is in the "
        f"script's docstring. Sentences: {args.n} held-out Ding test sentences of at least {MIN_WORDS} words; each "
        "scanned as correct, detached, partial and own.",
        "",
        "ROC AUC (1 = every hallucinated pair scores as more suspect than every correct one, 0.5 = chance); the "
        "score is minus the mean source share (ALTI+) or minus the mean log-probability of the translation's pieces.",
        "",
        "| checkpoint | score | detached vs correct | partial vs correct | both vs correct | median: correct / "
        "detached / partial / own |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        for field, label in (("source_share", "source share"), ("mean_logprob", "mean log-prob")):
            a, m = r[field], r[f"{field}_median"]
            medians = " / ".join(f"{m[k]:.3f}" for k in KINDS)
            lines.append(
                f"| {name} | {label} | {a['detached']:.3f} | {a['partial']:.3f} | {a['both']:.3f} | {medians} |"
            )
    lines += [
        "",
        f"**Threshold**: a pair is flagged when its mean source share is below **{threshold}**: the largest value "
        f"(rounded down to 3 decimals) that flags at most {MAX_FALSE_FLAGS:.0%} of the correct pairs of each "
        "checkpoint ("
        + ", ".join(f"{name}: {r['threshold']:.4f}" for name, r in results.items())
        + "; the smaller is taken). What it flags:",
        "",
        "| checkpoint | correct | detached | partial | the model's own translations | lines not scored |",
        "|---|---|---|---|---|---|",
    ]
    for name, rate in rates.items():
        lines.append(
            f"| {name} | {rate['correct']:.1%} | {rate['detached']:.1%} | {rate['partial']:.1%} | {rate['own']:.1%} "
            f"| {results[name]['errors']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hallucination", description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="held-out sentences (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ray", default=None, metavar="ADDRESS", help="scan on Ray (as python -m core scan)")
    parser.add_argument("--workers", type=int, default=None, help="Ray actors")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "hallucination.md")
    args = parser.parse_args()
    start = time.perf_counter()
    torch.set_num_threads(1)  # one thread, as every benchmark here; on a busy 2-core machine two went ~10x slower
    runner: Runner = (
        functools.partial(ray_records, address=args.ray, workers=args.workers)
        if args.ray
        else functools.partial(local_records, device="cpu")
    )
    rows = teacher_table(args.n, args.seed)
    records = {d.checkpoint: scanned(d, rows, args.seed, runner) for d in DIRECTIONS}
    results = {name: evaluate(r) for name, r in records.items()}
    threshold = math.floor(min(r["threshold"] for r in results.values()) * 1000) / 1000
    rates = {name: flag_rates(r, threshold) for name, r in records.items()}
    text = report(results, threshold, rates, args, time.perf_counter() - start)
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
