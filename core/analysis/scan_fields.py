"""The scan's per-pair fields beside the source share (docs/scan.md): chrF against a reference, invented words,
a source-language check, the length ratio and the pieces least drawn from the source.

``pair_fields`` gives them for a scored pair, ``EMPTY`` for a line that was not scored. What they need from the
model besides its scores (its languages, the target language's word list) is a ``FieldContext``, made once per
process and language pair (``field_context``): a missing word list is said once on stderr, and ``invented_words``
is then null.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
from sacrebleu.metrics import CHRF

from ..distill.invented import dictionary, is_invented, output_words
from ..errors import InputError
from ..text.language import check_language
from .contributions import SourceShares

LOWEST = 3  # pieces named in lowest_share_words
CHRF_SCORE = CHRF()  # sacreBLEU's default chrF (character 6-grams, β = 2); made once, not for every pair
EOS_PIECE = "</s>"  # the end of a scored output: not a word, left out of lowest_share_words
EMPTY: dict[str, Any] = {
    "chrf": None,
    "invented_words": None,
    "language_mismatch": None,
    "length_ratio": None,
    "lowest_share_words": None,
}


@dataclass(frozen=True)
class FieldContext:
    """The model's languages and its target language's word list (None: not available here)."""

    source_language: str
    target_language: str
    known: frozenset[str] | None


@functools.cache
def field_context(source_language: str, target_language: str) -> FieldContext:
    """The ``FieldContext`` of a language pair, made once per process (the word list is read once; a missing one is
    said once, on stderr)."""
    try:
        known: frozenset[str] | None = dictionary(target_language)
    except InputError as exc:
        print(f"scan: invented_words is null: {exc}", file=sys.stderr)
        known = None
    return FieldContext(source_language, target_language, known)


def pair_fields(
    context: FieldContext,
    *,
    source: str,
    translation: str,
    reference: str | None,
    result: SourceShares,
    digits: int,
) -> dict[str, Any]:
    """The fields of one scored pair (``EMPTY``'s keys): ``translation`` the text scored, ``result`` its
    contributions; numbers rounded to ``digits`` decimals."""
    shares = np.asarray(result.token_source_share, dtype=float)
    pieces = list(result.target_pieces)
    words = [i for i, piece in enumerate(pieces) if piece != EOS_PIECE]
    lowest = sorted(words, key=lambda i: shares[i])[:LOWEST]  # stable: the first of equal shares first
    invented = None
    if context.known is not None:
        invented = [
            w for w in output_words(translation) if is_invented(w, context.known, context.target_language, source)
        ]
    check = check_language(source, context.source_language, context.target_language)
    return {
        "chrf": None if reference is None else round(CHRF_SCORE.sentence_score(translation, [reference]).score, digits),
        "invented_words": invented,
        "language_mismatch": check.warns,
        "length_ratio": round(len(pieces) / len(result.source_pieces), digits),
        "lowest_share_words": [{"piece": pieces[i], "share": round(float(shares[i]), digits)} for i in lowest],
    }
