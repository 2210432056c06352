"""Trains English -> German on the Ding corpus (or a synthetic task) — resumes automatically."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..training.recipes import MAX_VOCAB, MIN_VOCAB, DingRecipe, run_ding, run_synthetic
from ..training.train import use_threads
from .training import add_train_arguments, train_config_from_args


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--task", default="ding", choices=["ding", "copy", "reverse"], help="real corpus or a synthetic task"
    )
    p.add_argument("--out", default="checkpoints/ding-en-de", help="checkpoint folder for the best model")
    p.add_argument("--run-dir", default=None, help="resumable state, JSONL log, curves (default runs/<out name>)")
    p.add_argument("--data-dir", default="data/ding-split")
    p.add_argument("--cache-dir", default="data/ding")
    p.add_argument(
        "--vocab-size", type=int, default=8000, help=f"ding: SentencePiece pieces, {MIN_VOCAB} to {MAX_VOCAB:,}"
    )
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--norm", default="pre", choices=["pre", "post"])
    p.add_argument("--sentence-weight", type=int, default=4, help="how often each training sentence appears per epoch")
    p.add_argument("--no-phrases", action="store_true", help="train on full sentences only")
    p.add_argument("--words", action="store_true", help="also train on single-word pairs")
    p.add_argument("--max-pieces", type=int, default=64, help="drop pairs longer than this many pieces")
    p.add_argument("--dev-bleu-sentences", type=int, default=300)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    add_train_arguments(p)


def run(args: argparse.Namespace) -> int:
    use_threads(args.threads)
    out = Path(args.out)
    run_dir = Path(args.run_dir) if args.run_dir else Path("runs") / out.name
    config = train_config_from_args(args)
    if args.task in ("copy", "reverse"):
        print(json.dumps(run_synthetic(args.task, run_dir, config)))
        return 0
    recipe = DingRecipe(
        out=out,
        data_dir=Path(args.data_dir),
        cache_dir=Path(args.cache_dir),
        vocab_size=args.vocab_size,
        d_model=args.d_model,
        heads=args.heads,
        layers=args.layers,
        d_ff=args.d_ff,
        dropout=args.dropout,
        norm=args.norm,
        sentence_weight=args.sentence_weight,
        phrases=not args.no_phrases,
        words=args.words,
        max_pieces=args.max_pieces,
        dev_bleu_sentences=args.dev_bleu_sentences,
    )
    run_ding(recipe, config, run_dir)
    return 0
