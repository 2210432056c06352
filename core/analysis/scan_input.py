"""The corpus scan's input: every line of a ``source<TAB>translation[<TAB>reference]`` file as a ``Pair``, with the
reason a line cannot be scored named on it (``core.analysis.scan`` scores them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..inputs import MAX_CHARS


@dataclass(frozen=True)
class Pair:
    """One input line: its number (from 1), the source, the translation to score (None: the model's own), the
    reason it cannot be scored, if any, and the reference translation of a third column (for ``chrf``)."""

    line: int
    source: str | None
    translation: str | None
    error: str | None = None
    reference: str | None = None


def read_pairs(path: str | Path) -> list[Pair]:
    """Every line of a ``source<TAB>translation[<TAB>reference]`` file as a ``Pair`` (an empty or missing
    translation: the model's own is scored). Lines are split on ``\\n`` (a ``\\r`` before it is dropped) and
    decoded one by one, so bytes that are not UTF-8 spoil their line only."""
    return parse_pairs(Path(path).read_bytes())


def parse_pairs(data: bytes) -> list[Pair]:
    """``read_pairs`` of a file's bytes (an uploaded file, a built-in set)."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline ending the last line
    return [parse_line(number, raw) for number, raw in enumerate(lines, start=1)]


def parse_line(number: int, raw: bytes) -> Pair:
    """The ``Pair`` of input line ``number`` (from 1), with ``error`` set when the line cannot be scored."""
    try:
        text = raw.removesuffix(b"\r").decode("utf-8")
    except UnicodeDecodeError as exc:
        return Pair(number, None, None, f"line {number}: not UTF-8 text ({exc.reason} at byte {exc.start})")
    fields = text.split("\t")
    if len(fields) > 3:
        return Pair(number, fields[0], None, f"line {number}: {len(fields)} tab-separated fields; expected "
                    "source<TAB>translation<TAB>reference (or fewer)")  # fmt: skip
    source = fields[0]
    translation, reference = (fields[i] if len(fields) > i and fields[i].strip() else None for i in (1, 2))
    if not source.strip():
        return Pair(number, source, translation, f"line {number}: no source text", reference)
    sides = {"source": source, "translation": translation or "", "reference": reference or ""}
    for side, value in sides.items():
        if len(value) > MAX_CHARS:
            problem = f"line {number}: the {side} is longer than {MAX_CHARS:,} characters"
            return Pair(number, source, translation, problem, reference)
    return Pair(number, source, translation, None, reference)
