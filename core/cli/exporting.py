"""What the two export commands share: their arguments and the check of the output folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import CheckpointError
from ..storage.checkpoint import check_output_folder


def add_export_arguments(parser: argparse.ArgumentParser, what: str, verify_help: str) -> None:
    """checkpoint, out (``what`` to write), --force, --no-verify (``verify_help``) and --text."""
    parser.add_argument("checkpoint", help="a core checkpoint folder")
    parser.add_argument("out", help=f"the {what} to write")
    parser.add_argument("--force", action="store_true", help="replace OUT when it exists")
    parser.add_argument("--no-verify", action="store_true", help=verify_help)
    parser.add_argument("--text", default=None, help="the sentence the check translates (default: a sample)")


def target(out: str | Path, *, force: bool) -> Path:
    """The export's output folder; CheckpointError when it exists and --force was not given, InputError when it
    could never be replaced (``check_output_folder``)."""
    out = Path(out)
    check_output_folder(out)
    if out.exists() and not force:
        raise CheckpointError(f"{out}: already exists; pass --force to replace it")
    return out
