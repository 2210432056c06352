"""describe a checkpoint"""

from __future__ import annotations

import argparse

from ..bundle import load


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint")


def run(args: argparse.Namespace) -> int:
    bundle = load(args.checkpoint, device="cpu")
    cfg = bundle.config
    src, tgt = bundle.languages
    print(f"name:        {bundle.name}")
    print(f"languages:   {src} -> {tgt}")
    print(f"parameters:  {bundle.model.n_parameters():,}")
    print(f"vocabulary:  {bundle.tokenizer.vocab_size} pieces")
    if bundle.shortlist is not None:
        sl = bundle.shortlist
        print(f"shortlist:   lexical, {sl.frequent} most frequent + {sl.best} best per source piece (--shortlist)")
    for key, value in cfg.to_dict().items():
        print(f"  {key}: {value}")
    return 0
