"""Distil the imported Bergamot teacher into a student whose decoder has self-attention (--recipe sentences or long)

Two recipes, one command; the recipe is data (``RECIPES``): ``sentences`` (``core.distill.student``: sequence-level
KD on mostly short text, on the CPU; stages data, train, eval, publish) and ``long`` (``core.distill.long``: word- and
sequence-level KD on inputs of every length, on any device; stages inputs, teacher, train, publish). Each stage skips
what exists. ``python -m core distill-long`` is ``distill --recipe long``. An option of the other recipe is refused
by name; an option left out takes the chosen recipe's default.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..distill import long, student
from ..distill.settings import LongRecipe, SentenceRecipe
from ..errors import InputError
from ..inputs import MAX_BEAM
from ..training.train import use_threads
from .training import add_train_arguments, train_config_from_args


@dataclass(frozen=True)
class Option:
    """One recipe's own option: its flag, its default and the rest of ``add_argument``'s keywords."""

    flag: str
    default: Any
    help: str
    kind: type | None = None  # None: a switch (store_true)

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


@dataclass(frozen=True)
class Recipe:
    """What differs between the recipes: their stages, their defaults and their own options."""

    stages: tuple[str, ...]  # every stage, in order
    default_stages: str
    data_dir: str
    data_help: str
    run_dir: str
    scope: str
    reused_lr_scale: float
    max_pieces: int
    options: tuple[Option, ...]
    train: dict[str, Any] = field(default_factory=lambda: dict(student.TRAIN_DEFAULTS))


RECIPES = {
    "sentences": Recipe(
        stages=student.STAGES,
        default_stages="data,train,eval,publish",
        data_dir="data/distill",
        data_help="teacher translations (appended as they are made)",
        run_dir="runs/distill",
        scope="self_attn+norm",
        reused_lr_scale=1.0,
        max_pieces=64,
        options=(
            Option("--translate-minutes", 0.0, "time box for translating training English (0 = all)", float),
            Option("--max-train", 0, "at most this many Ding training lines (0 = all)", int),
            Option("--no-fortunes", False, "do not add the Debian fortune-cookie sentences"),
            Option("--sentence-weight", 3, "copies of each sentence pair per epoch (phrases: 1)", int),
            Option("--dev-chrf-sentences", 300, "dev sentences decoded at each evaluation", int),
            Option(
                "--eval-beam",
                4,
                "also score the student with beam search of this size on the test sentences (0 = skip)",
                int,
            ),
            Option("--head-sweep", 200, "test sentences for the single-head ablation sweep (0 = skip)", int),
            Option("--compare", None, "another checkpoint to show in the side-by-side (e.g. the en->de model)", str),
            Option("--notes", None, "markdown file appended to the card after the side-by-side", str),
            Option("--threads", 0, "torch CPU threads (0 = default)", int),
            Option("--progress", False, "show a progress bar while training"),
        ),
    ),
    "long": Recipe(
        stages=long.STAGES,
        default_stages="inputs,teacher,train",
        data_dir="data/distill-long",
        data_help="sources and teacher outputs",
        run_dir="runs/distill-long",
        scope="decoder",
        reused_lr_scale=0.3,
        max_pieces=128,
        train={**student.TRAIN_DEFAULTS, "log_every": 50},
        options=(
            Option("--source-language", "en", "the teacher's source language", str),
            Option("--target-language", "pt", "the teacher's target language", str),
            Option("--sources-from", None, "take train/dev/test sources from DIR/*.tgt (a pt->en run)", str),
            Option("--phrases", 100_000, "Ding training phrases kept (short inputs)", int),
            Option("--joined", 90_000, "joined runs of consecutive sentences (16-120 pieces)", int),
            Option("--dev-per-bucket", 75, "dev inputs per length bucket (best-step choice)", int),
            Option("--kd-weight", 0.5, "weight of KL(teacher || student) in the loss", float),
            Option("--teacher-max-tokens", 0, "padded source tokens per teacher batch (0: auto)", int),
            Option("--eval-max-tokens", 0, "padded source tokens per dev batch (0: auto)", int),
            Option("--device", "auto", "cpu, cuda or auto", str),
            Option(
                "--decoder",
                None,
                "publish: the trained decoder tensors (safetensors) instead of RUN_DIR/best, "
                "e.g. brought back from a GPU",
                str,
            ),
            Option("--compare-student", None, "publish: an earlier student to measure beside this one", str),
            Option("--per-bucket", 100, "publish: held-out inputs per length bucket", int),
            Option("--data-seed", 0, "seed of the inputs stage (joined runs, shuffling)", int),
        ),
    ),
}
SHARED = {  # the shared options whose default depends on the recipe -> the Recipe field that holds it
    "data_dir": "data_dir",
    "run_dir": "run_dir",
    "stages": "default_stages",
    "scope": "scope",
    "reused_lr_scale": "reused_lr_scale",
    "max_pieces": "max_pieces",
}


def add_arguments(p: argparse.ArgumentParser, recipe: str | None = None) -> None:
    """``--recipe`` (or the recipe fixed, for ``distill-long``), the options both recipes share, each recipe's own
    options in a group of its own, then the TrainConfig options. Recipe-dependent defaults are filled in by ``run``."""
    if recipe is None:
        p.add_argument(
            "--recipe", choices=list(RECIPES), default="sentences", help="which distillation (default sentences)"
        )
    else:
        p.set_defaults(recipe=recipe)
    per = {name: r for name, r in RECIPES.items() if recipe in (None, name)}  # whose defaults the help names

    def default(attr: str) -> str:
        return "; ".join(f"{getattr(r, attr)} ({name})" for name, r in per.items())

    p.add_argument("--teacher", default="checkpoints/bergamot-en-pt", help="SSRU teacher checkpoint folder")
    p.add_argument("--out", default="checkpoints/distilled-en-pt", help="where to publish the student")
    p.add_argument("--split", default="data/ding-split", help="Ding split folder (core.training.corpus)")
    p.add_argument("--data-dir", help=f"{default('data_help')}; default {default('data_dir')}")
    p.add_argument("--run-dir", help=f"trainer state, log, curves, best/; default {default('run_dir')}")
    stages = "; ".join(f"{name}: {', '.join(r.stages)}" for name, r in per.items())
    p.add_argument(
        "--stages", help=f"comma-separated subset of the stages ({stages}); default {default('default_stages')}"
    )
    p.add_argument(
        "--scope",
        choices=list(student.SCOPES),
        help=f"which parameters train (the rest stay frozen); default {default('scope')}",
    )
    p.add_argument(
        "--reused-lr-scale",
        type=float,
        help="learning-rate factor for trainable parameters copied from the teacher (e.g. 0.1); default "
        + default("reused_lr_scale"),
    )
    p.add_argument(
        "--init-from",
        default=None,
        help="start the student from this earlier student checkpoint of the same teacher (e.g. a first phase's "
        "best, or the published one to train it further) instead of the teacher; a resumed run's state still wins",
    )
    p.add_argument(
        "--max-pieces", type=int, help=f"drop training pairs longer than this; default {default('max_pieces')}"
    )
    p.add_argument(
        "--max-ratio", type=float, default=2.0, help="drop teacher outputs longer than RATIO * source + 8 pieces"
    )
    for name, r in RECIPES.items():  # every recipe's options, so that one given to the other recipe is named
        group = p.add_argument_group(f"--recipe {name} only")
        for o in r.options:
            if o.kind is None:
                group.add_argument(o.flag, action="store_const", const=True, default=None, help=o.help)
            else:
                group.add_argument(o.flag, type=o.kind, default=None, help=f"{o.help} (default {o.default})")
    add_train_arguments(p, RECIPES[recipe].train if recipe is not None else None)


def resolve(args: argparse.Namespace) -> Recipe:
    """The chosen recipe, with its defaults filled into ``args``; InputError for an option of the other recipe."""
    chosen = RECIPES[args.recipe]
    for name, other in RECIPES.items():
        given = [o.flag for o in other.options if name != args.recipe and getattr(args, o.dest, None) is not None]
        if given:
            raise InputError(f"{', '.join(given)}: an option of --recipe {name}, not of --recipe {args.recipe}")
    for dest, attr in SHARED.items():
        if getattr(args, dest) is None:
            setattr(args, dest, getattr(chosen, attr))
    for o in chosen.options:
        if getattr(args, o.dest) is None:
            setattr(args, o.dest, o.default)
    for key, value in chosen.train.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return chosen


def shared_settings(args: argparse.Namespace, recipe: Recipe) -> dict[str, Any]:
    """The ``core.distill.settings.Distillation`` fields from the parsed arguments; InputError for an unknown
    stage or a size below 1."""
    stages = frozenset(s.strip() for s in args.stages.split(",") if s.strip())
    unknown = stages - set(recipe.stages)
    if unknown:
        raise InputError(f"{_command(args)}: unknown stages {sorted(unknown)} ({', '.join(recipe.stages)})")
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
        "init_from": _path(args.init_from),
        "max_pieces": args.max_pieces,
        "max_ratio": args.max_ratio,
        "train": train_config_from_args(args),
    }


def run(args: argparse.Namespace) -> int:
    recipe = resolve(args)
    MAKE[args.recipe](args, shared_settings(args, recipe))
    return 0


def _sentences(args: argparse.Namespace, shared: dict[str, Any]) -> None:
    use_threads(args.threads)
    if not 0 <= args.eval_beam <= MAX_BEAM:
        raise InputError(f"--eval-beam must be 0 (skip) to {MAX_BEAM}, got {args.eval_beam}")
    student.distill(
        SentenceRecipe(
            **shared,
            translate_minutes=args.translate_minutes,
            max_train=args.max_train,
            fortunes=not args.no_fortunes,
            sentence_weight=args.sentence_weight,
            dev_chrf_sentences=args.dev_chrf_sentences,
            eval_beam=args.eval_beam,
            head_sweep=args.head_sweep,
            compare=_path(args.compare),
            notes=_path(args.notes),
            threads=args.threads,
            progress=args.progress,
        )
    )


def _long(args: argparse.Namespace, shared: dict[str, Any]) -> None:
    for option, value, least in (  # counts and sizes: a negative one was written to sources.json as given
        ("--phrases", args.phrases, 0),
        ("--joined", args.joined, 0),
        ("--dev-per-bucket", args.dev_per_bucket, 1),
        ("--per-bucket", args.per_bucket, 1),
        ("--teacher-max-tokens", args.teacher_max_tokens, 0),
        ("--eval-max-tokens", args.eval_max_tokens, 0),
    ):
        if value < least:
            raise InputError(f"{option} must be {'at least 1' if least else '0 or more'}, got {value}")
    long.distill_long(
        LongRecipe(
            **shared,
            source_language=args.source_language,
            target_language=args.target_language,
            sources_from=_path(args.sources_from),
            phrases=args.phrases,
            joined=args.joined,
            dev_per_bucket=args.dev_per_bucket,
            kd_weight=args.kd_weight,
            teacher_max_tokens=args.teacher_max_tokens,
            eval_max_tokens=args.eval_max_tokens,
            device=None if args.device == "auto" else args.device,
            decoder=_path(args.decoder),
            compare_student=_path(args.compare_student),
            per_bucket=args.per_bucket,
            data_seed=args.data_seed,
        )
    )


MAKE: dict[str, Callable[[argparse.Namespace, dict[str, Any]], None]] = {"sentences": _sentences, "long": _long}


def _command(args: argparse.Namespace) -> str:
    return "distill" if args.recipe == "sentences" else "distill-long"


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None
