"""Publishes the best model of a training run as a checkpoint folder with a card (scores measured now)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..training.publish import MAX_MB, publish


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", default="runs/ding-en-de", help="training run (with best/, log.jsonl, state.json)")
    parser.add_argument("--out", default="checkpoints/ding-en-de", help="checkpoint folder to write")
    parser.add_argument("--split", default="data/ding-split")
    parser.add_argument("--command", default=None, help="the training command to print in the card")


def run(args: argparse.Namespace) -> int:
    done = publish(Path(args.run_dir), Path(args.out), Path(args.split), command=args.command)
    print(json.dumps(done.scores, indent=1))
    print(f"wrote {done.out} ({done.size_mb:.1f} MB) in {done.seconds:.0f} s")
    if done.size_mb > MAX_MB:
        print(f"warning: {done.out} is {done.size_mb:.1f} MB, over the {MAX_MB} MB cap")
        return 1
    return 0
