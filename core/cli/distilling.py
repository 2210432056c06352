"""The one command-line builder of the two distillation recipes (``distill``, ``distill-long``): the options they
share, with each recipe's defaults, and the settings they share read back from the parsed arguments."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..distill.student import SCOPES, TRAIN_DEFAULTS
from ..errors import InputError
from .training import add_train_arguments, train_config_from_args


@dataclass(frozen=True)
class RecipeDefaults:
    """What differs between the two recipes' shared options."""

    command: str  # the sub-command, as an error names it
    stages: tuple[str, ...]  # every stage, in order
    default_stages: str
    data_dir: str
    data_help: str
    run_dir: str
    scope: str
    reused_lr_scale: float
    max_pieces: int
    train: dict[str, Any] = field(default_factory=lambda: dict(TRAIN_DEFAULTS))


def add_recipe_arguments(p: argparse.ArgumentParser, recipe: RecipeDefaults) -> None:
    """The teacher, the folders, the stages, the trained scope and the pair filters, then the TrainConfig options."""
    p.add_argument("--teacher", default="checkpoints/bergamot-en-pt", help="SSRU teacher checkpoint folder")
    p.add_argument("--out", default="checkpoints/distilled-en-pt", help="where to publish the student")
    p.add_argument("--split", default="data/ding-split", help="Ding split folder (core.training.corpus)")
    p.add_argument("--data-dir", default=recipe.data_dir, help=recipe.data_help)
    p.add_argument("--run-dir", default=recipe.run_dir, help="trainer state, log, curves, best/")
    p.add_argument(
        "--stages",
        default=recipe.default_stages,
        help=f"comma-separated subset of the stages ({', '.join(recipe.stages)})",
    )
    p.add_argument(
        "--scope", default=recipe.scope, choices=list(SCOPES), help="which parameters train (the rest stay frozen)"
    )
    p.add_argument(
        "--reused-lr-scale",
        type=float,
        default=recipe.reused_lr_scale,
        help="learning-rate factor for trainable parameters copied from the teacher (e.g. 0.1)",
    )
    p.add_argument(
        "--init-from",
        default=None,
        help="start the student from this earlier student checkpoint of the same teacher (e.g. a first phase's "
        "best, or the published one to train it further) instead of the teacher; a resumed run's state still wins",
    )
    p.add_argument("--max-pieces", type=int, default=recipe.max_pieces, help="drop training pairs longer than this")
    p.add_argument(
        "--max-ratio", type=float, default=2.0, help="drop teacher outputs longer than RATIO * source + 8 pieces"
    )
    add_train_arguments(p, recipe.train)


def shared_settings(args: argparse.Namespace, recipe: RecipeDefaults) -> dict[str, Any]:
    """The ``core.distill.settings.Distillation`` fields from the parsed arguments; InputError for an unknown
    stage or a size below 1."""
    stages = frozenset(s.strip() for s in args.stages.split(",") if s.strip())
    unknown = stages - set(recipe.stages)
    if unknown:
        raise InputError(f"{recipe.command}: unknown stages {sorted(unknown)} ({', '.join(recipe.stages)})")
    if args.max_pieces < 1:
        raise InputError(f"--max-pieces must be at least 1, got {args.max_pieces}")
    return {
        "teacher": Path(args.teacher),
        "out": Path(args.out),
        "split": Path(args.split),
        "data_dir": Path(args.data_dir),
        "run_dir": Path(args.run_dir),
        "stages": stages,
        "scope": args.scope,
        "reused_lr_scale": args.reused_lr_scale,
        "init_from": Path(args.init_from) if args.init_from else None,
        "max_pieces": args.max_pieces,
        "max_ratio": args.max_ratio,
        "train": train_config_from_args(args),
    }


def optional_path(value: str | None) -> Path | None:
    return Path(value) if value else None
