"""The training options every training command shares (``train``, ``distill``, ``distill-long``)."""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any

from ..training.train import TrainConfig


def add_train_arguments(parser: argparse.ArgumentParser, defaults: dict[str, Any] | None = None) -> None:
    """One ``--max-tokens``-style option per TrainConfig field (typed like the field). Unset options are None
    and ``train_config_from_args`` then keeps the dataclass default; ``defaults`` overrides it per command."""
    defaults, base = defaults or {}, TrainConfig()
    for f in fields(TrainConfig):
        value = getattr(base, f.name)
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=type(value),
            default=defaults.get(f.name),
            help=f"TrainConfig.{f.name} (default {defaults.get(f.name, value)})",
        )


def train_config_from_args(args: argparse.Namespace) -> TrainConfig:
    names = {f.name for f in fields(TrainConfig)}
    return TrainConfig(**{k: v for k, v in vars(args).items() if k in names and v is not None})
