"""The built-in corpora a scan can start from, per language pair: no upload needed to see what a scan shows.

- **Held-out Ding test** (``data/ding-split``, made by ``make test`` / ``python -m core prepare``): the 1,000
  sentence pairs no checkpoint here was trained or distilled on. For an English–German model both sides are there,
  so each line carries a reference (chrF is computed); for another model with English as its source, the English
  side alone (its references would be in another language).
- **Built-in sentences** (``core.analysis.sentences``): a few hundred sentences written for this project, in the
  model's source language (English when there are none in it); no references.

Each set is the bytes of a ``source<TAB>translation<TAB>reference`` file with the translation left empty (the
model's own is scored), read by ``scan_input.parse_pairs`` as an uploaded file is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..text.language import NAMES
from ..training.corpus import text_lines
from .sentences import builtin_sentences

DING_LANGUAGES = ("en", "de")


@dataclass(frozen=True)
class CorpusSet:
    """A built-in corpus: its key, what it is in a few words, and its lines as a scan reads them."""

    key: str
    title: str
    data: bytes

    @property
    def lines(self) -> int:
        return self.data.count(b"\n")


def tsv(sources: list[str], references: list[str] | None = None) -> bytes:
    """``source<TAB><TAB>reference`` lines (no translation: the model's own is scored); tabs and line breaks inside
    a sentence become spaces."""

    def flat(text: str) -> str:
        return " ".join(text.replace("\t", " ").split())

    refs = references if references is not None else [""] * len(sources)
    return "".join(
        f"{flat(s)}\t\t{flat(r)}\n".replace("\t\t\n", "\n") for s, r in zip(sources, refs, strict=True)
    ).encode()


def builtin_sets(source_language: str, target_language: str, split_dir: Path) -> list[CorpusSet]:
    """The sets a model translating ``source_language`` → ``target_language`` can scan: the held-out Ding test when
    ``split_dir`` holds it and the model reads English or German (with references when it writes the other one),
    then the built-in sentences."""
    sets: list[CorpusSet] = []
    split_dir = Path(split_dir)
    if source_language in DING_LANGUAGES and (split_dir / "split.json").is_file():
        other = next(code for code in DING_LANGUAGES if code != source_language)
        try:
            sources = text_lines(split_dir / f"test.{source_language}", every_line_ended=True)
            references = text_lines(split_dir / f"test.{other}", every_line_ended=True)
        except (InputError, OSError):
            sources = references = []
        if sources and len(sources) == len(references):
            paired = target_language == other
            title = f"Held-out Ding test ({len(sources):,} sentences, " + (
                f"{NAMES.get(other, other)} references)" if paired else "no references: Ding is English–German)"
            )
            sets.append(CorpusSet("ding-test", title, tsv(sources, references if paired else None)))
    sentences, used = builtin_sentences(source_language)
    note = "" if used == source_language else f", in {NAMES.get(used, used)}: none are written in {source_language}"
    sets.append(CorpusSet("builtin", f"Built-in sentences ({len(sentences)}, no references{note})", tsv(sentences)))
    return sets
