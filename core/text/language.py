"""Does a text look like the model's source language? A judgement made before anyone reads the output.

A model trained on Portuguese echoes English back unchanged, and one trained on English turns Arabic into dashes;
neither says why. ``check_language`` says so, from two kinds of evidence:

* the script of the letters (Latin, Cyrillic, Arabic, Han, ...) against the script the source language is
  written in: a text mostly in another script cannot be the source language;
* an offline language identifier (py3langid: a naive Bayes model over byte n-grams, shipped inside the package,
  loaded once), restricted to ``CANDIDATES``: a warning needs the source language below ``MAX_SOURCE_PROBABILITY``
  AND another language at ``MIN_OTHER_PROBABILITY`` or more.

Short texts are not judged: names, numbers and one- or two-word phrases look like many languages ("Maria Silva",
"Rio de Janeiro", "OK"). The identifier needs ``MIN_WORDS`` words that neither start with a capital letter nor hold
a digit (capitalised words are mostly names); the script, ``MIN_WORDS`` words of any kind (one name in another script,
"Москва", is not a warning). Each Han or kana character counts as a word: those scripts have no spaces.
"""

from __future__ import annotations

import functools
import unicodedata
from collections import Counter
from dataclasses import dataclass, replace
from typing import Literal

from py3langid.langid import MODEL_FILE, LanguageIdentifier

NAMES = {
    "ar": "Arabic",
    "ca": "Catalan",
    "de": "German",
    "el": "Greek",
    "en": "English",
    "es": "Spanish",
    "fa": "Persian",
    "fr": "French",
    "he": "Hebrew",
    "hi": "Hindi",
    "it": "Italian",
    "ja": "Japanese",
    "ko": "Korean",
    "nl": "Dutch",
    "pl": "Polish",
    "pt": "Portuguese",
    "ro": "Romanian",
    "ru": "Russian",
    "sv": "Swedish",
    "tr": "Turkish",
    "uk": "Ukrainian",
    "zh": "Chinese",
}
CANDIDATES = tuple(NAMES)  # the identifier chooses among these (all 140 of its languages split close ones: pt/gl)
SCRIPTS: dict[str, frozenset[str]] = {  # the scripts each candidate is written in
    **{code: frozenset({"Latin"}) for code in ("ca", "de", "en", "es", "fr", "it", "nl", "pl", "pt", "ro", "sv", "tr")},
    **{code: frozenset({"Cyrillic"}) for code in ("ru", "uk")},
    **{code: frozenset({"Arabic"}) for code in ("ar", "fa")},
    "el": frozenset({"Greek"}),
    "he": frozenset({"Hebrew"}),
    "hi": frozenset({"Devanagari"}),
    "ja": frozenset({"Han", "Hiragana", "Katakana"}),
    "ko": frozenset({"Hangul"}),
    "zh": frozenset({"Han"}),
}
KNOWN_SCRIPTS = frozenset().union(*SCRIPTS.values()) | {  # letters of other names (ª, º, modifiers) are not counted
    *("Armenian", "Bengali", "Ethiopic", "Georgian", "Gujarati", "Gurmukhi", "Kannada", "Khmer", "Lao"),
    *("Malayalam", "Myanmar", "Sinhala", "Syriac", "Tamil", "Telugu", "Thaana", "Thai", "Tibetan"),
}
SPACELESS = frozenset({"Han", "Hiragana", "Katakana"})  # scripts written without spaces between words
MIN_WORDS = 3  # fewer words (see the module doc): not judged
MIN_SOURCE_SCRIPT_SHARE = 0.5  # a smaller share of the letters in the source's script: another script
MAX_SOURCE_PROBABILITY = 0.01  # the identifier's probability of the source language must be below this ...
MIN_OTHER_PROBABILITY = 0.9  # ... and another language's at least this, for a warning
COPIED_SHARE_SHOWN = 0.5  # the message names the copied output words from this share on

Verdict = Literal["too short", "unknown language", "source language", "other script", "other language"]


