"""Invented words: output words found in no dictionary of the target language, per 100 output words.

``python -m core eval --invented-words --teacher T --checkpoint S [--sources FILE]`` counts them for a student
and its teacher on the same held-out inputs (``core.distill.fidelity.inputs_by_length``'s buckets, as
``--by-length`` makes them), with the same rule for both, so that a learner can tell which odd words are the
student's own and which it learned from the teacher. The distilled cards' section "Invented words" is
``invented_section``'s output.

The rule (``output_words``, ``is_invented``):

* an output word is a run of letters, joined by hyphens or apostrophes (``'`` or ``’``): "guarda-chuva",
  "don't", "diga-me"; punctuation around it is stripped, and it is compared case-folded;
* a whitespace-separated token holding a digit ("3", "10h", "2º") is a number, not a word: neither counted nor
  judged;
* a word written with a capital letter that also stands, as written, in the source sentence is a name carried
  over ("Tom", "Lisboa"): counted as a word, never invented;
* a joined word is known when it is listed whole or when every part is listed (the Debian lists hold almost no
  hyphenated compounds: "guarda-chuva" is judged as "guarda" + "chuva"); an object pronoun after a verb
  ("agitá-lo", ``CLITICS``) counts as listed;
* a Portuguese adverb in -mente counts as listed when the adjective it is made of is ("enganosamente" from
  "enganosa", ``DERIVED``: the lists hold many such adverbs, not all);
* every other word is invented when it is in none of the target language's word lists (``WORDLISTS``: Debian's
  wbrazilian and wportuguese for Portuguese, wamerican and wbritish for English), read from /usr/share/dict.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..text.tokenizer import Tokenizer
from ..training.evaluate import translate_many
from ..transformer.model import Transformer
from .fidelity import BUCKETS, CLITICS, WORDLISTS

LETTERS = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
JOINS = re.compile(r"['’-]")
DICT_ROOTS = (Path("/"), Path("data/wordlists"))  # installed packages, else the copies ``fidelity.word_list`` fetched
N_EXAMPLES = 6
DERIVED: dict[str, tuple[str, ...]] = {"pt": ("mente",)}  # suffixes that make a word of a listed word


def dictionary(language: str, roots: Sequence[Path] = DICT_ROOTS) -> frozenset[str]:
    """Every word (lower-cased) of every Debian word list of ``language`` (``WORDLISTS``). ``InputError`` naming
    the packages to install when a list is missing, or when the language has none."""
    packages = WORDLISTS.get(language)
    if not packages:
        raise InputError(f"no word list is known for the language {language!r} (known: {', '.join(WORDLISTS)})")
    found: set[str] = set()
    missing = []
    for package, member in packages.items():
        path = next((root / member for root in roots if (root / member).is_file()), None)
        if path is None:
            missing.append(package)
            continue
        found.update(line.strip().lower() for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    if missing:
        raise InputError(
            f"the {language} word lists {', '.join(missing)} are not installed (/usr/share/dict): "
            f"`apt-get install {' '.join(missing)}` (`make test` does it where apt-get can)"
        )
    return frozenset(found)


def output_words(text: str) -> list[str]:
    """The words of ``text`` as written (see the module doc): letters joined by hyphens or apostrophes, tokens
    holding a digit left out."""
    return [w for token in text.split() if not any(c.isdigit() for c in token) for w in LETTERS.findall(token)]


def is_invented(word: str, known: Iterable[str] | frozenset[str], language: str, source: str = "") -> bool:
    """Whether the output word ``word`` (as written) is invented: not a name carried over from ``source``, not in
    ``known`` (lower-cased words) whole, nor all of its joined parts (pronouns of ``language`` after the first)."""
    known = known if isinstance(known, (set, frozenset)) else frozenset(known)
    if word[:1].isupper() and word in source_words(source):
        return False
    folded = word.lower().replace("’", "'")
    if folded in known or any(
        folded.endswith(suffix) and folded[: -len(suffix)] in known for suffix in DERIVED.get(language, ())
    ):
        return False
    first, *rest = JOINS.split(folded)
    clitics = CLITICS.get(language, frozenset())
    return not rest or first not in known or not all(p in known or p in clitics for p in rest)


def source_words(source: str) -> frozenset[str]:
    return frozenset(LETTERS.findall(source))


@dataclass(frozen=True)
class Invented:
    """One model's invented words over some outputs."""

    words: int  # output words counted
    invented: int  # of them, invented
    examples: tuple[str, ...]  # a few distinct invented words (lower-cased, sorted)

    @property
    def per_100(self) -> float:
        return 100 * self.invented / self.words if self.words else float("nan")

    def cell(self) -> str:
        return f"{self.per_100:.2f} ({self.invented} of {self.words:,})" if self.words else "—"


