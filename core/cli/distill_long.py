"""Distillation for every input length, with the teacher's per-word distributions (``core.distill.long``:
inputs, teacher, train, publish; each stage skips what exists and resumes what is half done)."""

from __future__ import annotations

import argparse

from ..distill.long import STAGES, distill_long
from ..distill.settings import LongRecipe
from ..distill.student import TRAIN_DEFAULTS
from ..errors import InputError
from .distilling import RecipeDefaults, add_recipe_arguments, optional_path, shared_settings

RECIPE = RecipeDefaults(
    command="distill-long",
    stages=STAGES,
    default_stages="inputs,teacher,train",
    data_dir="data/distill-long",
    data_help="sources and teacher outputs",
    run_dir="runs/distill-long",
    scope="decoder",
    reused_lr_scale=0.3,
    max_pieces=128,
    train={**TRAIN_DEFAULTS, "log_every": 50},
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source-language", default="en")
    p.add_argument("--target-language", default="pt")
    p.add_argument("--sources-from", default=None, help="take train/dev/test sources from DIR/*.tgt (a pt->en run)")
    p.add_argument("--phrases", type=int, default=100_000, help="Ding training phrases kept (short inputs)")
    p.add_argument("--joined", type=int, default=90_000, help="joined runs of consecutive sentences (16-120 pieces)")
    p.add_argument("--dev-per-bucket", type=int, default=75, help="dev inputs per length bucket (best-step choice)")
    p.add_argument("--kd-weight", type=float, default=0.5, help="weight of KL(teacher || student) in the loss")
    p.add_argument("--teacher-max-tokens", type=int, default=0, help="padded source tokens per teacher batch (0: auto)")
    p.add_argument("--eval-max-tokens", type=int, default=0, help="padded source tokens per dev batch (0: auto)")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")
    p.add_argument(
        "--decoder",
        default=None,
        help="publish: the trained decoder tensors (safetensors) instead of RUN_DIR/best, e.g. brought back from a GPU",
    )
    p.add_argument("--compare-student", default=None, help="publish: an earlier student to measure beside this one")
    p.add_argument("--per-bucket", type=int, default=100, help="publish: held-out inputs per length bucket")
    p.add_argument("--data-seed", type=int, default=0, help="seed of the inputs stage (joined runs, shuffling)")
    add_recipe_arguments(p, RECIPE)


def run(args: argparse.Namespace) -> int:
    shared = shared_settings(args, RECIPE)
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
    recipe = LongRecipe(
        **shared,
        source_language=args.source_language,
        target_language=args.target_language,
        sources_from=optional_path(args.sources_from),
        phrases=args.phrases,
        joined=args.joined,
        dev_per_bucket=args.dev_per_bucket,
        kd_weight=args.kd_weight,
        teacher_max_tokens=args.teacher_max_tokens,
        eval_max_tokens=args.eval_max_tokens,
        device=None if args.device == "auto" else args.device,
        decoder=optional_path(args.decoder),
        compare_student=optional_path(args.compare_student),
        per_bucket=args.per_bucket,
        data_seed=args.data_seed,
    )
    distill_long(recipe)
    return 0