@dataclass(frozen=True)
class LanguageCheck:
    """What ``check_language`` found. ``warns``: the text does not look like the source language.

    ``probabilities``: the identifier's top languages (code, probability among ``CANDIDATES``), best first,
    empty when it was not asked. ``script``: the script most of the letters are in ("" with no letters).
    ``words``: the words the identifier may judge (not capitalised, no digit); ``all_words``: every word.
    ``copied``: (output words that are also input words, output words), None without an output."""

    verdict: Verdict
    source: str
    target: str
    looks_like: str | None
    script: str
    source_script_share: float
    words: int
    all_words: int
    source_probability: float | None
    probabilities: tuple[tuple[str, float], ...]
    copied: tuple[int, int] | None = None

    @property
    def warns(self) -> bool:
        return self.verdict in ("other script", "other language")

    def message(self) -> str | None:
        """The sentence for the person, naming both languages and the numbers; None when there is no warning."""
        if not self.warns:
            return None
        src, tgt = _name(self.source), _name(self.target)
        looks = f"looks like {_name(self.looks_like)}" if self.looks_like else f"is written in {self.script} script"
        shown = dict(self.probabilities[:1])
        if self.source_probability is not None:
            shown[self.source] = self.source_probability
        evidence = "language identifier: " + ", ".join(f"{_name(code)} {_percent(p)}" for code, p in shown.items())
        if self.verdict == "other script":
            evidence = f"{1 - self.source_script_share:.0%} of its letters are not {_scripts(self.source)}; " + evidence
        text = f"This text {looks}; this model translates {src} → {tgt} ({evidence})."
        if self.copied is not None and self.copied[1] and self.copied[0] / self.copied[1] >= COPIED_SHARE_SHOWN:
            text += f" {self.copied[0]} of the {self.copied[1]} output words are input words, copied unchanged."
        return text


def check_language(text: str, source: str, target: str, *, output: str | None = None) -> LanguageCheck:
    """Whether ``text`` looks like ``source`` (a language code such as "en"), the language a model translates
    from into ``target``. ``output``: the model's translation, to count the input words it copied."""
    counts = Counter(s for s in map(_script, text) if s in KNOWN_SCRIPTS)
    letters = sum(counts.values())
    own = SCRIPTS.get(source, frozenset())
    found = LanguageCheck(
        verdict="source language",
        source=source,
        target=target,
        looks_like=None,
        script=counts.most_common(1)[0][0] if counts else "",
        source_script_share=sum(counts[s] for s in own) / letters if letters else 1.0,
        words=_words(text, names=False),
        all_words=_words(text, names=True),
        source_probability=None,
        probabilities=(),
        copied=_copied(text, output) if output is not None else None,
    )
    if source not in SCRIPTS:
        return replace(found, verdict="unknown language")
    other_script = found.source_script_share < MIN_SOURCE_SCRIPT_SHARE
    if found.all_words < MIN_WORDS or (found.words < MIN_WORDS and not other_script):
        return replace(found, verdict="too short")
    ranked = [(code, float(p)) for code, p in _identifier().rank(text)]
    probability = dict(ranked)[source]
    top, top_p = ranked[0]
    looks_like = top if top != source and top_p >= MIN_OTHER_PROBABILITY else None
    found = replace(found, source_probability=probability, probabilities=tuple(ranked[:3]))
    if other_script:
        return replace(found, verdict="other script", looks_like=looks_like)
    if looks_like is not None and probability < MAX_SOURCE_PROBABILITY:
        return replace(found, verdict="other language", looks_like=looks_like)
    return found


@functools.cache
def _identifier() -> LanguageIdentifier:
    """py3langid's model restricted to ``CANDIDATES``, loaded once (about 2 s; read-only afterwards)."""
    found = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    found.set_languages(list(CANDIDATES))
    return found


@functools.lru_cache(maxsize=4096)  # a corpus scan asks for the same few letters again and again
def _script(c: str) -> str:
    """The script of one character, from its Unicode name ('LATIN SMALL LETTER A' -> Latin; CJK -> Han)."""
    if not c.isalpha():
        return ""
    first = unicodedata.name(c, "OTHER").split()[0]
    return {"CJK": "Han"}.get(first, first.title())


def _words(text: str, *, names: bool) -> int:
    """Whitespace-separated words with a letter (with ``names=False``, only those neither capitalised nor holding a
    digit); in scripts without spaces, each letter."""
    n = 0
    for word in text.split():
        letters = [c for c in word if c.isalpha()]
        spaceless = sum(_script(c) in SPACELESS for c in letters)
        if spaceless:
            n += spaceless
        elif letters and (names or (not letters[0].isupper() and not any(c.isdigit() for c in word))):
            n += 1
    return n


def _copied(text: str, output: str) -> tuple[int, int]:
    """(output words found among the input's words, output words); words lower-cased, punctuation stripped."""

    def bare(s: str) -> list[str]:
        return [w for w in ("".join(c for c in t if c.isalnum()).lower() for t in s.split()) if w]

    given, produced = set(bare(text)), bare(output)
    return sum(w in given for w in produced), len(produced)


def _name(code: str) -> str:
    return NAMES.get(code, code)


def _scripts(code: str) -> str:
    return " or ".join(sorted(SCRIPTS[code]))


def _percent(p: float) -> str:
    return "<0.1%" if p < 0.001 else ">99.9%" if p > 0.999 else f"{p:.1%}"
