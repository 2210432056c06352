"""Export a core checkpoint as a Hugging Face folder (Marian, or T5 for T5-shaped checkpoints) that transformers
loads and that computes the same outputs (``core.exporters.hf_families``)."""

from __future__ import annotations

import argparse
import sys

from ..exporters.hf_families import export_hf
from ..exporters.verify import describe
from .exporting import add_export_arguments, target


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_export_arguments(parser, "Hugging Face folder", "skip loading the export back with transformers")


def run(args: argparse.Namespace) -> int:
    out = target(args.out, force=args.force)
    report = export_hf(args.checkpoint, out, verify=not args.no_verify, text=args.text)
    print(f"export-hf: wrote {out}", file=sys.stderr)
    print(f"export-hf: {describe(report)}", file=sys.stderr)
    return 0
