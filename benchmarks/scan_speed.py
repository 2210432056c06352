"""How fast the corpus scan goes, here and on Ray, and what the contributions cost beside a plain translation.

    python -m benchmarks.scan_speed [--pairs 120] [--checkpoint distilled-en-pt]

On ``--pairs`` real pairs (held-out Ding test English with the teacher's Portuguese, the first rows of
``benchmarks.hallucination``'s table), for the checkpoint:

1. the per-pair cost: for each pair in turn (interleaved, so both see the same load), the wall time of
   ``Bundle.translate`` (greedy, every attention recorded, as the lab translates), of untraced greedy decoding
   (``core.decoding.search.greedy`` with the bundle's fast weights, no recorder), of ``contributions`` on the given
   translation and of ``contributions`` of the model's own translation (no translation given);
   medians, and the ratio of the medians;
2. whole scans of the pairs (``core.analysis.scan.scan``, into a fresh file each): in this process with torch on 1
   and on 2 threads, and on a local Ray instance (2 CPUs) with 1 and with 2 workers (one torch thread each); wall
   time from the call to the last line written, worker start and checkpoint load included (and to the first line
   written: the start-up), and whether each output is byte-identical to the 1-thread local one.

Writes ``benchmarks/scan_speed.md``.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

import core
from benchmarks.hallucination import teacher_table
from core.analysis.contributions import contributions
from core.analysis.scan import Runner, local_records, scan
from core.analysis.scan_ray import ray_records
from core.decoding.search import greedy
from core.recording.call import Call

ROOT = Path(__file__).resolve().parents[1]


def per_pair_costs(checkpoint: Path, pairs: list[tuple[str, str]]) -> dict[str, float]:
    """Median seconds per pair of translate (traced), untraced greedy and contributions, interleaved per pair."""
    bundle = core.load(checkpoint, device="cpu")
    bundle.translate(pairs[0][0])  # warm-up
    contributions(bundle, pairs[0][0], translation=pairs[0][1])
    times: dict[str, list[float]] = {"translate": [], "greedy": [], "contributions": [], "own": []}
    for source, translation in pairs:
        t0 = time.perf_counter()
        bundle.translate(source)
        t1 = time.perf_counter()
        src, keep = bundle.padded([bundle.encode_source(source)[0]])
        greedy(bundle.model, src, keep, Call(fast=bundle.fast))
        t2 = time.perf_counter()
        contributions(bundle, source, translation=translation)
        t3 = time.perf_counter()
        contributions(bundle, source)  # the model's own translation: greedy decoding first
        times["translate"].append(t1 - t0)
        times["greedy"].append(t2 - t1)
        times["contributions"].append(t3 - t2)
        times["own"].append(time.perf_counter() - t3)
    return {name: statistics.median(t) for name, t in times.items()}


def timed_scan(checkpoint: Path, pairs_file: Path, out: Path, runner: Runner) -> tuple[float, float]:
    """(seconds to the first line written: start-up and checkpoint load included, seconds to the last)."""
    start = time.perf_counter()
    first: list[float] = []
    scan(checkpoint, pairs_file, out, runner=runner, progress=False,
         on_record=lambda n: first.append(time.perf_counter() - start) if n == 1 else None)  # fmt: skip
    return first[0], time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scan_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=120)
    parser.add_argument("--checkpoint", default="distilled-en-pt")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "scan_speed.md")
    args = parser.parse_args()
    import ray  # the optional extra (make test installs it); only this benchmark's Ray rows need it

    checkpoint = ROOT / "checkpoints" / args.checkpoint
    rows = teacher_table(max(args.pairs, 200), 0)[: args.pairs]  # the first rows: the same sentences at any n
    pairs = [(en, pt) for en, pt, _ in rows]
    load = os.getloadavg()[0]
    torch.set_num_threads(1)
    costs = per_pair_costs(checkpoint, pairs)
    work = Path(tempfile.mkdtemp(prefix="scan-speed-"))
    pairs_file = work / "pairs.tsv"
    pairs_file.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    runs: dict[str, tuple[float, float]] = {}
    torch.set_num_threads(1)
    runs["this process, 1 torch thread"] = timed_scan(checkpoint, pairs_file, work / "local1.jsonl", local_records)
    torch.set_num_threads(2)
    runs["this process, 2 torch threads"] = timed_scan(checkpoint, pairs_file, work / "local2.jsonl", local_records)
    torch.set_num_threads(1)
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    try:
        for n in (1, 2):
            runner = functools.partial(ray_records, address="auto", workers=n)
            runs[f"Ray, {n} worker{'s' if n > 1 else ''}"] = timed_scan(checkpoint, pairs_file, work / f"ray{n}.jsonl",
                                                                        runner)  # fmt: skip
    finally:
        ray.shutdown()
    reference = (work / "local1.jsonl").read_bytes()
    files = {
        "this process, 1 torch thread": "local1",
        "this process, 2 torch threads": "local2",
        "Ray, 1 worker": "ray1",
        "Ray, 2 workers": "ray2",
    }
    lines = [
        "# Scan speed",
        "",
        f"Made by `python -m benchmarks.scan_speed --pairs {args.pairs} --checkpoint {args.checkpoint}` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC: {os.cpu_count()} CPUs ({platform.machine()}), "
        f"torch {torch.__version__}, Ray {ray.__version__}, load average {load:.1f} at the start (a shared machine: "
        "compare rows of this one run only). The method is in the script's docstring.",
        "",
        f"Per pair (median of {args.pairs}, 1 torch thread): `Bundle.translate` (traced) {costs['translate']:.3f} s, "
        f"untraced greedy {costs['greedy']:.3f} s, `contributions` on the given translation "
        f"{costs['contributions']:.3f} s: contributions cost **{costs['contributions'] / costs['translate']:.2f}×** a "
        f"traced translation, **{costs['contributions'] / costs['greedy']:.2f}×** an untraced one; `contributions` "
        f"of the model's own translation (greedy decoding included) {costs['own']:.3f} s, "
        f"**{costs['own'] / costs['translate']:.2f}×** a traced translation.",
        "",
        "| scan of the pairs | wall time | of which to the first line | pairs / s | pairs / s after the first line "
        "| same bytes as the 1-thread scan here |",
        "|---|---|---|---|---|---|",
    ]
    for name, (first, seconds) in runs.items():
        same = (work / f"{files[name]}.jsonl").read_bytes() == reference
        steady = (args.pairs - 1) / (seconds - first)
        lines.append(
            f"| {name} | {seconds:.1f} s | {first:.1f} s | {args.pairs / seconds:.2f} | {steady:.2f} "
            f"| {'yes' if same else 'no'} |"
        )
    text = "\n".join(lines) + "\n"
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
