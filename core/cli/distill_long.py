"""Distillation for every input length, with the teacher's per-word distributions (= distill --recipe long)

The name the cards and docs use for ``python -m core distill --recipe long`` (``core.cli.distill``): the same
options, the long recipe's defaults.
"""

from __future__ import annotations

import argparse

from .distill import add_arguments as _add_arguments
from .distill import run

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    _add_arguments(p, recipe="long")
