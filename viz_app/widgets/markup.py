"""Text made safe and marked for ``st.markdown``: user or model text made literal, words that differ marked,
pieces as inline code.
"""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from viz_app import claims
from viz_app.figures.style import token_text

md = claims.md  # user or model text made literal for st.markdown (no accidental bold, links, HTML or LaTeX)


EMPTY = "∅ (the model produced no words)"


def marked_words(before: str, after: str) -> tuple[str, str]:
    """Both texts as Markdown with the words that differ between them highlighted (user text escaped)."""
    out_a: list[str] = []
    out_b: list[str] = []
    for op, words_a, words_b in claims.word_diff(before, after):
        for words, side, colour in ((words_a, out_a, "red"), (words_b, out_b, "green")):
            side.extend(md(w) if op == "equal" else f":{colour}-background[{md(w)}]" for w in words)
    return " ".join(out_a) or EMPTY, " ".join(out_b) or EMPTY


def token_pills(tokens: Sequence[str], highlight: int | None = None) -> None:
    """Pieces as inline code spans ('␣' = word start); ``highlight`` is bold."""
    spans = []
    for i, t in enumerate(tokens):
        text = token_text(t).replace("`", "ˋ")
        spans.append(f"**`{text}`**" if i == highlight else f"`{text}`")
    st.markdown(" ".join(spans) if spans else "∅")
