"""Sentence splitting before translation."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.text.segment import split_sentences


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("The cat sleeps. The dog barks!", ["The cat sleeps.", "The dog barks!"]),
        ("Where is it? It is here… “Really?” she asked.", ["Where is it?", "It is here…", "“Really?” she asked."]),
        ("Dr. Smith met Mr. Jones at 5 p.m. today.", ["Dr. Smith met Mr. Jones at 5 p.m. today."]),
        ("J. R. R. Tolkien wrote it. It is long.", ["J. R. R. Tolkien wrote it.", "It is long."]),
        ("He said (quietly.) Then he left.", ["He said (quietly.)", "Then he left."]),
        (
            "O gato dorme. ¿Dónde está? 3 dias depois voltou.",
            ["O gato dorme.", "¿Dónde está?", "3 dias depois voltou."],
        ),
        ("version 2.5 is out. see e.g. the notes", ["version 2.5 is out. see e.g. the notes"]),  # lower case: one
        ("", []),
        ("   ", []),
        ("No final mark", ["No final mark"]),
    ],
)
def test_split(text: str, sentences: list[str]) -> None:
    assert split_sentences(text) == sentences


@given(st.text(max_size=200))
def test_nothing_is_lost_or_invented(text: str) -> None:
    parts = split_sentences(text)
    assert "".join("".join(p.split()) for p in parts) == "".join(text.split())
    assert all(p == p.strip() and p for p in parts)
