"""Distil the imported Bergamot en->pt model into a student whose decoder has real self-attention
(``core.distill.student``: data, train, eval, publish; each stage skips what exists)."""

from __future__ import annotations

import argparse

from ..bundle import MAX_BEAM
from ..distill.settings import SentenceRecipe
from ..distill.student import STAGES, distill
from ..errors import InputError
from ..training.train import use_threads
from .distilling import RecipeDefaults, add_recipe_arguments, optional_path, shared_settings

RECIPE = RecipeDefaults(
    command="distill",
    stages=STAGES,
    default_stages="data,train,eval,publish",
    data_dir="data/distill",
    data_help="teacher translations (appended as they are made)",
    run_dir="runs/distill",
    scope="self_attn+norm",
    reused_lr_scale=1.0,
    max_pieces=64,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--translate-minutes", type=float, default=0.0, help="time box for translating training English (0 = all)"
    )
    p.add_argument("--max-train", type=int, default=0, help="at most this many Ding training lines (0 = all)")
    p.add_argument("--no-fortunes", action="store_true", help="do not add the Debian fortune-cookie sentences")
    p.add_argument("--sentence-weight", type=int, default=3, help="copies of each sentence pair per epoch (phrases: 1)")
    p.add_argument("--dev-chrf-sentences", type=int, default=300, help="dev sentences decoded at each evaluation")
    p.add_argument(
        "--eval-beam",
        type=int,
        default=4,
        help="also score the student with beam search of this size on the test sentences (0 = skip)",
    )
    p.add_argument(
        "--head-sweep", type=int, default=200, help="test sentences for the single-head ablation sweep (0 = skip)"
    )
    p.add_argument(
        "--compare", default=None, help="another checkpoint to show in the side-by-side (e.g. the en->de model)"
    )
    p.add_argument("--notes", default=None, help="markdown file appended to the card after the side-by-side")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    p.add_argument("--progress", action="store_true", help="show a progress bar while training")
    add_recipe_arguments(p, RECIPE)


def run(args: argparse.Namespace) -> int:
    use_threads(args.threads)
    if not 0 <= args.eval_beam <= MAX_BEAM:
        raise InputError(f"--eval-beam must be 0 (skip) to {MAX_BEAM}, got {args.eval_beam}")
    recipe = SentenceRecipe(
        **shared_settings(args, RECIPE),
        translate_minutes=args.translate_minutes,
        max_train=args.max_train,
        fortunes=not args.no_fortunes,
        sentence_weight=args.sentence_weight,
        dev_chrf_sentences=args.dev_chrf_sentences,
        eval_beam=args.eval_beam,
        head_sweep=args.head_sweep,
        compare=optional_path(args.compare),
        notes=optional_path(args.notes),
        threads=args.threads,
        progress=args.progress,
    )
    distill(recipe)
    return 0
