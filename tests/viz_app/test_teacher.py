"""The teacher beside its student (viz_app/widgets/teacher.py): the claims; the header with the teacher present or
absent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from apptest_helpers import ok, texts
from conftest import build_tiny_checkpoint
from streamlit.testing.v1 import AppTest

import core
from viz_app.widgets.markup import marked_words
from viz_app.widgets.teacher import comparison_line, missing_line, own_words, teacher_name

APP = Path(__file__).resolve().parents[2] / "viz_app" / "app.py"
TIMEOUT = 90
SENTENCE = "Is there any tea left?"  # the first English example: what the app translates first


def test_teacher_name_from_the_config() -> None:
    assert teacher_name({"teacher": "checkpoints/bergamot-en-pt"}) == "bergamot-en-pt"
    assert teacher_name({"teacher": "bergamot-pt-en/"}) == "bergamot-pt-en"
    assert teacher_name({"name": "ding-en-de"}) is None
    assert teacher_name({"teacher": " "}) is None and teacher_name({"teacher": 3}) is None


def test_own_words_are_those_the_teacher_does_not_have() -> None:
    assert own_words("O velho guarda escreveu", "O velho guardeião escreveu") == ["guardeião"]
    assert own_words("a b c", "a b c") == []
    assert own_words("a b c", "a c") == []  # a dropped word is no word of the student's own


@pytest.mark.parametrize(
    ("teacher_text", "student_text", "expected"),
    [
        ("O velho guarda.", "O velho guarda.", "writes the same translation: none of these words"),
        ("O velho guarda escreveu.", "O velho escreveu.", "Every word of the student's translation is also in"),
        ("O velho guarda.", "O velho guardeião.", "1 of the student's 3 words is not the teacher's (`t`; marked)"),
        ("O velho guarda.", "O novo guardeião.", "2 of the student's 3 words are not the teacher's (`t`; marked)"),
    ],
)
def test_comparison_line(teacher_text: str, student_text: str, expected: str) -> None:
    assert expected in comparison_line("t", teacher_text, student_text)


def test_missing_line_says_how_to_get_the_teacher() -> None:
    assert "`make models` imports it" in missing_line("bergamot-en-pt", ["distilled-en-pt"])
    line = missing_line("my-teacher", ["distilled-en-pt"])
    assert "make models" not in line and "not among the checkpoints (`distilled-en-pt`)" in line


def _student(root: Path, teacher: str) -> Path:
    folder = build_tiny_checkpoint(root / "student", seed=3)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["teacher"] = f"checkpoints/{teacher}"
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def _run(root: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(root))
    monkeypatch.setenv("LAB_CHECKPOINT", "student")
    torch.set_num_threads(1)
    return ok(AppTest.from_file(str(APP), default_timeout=TIMEOUT).run(timeout=TIMEOUT))


def test_the_teacher_translation_beside_the_student(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    student = _student(tmp_path, "the-teacher")
    teacher = build_tiny_checkpoint(tmp_path / "the-teacher", seed=0)
    mine, theirs = (core.load(p).translate(SENTENCE, truncate=True).text for p in (student, teacher))
    assert mine != theirs  # else the marks could not be checked
    at = _run(tmp_path, monkeypatch)
    shown = texts(at)
    teacher_marked, student_marked = marked_words(theirs, mine)
    assert f"**Teacher (the-teacher, as trained):** {teacher_marked}" in shown
    assert f"**This student:** {student_marked}" in shown
    assert comparison_line("the-teacher", theirs, mine) in shown
    assert "make models" not in shown


def test_with_switches_on_the_teacher_is_compared_with_the_as_trained_student(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With PE off the student's words are the switch's doing, not its own choices: the comparison reads the
    student as trained (it compared the switched translation, calling every changed word the student's own)."""
    student = _student(tmp_path, "the-teacher")
    teacher = build_tiny_checkpoint(tmp_path / "the-teacher", seed=0)
    mine, theirs = (core.load(p).translate(SENTENCE, truncate=True).text for p in (student, teacher))
    switched = core.load(student).translate(SENTENCE, core.InferenceOptions(positional_encoding=False)).text
    assert switched != mine  # else this could not tell the two apart
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(tmp_path))
    monkeypatch.setenv("LAB_CHECKPOINT", "student")
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update({"pe": "0"})
    shown = texts(ok(at.run(timeout=TIMEOUT)))
    assert f"**This student, as trained:** {marked_words(theirs, mine)[1]}" in shown
    assert comparison_line("the-teacher", theirs, mine) in shown


def test_an_absent_teacher_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _student(tmp_path, "bergamot-en-pt")
    at = _run(tmp_path, monkeypatch)
    captions = [c.value for c in at.caption]
    assert missing_line("bergamot-en-pt", ["student"]) in captions
    assert "**Teacher" not in texts(at)


def test_a_model_without_a_teacher_shows_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build_tiny_checkpoint(tmp_path / "student", seed=3)
    shown = texts(_run(tmp_path, monkeypatch))
    assert "**Teacher" not in shown and "distilled from" not in shown
