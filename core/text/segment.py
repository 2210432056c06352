"""Sentence splitting, as production translators do before translating: one sentence at a time.

A boundary is a sentence-final mark (. ! ? …), optionally closing quotes or brackets, whitespace, then what can
start a sentence (an upper-case letter, a digit, an opening quote or bracket, ¿ or ¡). Common abbreviations
(Mr., Dr., e.g., single initials) do not end a sentence.
"""

from __future__ import annotations

import re

_BOUNDARY = re.compile(r"(?<=[.!?…])[\"”’»)\]]*(\s+)(?=[\"“‘«(\[¿¡]?[^\W\d_a-zß-ÿ]|\d)")
ABBREVIATIONS = frozenset(
    "mr. mrs. ms. dr. prof. st. sr. jr. sra. srta. dra. vs. etc. e.g. i.e. cf. no. nr. p. pp. vol. fig. "
    "approx. dept. inc. ltd. co. jan. feb. mar. apr. jun. jul. aug. sep. sept. oct. nov. dec.".split()
)


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` in order, stripped; [] for blank text."""
    parts: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        candidate = text[start : m.start(1)].strip()
        words = candidate.split()
        last = words[-1].lower().lstrip('"“‘«([') if words else ""
        if last in ABBREVIATIONS or re.fullmatch(r"(?:[^\W\d_]\.)+", last):
            continue  # 'Dr. Smith', 'J. R. R. Tolkien', 'e.g. this'
        if candidate:
            parts.append(candidate)
        start = m.end()
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts
