"""Export a core checkpoint as a CTranslate2 model, to serve it with CTranslate2 (``core.exporters.ct2``)."""

from __future__ import annotations

import argparse
import sys

from ..exporters.ct2 import QUANTIZATIONS, export_ct2
from ..exporters.verify import describe
from .exporting import add_export_arguments, target


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_export_arguments(parser, "CTranslate2 model folder", "skip translating a sentence with CTranslate2")
    parser.add_argument("--quantization", choices=QUANTIZATIONS, default=None, help="weight type (default: as saved)")


def run(args: argparse.Namespace) -> int:
    out = target(args.out, force=args.force)
    report = export_ct2(args.checkpoint, out, quantization=args.quantization, verify=not args.no_verify, text=args.text)
    print(f"export-ct2: wrote {out}; {describe(report)}", file=sys.stderr)
    return 0
