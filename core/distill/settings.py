"""The two distillation recipes' settings, typed: what ``python -m core distill`` and ``distill-long`` read from
their command lines (``core.cli.distill``), passed to the stages and the card writers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..training.train import TrainConfig


@dataclass(frozen=True, kw_only=True)
class Distillation:
    """What both recipes have: the teacher, the folders, the stages, which parameters train and how."""

    teacher: Path
    out: Path  # the student's published checkpoint folder
    split: Path  # the Ding split folder
    data_dir: Path
    run_dir: Path
    stages: frozenset[str]
    scope: str  # which parameters train (core.distill.student.SCOPES)
    reused_lr_scale: float  # learning-rate factor of trainable parameters copied from the teacher
    init_from: Path | None  # start from this earlier student instead of the teacher
    max_pieces: int  # drop training pairs longer than this
    max_ratio: float  # drop teacher outputs longer than RATIO * source + 8 pieces
    train: TrainConfig


@dataclass(frozen=True, kw_only=True)
class SentenceRecipe(Distillation):
    """``distill``: sequence-level KD on the teacher's greedy output, mostly short text, on the CPU."""

    translate_minutes: float  # time box for translating training English (0 = all)
    max_train: int  # at most this many Ding training lines (0 = all)
    fortunes: bool  # add the Debian fortune-cookie sentences
    sentence_weight: int  # copies of each sentence pair per epoch
    dev_chrf_sentences: int
    eval_beam: int  # also score the student with beam search of this size (0 = skip)
    head_sweep: int  # test sentences for the single-head ablation sweep (0 = skip)
    compare: Path | None  # another checkpoint for the side-by-side
    notes: Path | None  # markdown appended to the card
    threads: int
    progress: bool


@dataclass(frozen=True, kw_only=True)
class LongRecipe(Distillation):
    """``distill-long``: word- and sequence-level KD on inputs of every length, on any device."""

    source_language: str
    target_language: str
    sources_from: Path | None  # take the sources from another run's teacher outputs
    phrases: int
    joined: int
    dev_per_bucket: int
    kd_weight: float
    teacher_max_tokens: int  # 0: auto
    eval_max_tokens: int  # 0: auto
    device: str | None  # None: cuda when there is one
    decoder: Path | None  # publish: trained decoder tensors instead of RUN_DIR/best
    compare_student: Path | None
    per_bucket: int
    data_seed: int
