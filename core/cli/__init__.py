"""Command line: ``python -m core <command> ...`` (or ``attention-lab <command> ...``), one module per command.

Each command module has a one-line docstring (its help), ``add_arguments(parser)`` and ``run(args) -> int``; it
reads the flags, calls the library's typed functions and prints. No library module parses arguments.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from ..errors import LabError

# command -> module of this package, in the order of `python -m core --help`
COMMANDS = {
    "translate": "translate",
    "info": "info",
    "train": "train",
    "eval": "eval",
    "import-bergamot": "import_bergamot",
    "import-hf": "import_hf",
    "export-hf": "export_hf",
    "export-ct2": "export_ct2",
    "publish": "publish",
    "distill": "distill",
    "distill-long": "distill_long",
    "explain": "explain",
    "heads": "heads",
    "scan": "scan",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core", description="Transformer Attention Lab engine")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(f"{__name__}.{module_name}")  # optional dependencies load in run()
        p = sub.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else None)
        module.add_arguments(p)
        p.set_defaults(func=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (e.g. `| head`): stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:  # training and distillation keep resumable state: the same command goes on
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 — the last resort: one line, never a traceback (LAB_DEBUG=1 shows it)
        if os.environ.get("LAB_DEBUG"):
            raise
        print(f"error: {describe(exc)}", file=sys.stderr)
        return 2 if isinstance(exc, OSError | UnicodeError) else 1


def describe(exc: Exception) -> str:
    """One line for a failure the commands did not turn into a ``LabError`` themselves: a file that cannot be
    read or written says which and why; anything else says what it was and that it was not expected."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    if isinstance(exc, UnicodeDecodeError):
        return f"a file is not UTF-8 text ({exc.reason} at byte {exc.start}); check the files the command reads"
    if isinstance(exc, OSError):
        return str(exc)
    return f"{type(exc).__name__}: {exc} (not expected: please report it; LAB_DEBUG=1 shows where it happened)"
