"""score a file of source<TAB>translation pairs by source share and flag possible hallucinations (JSON lines)"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

from ..analysis.scan import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BATCH_TOKENS,
    DEFAULT_THRESHOLD,
    Runner,
    ScanSettings,
    local_records,
    scan,
)
from ..analysis.scan_parquet import write_parquet
from ..analysis.scan_ray import ray_records  # imports Ray only when called (an optional extra)
from ..errors import InputError
from ..training.train import use_threads


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, type=Path, help="checkpoint folder")
    p.add_argument(
        "--pairs",
        required=True,
        type=Path,
        help="UTF-8 text, one pair a line: source<TAB>translation[<TAB>reference] (the source alone: the model's own "
        "greedy translation is scored; a reference: its chrF is written)",
    )
    p.add_argument(
        "--out",
        required=True,
        type=Path,
        help="JSON lines, one per input line in input order; a partial file from an interrupted scan is continued",
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help=f"flag a translation whose mean source share is below this (default {DEFAULT_THRESHOLD}: at most 1 %% "
        "false flags on the held-out correct pairs of both distilled checkpoints; see docs/scan.md)",
    )
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=None,
        help="score on a Ray cluster: host:port, ray://host:port, auto (the running one, or RAY_ADDRESS), "
        "or local (start one here); needs the optional extra: pip install -e '.[scale]'",
    )
    p.add_argument(
        "--workers", type=int, default=None, help="actors of the Ray Data pool (default: one per GPU, else per CPU)"
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help="pairs scored by one forward pass (with --ray: the same batches, one to an actor at a time; default "
        f"{DEFAULT_BATCH_SIZE}; 1 scores each pair alone); the records equal one pair's at a time within 1e-4",
    )
    p.add_argument(
        "--batch-tokens",
        type=int,
        default=DEFAULT_BATCH_TOKENS,
        help="at most this many padded positions in one pass: pairs x (longest source + longest target, in pieces; "
        f"a pair without a translation counts its source twice); bounds the memory (default {DEFAULT_BATCH_TOKENS})",
    )
    p.add_argument("--device", default=None, help="cpu or cuda, without --ray (default: cuda if available)")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch CPU threads without --ray (0 = torch's default; on a busy machine 1 can be several times faster)",
    )
    p.add_argument(
        "--timing",
        action="store_true",
        help="write each pair's seconds (a batch's time over its pairs); off by default: the output is then the same "
        "bytes from run to run",
    )
    p.add_argument("--parquet", type=Path, default=None, help="also write the records as a Parquet table here")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    settings = ScanSettings(threshold=args.threshold, timing=args.timing)
    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers {args.workers}: at least 1")
    if args.batch_size < 1:
        raise InputError(f"--batch-size {args.batch_size}: at least 1")
    if args.batch_tokens < 1:
        raise InputError(f"--batch-tokens {args.batch_tokens}: at least 1")
    if args.ray is None and (args.workers is not None):
        raise InputError("--workers is the number of Ray actors: give --ray ADDRESS too")
    if args.ray is not None and (args.device is not None or args.threads):
        raise InputError(
            "--device and --threads are for a scan in this process; on Ray each worker takes one GPU when the "
            "cluster has them, else one CPU (one thread)"
        )
    if not args.checkpoint.is_dir():
        raise InputError(f"--checkpoint {args.checkpoint}: no such folder")
    if not args.pairs.is_file():
        raise InputError(f"--pairs {args.pairs}: no such file")
    if args.parquet is not None and args.parquet.resolve() in (args.out.resolve(), args.pairs.resolve()):
        raise InputError(f"--parquet {args.parquet}: would overwrite --out or --pairs; choose another file")
    use_threads(args.threads)
    runner: Runner
    if args.ray is not None:
        runner = functools.partial(
            ray_records,
            address=args.ray,
            workers=args.workers,
            batch_size=args.batch_size,
            batch_tokens=args.batch_tokens,
        )
    else:
        runner = functools.partial(
            local_records, device=args.device, batch_size=args.batch_size, batch_tokens=args.batch_tokens
        )
    summary = scan(args.checkpoint, args.pairs, args.out, settings, runner=runner, progress=not args.no_progress)
    resumed = f", {summary.resumed} already done" if summary.resumed else ""
    print(
        f"{summary.total} pairs scanned{resumed}: {summary.flagged} flagged (mean source share < "
        f"{settings.threshold}), {summary.errors} not scored (see their error field) -> {args.out}",
        file=sys.stderr,
    )
    if args.parquet is not None:
        rows = write_parquet(args.out, args.parquet)
        print(f"{rows} records -> {args.parquet}", file=sys.stderr)
    return 0