def count_invented(
    outputs: Sequence[str], known: frozenset[str], language: str, sources: Sequence[str] | None = None
) -> Invented:
    """Invented words of ``outputs`` (``is_invented``; ``sources``, aligned with them, for carried names)."""
    if sources is not None and len(sources) != len(outputs):
        raise InputError(f"{len(outputs)} outputs but {len(sources)} sources: they must be aligned")
    total, odd = 0, []
    for i, text in enumerate(outputs):
        source = sources[i] if sources is not None else ""
        found = output_words(text)
        total += len(found)
        odd += [w.lower() for w in found if is_invented(w, known, language, source)]
    return Invented(total, len(odd), tuple(sorted(set(odd)))[:N_EXAMPLES])


def total(parts: Sequence[Invented]) -> Invented:
    """Several counts as one (examples: the first few of all, sorted)."""
    examples = tuple(sorted({e for p in parts for e in p.examples}))[:N_EXAMPLES]
    return Invented(sum(p.words for p in parts), sum(p.invented for p in parts), examples)


@dataclass(frozen=True)
class InventedTable:
    """Invented words of a teacher and its student on the same bucketed inputs (``BUCKETS``)."""

    language: str
    teacher: tuple[Invented, ...]  # per bucket
    student: tuple[Invented, ...]


def measure(
    teacher: Transformer,
    student: Transformer,
    tokenizer: Tokenizer,
    buckets: Sequence[Sequence[str]],
    known: frozenset[str],
    language: str,
    *,
    teacher_tokenizer: Tokenizer | None = None,
) -> InventedTable:
    """Greedy outputs of both models on every bucket's inputs, counted with the same rule."""
    rows: dict[str, list[Invented]] = {"teacher": [], "student": []}
    for inputs in buckets:
        inputs = list(inputs)
        for name, model, tok in (
            ("teacher", teacher, teacher_tokenizer or tokenizer),
            ("student", student, tokenizer),
        ):
            outputs = translate_many(model, tok, inputs) if inputs else []
            rows[name].append(count_invented(outputs, known, language, inputs))
    return InventedTable(language, tuple(rows["teacher"]), tuple(rows["student"]))


def invented_section(table: InventedTable, *, teacher_name: str, inputs: str, command: str) -> str:
    """The card's section "Invented words" (Markdown): per bucket and in all, teacher then student, the rule, and
    ``command`` to reproduce it. ``inputs`` says which held-out inputs were translated."""
    lists = ", ".join(f"`{p}`" for p in WORDLISTS.get(table.language, {}))
    heads = [f"{lo}–{hi} pieces" for lo, hi in BUCKETS[: len(table.student)]]
    lines = [
        "## Invented words\n",
        f"Output words found in none of Debian's word lists of the target language ({lists}), per 100 output words "
        f"(in brackets: invented of all words), greedy, on {inputs}; the same rule for the teacher and the student. "
        "A word is letters joined by hyphens or apostrophes, compared case-folded; tokens with a digit are numbers, "
        "not words; a capitalised word that stands as written in the source is a name carried over, never "
        "invented; a joined word counts as listed when all its parts are"
        + (" (object pronouns after a verb too)" if table.language in CLITICS else "")
        + (", an adverb in -mente when its adjective is" if table.language in DERIVED else "")
        + ". A word left untranslated (a source-language word in the output) counts as invented too.\n",
        "| model | " + " | ".join(heads) + " | all | e.g. |",
        "|---" * (len(heads) + 3) + "|",
    ]
    for label, parts in ((f"teacher (`{teacher_name}`)", table.teacher), ("this student", table.student)):
        whole = total(parts)
        cells = [p.cell() for p in parts] + [f"**{whole.cell()}**", ", ".join(whole.examples) or "—"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", f"Reproduce: `{command}`", ""]
    return "\n".join(lines)
