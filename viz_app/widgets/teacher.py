"""The teacher beside its student: on a checkpoint distilled from another one (config.json's ``teacher``, written
by the distillation's publish stage), the teacher's translation of the same sentence under the student's, with
the words that differ marked, so that a learner sees which words are the student's own.

``header.translation_header`` calls ``beside``."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import streamlit as st

import core
from core.importers.bergamot_wheel import DIRECTIONS
from viz_app.session import checkpoints, errors, runs, selection, trace_replay
from viz_app.widgets import markup

IMPORTED = frozenset(f"bergamot-{d}" for d in DIRECTIONS)  # the folders `make models` writes


def teacher_name(info: Mapping[str, Any]) -> str | None:
    """The checkpoint folder name of the teacher a checkpoint's config.json names (None: not distilled)."""
    teacher = info.get("teacher")
    return Path(teacher).name or None if isinstance(teacher, str) and teacher.strip() else None


def own_words(teacher_text: str, student_text: str) -> list[str]:
    """The student's words that are not matched by the teacher's (word by word, in order, as the marks show)."""
    a, b = teacher_text.split(), student_text.split()
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    return [w for op, _, _, j1, j2 in matcher.get_opcodes() if op != "equal" for w in b[j1:j2]]


def comparison_line(teacher: str, teacher_text: str, student_text: str) -> str:
    """What the comparison shows, from the two translations."""
    own = own_words(teacher_text, student_text)
    if teacher_text == student_text:
        return f"The teacher `{teacher}` writes the same translation: none of these words is the student's own."
    if not own:
        return f"Every word of the student's translation is also in the teacher's (`{teacher}`), which has more."
    n, verb = len(student_text.split()), "is" if len(own) == 1 else "are"
    choices = "choice" if len(own) == 1 else "choices"
    return (
        f"{len(own)} of the student's {n} words {verb} not the teacher's (`{teacher}`; marked): the student's own "
        f"{choices}."
    )


def missing_line(teacher: str, names: Sequence[str]) -> str:
    """How to get an absent teacher (``names``: the checkpoints there are)."""
    if teacher in IMPORTED:
        return (
            f"This model was distilled from `{teacher}`, which is not in the checkpoints folder: `make models` "
            "imports it, and its translation then shows here beside the student's."
        )
    return (
        f"This model was distilled from `{teacher}`, which is not among the checkpoints "
        f"({', '.join(f'`{n}`' for n in names) or 'none'}); put it there to see its translation beside the student's."
    )


def beside(out: core.Translation) -> None:
    """Under the translation header: the teacher's translation (as trained, the same beam) with the words that
    differ from the student's as-trained translation (``out`` itself when no switch is on) marked, or one caption
    on how to get the teacher. Nothing for a model without one, or while a saved trace is replayed."""
    bundle = selection.bundle() if trace_replay.replay() is None else None
    name = teacher_name(bundle.info) if bundle is not None else None
    if name is None:
        return
    names = checkpoints.checkpoint_names()
    if name not in names:
        st.caption(missing_line(name, names))
        return
    path = str(checkpoints.checkpoint_root() / name)
    key = runs.options_key(core.InferenceOptions())
    text = selection.sentence()
    theirs = errors.guarded(lambda: runs.translate(path, text, key, out.beam_size))
    if theirs is None:
        return
    # both as trained: with switches on, the student's words would be the switches' doing, not its own choices
    mine = out if out.options == core.InferenceOptions() else selection.current(out.beam_size, core.InferenceOptions())
    if mine is None:
        return
    teacher_marked, student_marked = markup.marked_words(theirs.text, mine.text)
    c1, c2 = st.columns(2)
    c1.markdown(f"**Teacher ({markup.md(name)}, as trained):** {teacher_marked}")
    c2.markdown(f"**This student{'' if mine is out else ', as trained'}:** {student_marked}")
    st.caption(comparison_line(name, theirs.text, mine.text))
