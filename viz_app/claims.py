"""Sentences that state an outcome, each computed from the runs it describes — one function per claim.

A page never types "does not change", "identical", "with PE" or "the model's own choice" as prose beside a
figure: it asks one of these functions, which looks at the two outputs, traces or option sets in question and
returns the sentence that is true of them. Every function has a test for each of its branches
(tests/viz_app/test_claims.py). Pure: no Streamlit, no model; Markdown is escaped by the caller where it is user
text (these sentences quote pieces and words only through ``quote``).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

import core

SAME_WEIGHT = 1e-9  # two attention weights closer than this are the same (a recomputed equal run differs by 0)


def md(text: str) -> str:
    """User or model text made literal for st.markdown (no accidental bold, links, HTML or LaTeX)."""
    return "".join("\\" + ch if ch in "\\`*_[]<>#$~|" else ch for ch in text)


def first_upper(text: str) -> str:
    """'without PE on the encoder' -> 'Without PE on the encoder' (``str.capitalize`` would lower 'PE')."""
    return text[:1].upper() + text[1:]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """'1 output piece', '3 output pieces', '1,000 pairs': a count (thousands separated) with its noun in the number
    the count takes (``plural`` where it is not the noun and an s)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def bare(piece: str) -> str:
    """A piece without its word-start mark ('▁gato' -> 'gato'); a piece that is only the mark stays as it is."""
    return piece.replace("▁", "") or piece


def quote(word: str) -> str:
    """A word or piece as the page quotes it, made literal for Markdown."""
    return f"“{md(word)}”"


def first_changed_word(before: str, after: str) -> int | None:
    """0-based index of the first word where two outputs differ; None when they are the same text."""
    a, b = before.split(), after.split()
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))  # one is the other plus more words


def word_diff(before: str, after: str) -> list[tuple[str, list[str], list[str]]]:
    """The two texts' words as difflib's opcodes: (op, before's words, after's words), op "equal" where they agree."""
    a, b = before.split(), after.split()
    return [
        (op, a[i1:i2], b[j1:j2])
        for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
    ]


def what_if_marks(own: str, alternative: str) -> str:
    """The sentence under a what-if alternative on the words its highlights mark: which of its words differ from the
    model's own translation (highlighted in green), or that none do."""
    new = [w for op, _, words in word_diff(own, alternative) if op != "equal" for w in words]
    if not new:
        return "it has the same words as the model's translation"
    return f"the words that differ from the model's translation are highlighted in green: {', '.join(map(quote, new))}"


def output_change(before: str, after: str) -> str:
    """'the same words' or 'other words from word 3 on (“guarda” → “guardei”)', from the two texts."""
    i = first_changed_word(before, after)
    if i is None:
        return "the same words"
    a, b = before.split(), after.split()
    was = quote(a[i]) if i < len(a) else "the end"
    now = quote(b[i]) if i < len(b) else "the end"
    return f"other words from word {i + 1} on ({was} → {now})"


# ---- positional encoding: which runs the page compares ----


@dataclass(frozen=True)
class PEComparison:
    """The two runs the Positional-encoding page compares and what to call them.

    as_trained: positions on both sides, every other switch as in the sidebar; switched: the sidebar's PE setting
    when it removes positions somewhere, else positions off on both sides."""

    as_trained: core.InferenceOptions
    switched: core.InferenceOptions

    @property
    def switched_label(self) -> str:
        """'without PE', 'without PE on the encoder' or 'without PE on the decoder' — read from the options."""
        src, tgt = self.switched.pe_on("src"), self.switched.pe_on("tgt")
        if not src and not tgt:
            return "without PE"
        return "without PE on the encoder" if not src else "without PE on the decoder"

    as_trained_label = "as trained (with PE)"


def pe_comparison(options: core.InferenceOptions) -> PEComparison:
    """The as-trained and the switched PE runs for ``options`` (the sidebar's)."""
    trained = options.with_changes(positional_encoding=True, encoder_pe=True, decoder_pe=True)
    if options.pe_on("src") and options.pe_on("tgt"):
        switched = trained.with_changes(positional_encoding=False)
    else:
        switched = options
    return PEComparison(as_trained=trained, switched=switched)


# ---- attention maps: did anything change? ----


def largest_change(before: Sequence[np.ndarray], after: Sequence[np.ndarray]) -> float:
    """The largest |after − before| over every layer's weights (arrays of equal shapes, one per layer)."""
    return max(
        (float(np.max(np.abs(np.asarray(b) - np.asarray(a)), initial=0.0)) for a, b in zip(before, after, strict=True)),
        default=0.0,
    )


def maps_change(before: Sequence[np.ndarray], after: Sequence[np.ndarray]) -> str:
    """One sentence on a difference grid: 'no change: ...' or 'the weights change by up to 0.42'."""
    delta = largest_change(before, after)
    if delta < SAME_WEIGHT:
        return "No change: every attention weight here is the same in both runs."
    return f"The weights change by up to {delta:.2f} (of 1) between the two runs."


def switches_effect(
    trained: core.Translation, switched: core.Translation, note: str, *, shortlist_only: bool = False
) -> str:
    """What the switches did when the words stayed the same, from both runs' attention (same text → same shapes)."""
    if shortlist_only:
        return (
            f"As trained the translation is the same: the switches ({note}) change the probabilities (over fewer "
            "words), not the words."
        )
    delta = 0.0
    for kind in trained.trace.kinds:
        if kind not in switched.trace.kinds:
            continue
        n = trained.trace.n_layers[kind]
        maps_a = [trained.trace.attention(kind, l) for l in range(n)]
        maps_b = [switched.trace.attention(kind, l) for l in range(n)]
        if all(a.shape == b.shape for a, b in zip(maps_a, maps_b, strict=True)):
            delta = max(delta, largest_change(maps_a, maps_b))
    if delta < SAME_WEIGHT:
        return (
            f"As trained the translation is the same, and so is every attention weight: the switches ({note}) "
            "change nothing in this run."
        )
    return (
        f"As trained the translation is the same: the switches ({note}) change the attention (a weight moves by up "
        f"to {delta:.2f}), not the words."
    )


# ---- the causal mask ----


def causal_off(trained_text: str, switched_text: str) -> str:
    """Why the output did or did not change with the causal mask off, from the as-trained and the switched output
    (every other switch equal)."""
    i = first_changed_word(trained_text, switched_text)
    head = (
        "With the causal mask off nothing stops a position from looking ahead — but while the translation was being "
        "written, the later words did not exist yet: step *t*'s newest piece saw only the pieces before it (grey = "
        "not written yet). "
    )
    if i is None:
        return head + (
            "Here the output is the same as with the mask: the earlier pieces, recomputed at each step, looked at "
            "later pieces of the prefix, but not enough to change a choice. "
        )
    return head + (
        f"The output still changes (from word {i + 1} on): at every step the decoder recomputes the whole prefix, "
        "and without the mask the earlier pieces of that prefix now look at the later ones, so the newest piece "
        "reads other vectors than the model was trained on. "
    )


# ---- what if ----


def empty_legend(texts: Sequence[str]) -> str | None:
    """The legend under a table of translations that shows ∅ for an empty one; None when none is empty."""
    if all(texts):
        return None
    return "∅: the model wrote nothing (it ended the sentence at its first step)."


def causal_leak_effect(p_trained: Sequence[float] | np.ndarray, p_switched: Sequence[float] | np.ndarray) -> str:
    """Under the token-by-token chart with the causal mask off: what reading the later pieces did to each piece's
    probability, counted from the two passes (fed the same as-trained translation), and why it can go down."""
    a, b = np.log(np.asarray(p_trained, dtype=np.float64)), np.log(np.asarray(p_switched, dtype=np.float64))
    lower, higher = int((b < a - 1e-6).sum()), int((b > a + 1e-6).sum())
    said = (
        f"With the causal mask off every position of this pass can also read the pieces after it, the one it must "
        f"predict included: {lower} of the {len(a)} pieces became less likely, {higher} more likely."
    )
    if lower > higher:
        return said + (
            " A model trained with the mask never learned to use what comes later (it never saw it): the extra "
            "pieces disturb its representations rather than hand it the answer."
        )
    return said + " Here the later pieces help: some of what it must predict can be read off them."


def own_choice(trace: core.Trace, own_ids: Sequence[int], step: int) -> str | None:
    """The model's own piece at ``step`` of its own translation (``own_ids``), as shown; None past its end."""
    if not 0 <= step < len(own_ids):
        return None
    return trace.piece(int(own_ids[step]))


def what_if_placeholder(own: str | None, forced: str | None) -> str:
    """The what-if picker's empty text at a step: the model's own piece there (``own``, None past its translation's
    end), and the piece this alternative forced there (``forced``, None where nothing is forced), as shown."""
    if forced is not None:
        was = f" (its own choice: “{own}”)" if own is not None else ""
        return f"forced here: “{forced}”{was} — pick another to see what follows"
    if own is not None:
        return f"its own choice: “{own}” — pick another to see what follows"
    return "pick a piece to see what follows"


# ---- word order without positions ----


@dataclass(frozen=True)
class OrderComparison:
    """Two sentences' encoder outputs matched piece by piece (same pieces, another order)."""

    largest_difference: float  # max |memory_a[i] − memory_b[match[i]]| over positions and dimensions
    scale: float  # the largest |value| in memory_a, to judge the difference against


def order_comparison(
    pieces_a: Sequence[str], memory_a: np.ndarray, pieces_b: Sequence[str], memory_b: np.ndarray
) -> OrderComparison | None:
    """Match each piece of sentence a to the same piece in sentence b (repeats in order) and compare the encoder
    outputs (T, D) there; None when the two are not the same pieces in another order."""
    if sorted(pieces_a) != sorted(pieces_b):
        return None
    free: dict[str, list[int]] = {}
    for j, piece in enumerate(pieces_b):
        free.setdefault(piece, []).append(j)
    match = [free[piece].pop(0) for piece in pieces_a]
    a = np.asarray(memory_a, dtype=np.float64)
    b = np.asarray(memory_b, dtype=np.float64)[match]
    return OrderComparison(
        largest_difference=float(np.max(np.abs(a - b), initial=0.0)), scale=float(np.max(np.abs(a), initial=0.0))
    )


def same_set(cmp: OrderComparison) -> bool:
    """Whether the two encoder outputs are the same set of vectors (up to float rounding)."""
    return cmp.largest_difference <= 1e-4 * max(cmp.scale, 1.0)


def word_order(sentences: tuple[str, str], with_pe: OrderComparison, switched: OrderComparison, label: str) -> str:
    """What the encoder makes of two sentences with the same words in another order, with and without positions."""
    a, b = (quote(s) for s in sentences)
    said = (
        f"As trained, the encoder outputs of {a} and {b}, matched piece by piece, differ by up to "
        f"{with_pe.largest_difference:.3g}"
    )
    if same_set(switched):
        return (
            f"{said}; {label} they differ by at most {switched.largest_difference:.1g}: the encoder hands the decoder "
            "the same set of vectors for both sentences (only shuffled), so nothing it writes can depend on who did "
            "what to whom."
        )
    return (
        f"{said}; {label} they still differ by up to {switched.largest_difference:.3g}: the encoder still knows "
        "the order here (its positions are on), so the two sentences can get different translations."
    )


def beam_rule(beam_size: int, policy: str, alpha: float) -> tuple[str, str]:
    """What the beam tree's caption says the search keeps, and what ranks the finished translations, for the
    finishing policy the model decoded with (``ModelConfig.beam``; ``core.decoding.beam_finish``) and its length
    penalty."""
    if alpha == 0:
        rank = "score"
    elif alpha == 1:
        rank = "score ÷ length"
    else:
        rank = f"score ÷ length^{alpha:g}"
    if policy == "transformers":
        keep = (
            f"At every step the {beam_size} best extensions that do not end the sentence stay **kept** (blue), as "
            f"transformers' generate does; one that ends it (◆ green) joins a pool of the {beam_size} best finished"
        )
    else:
        keep = (
            f"At every step the {beam_size} best extensions of the live hypotheses are **kept** (blue); one that "
            f"ends the sentence (◆ green) is finished instead and not extended; the search stops when {beam_size} "
            "have finished, none is left to extend, or at the length limit"
        )
    return keep, rank


def bias_off(stack: str, bias: np.ndarray) -> str | None:
    """The note under a stack's bias grid on the Positional-encoding page: the bias is switched off, said only when
    the trace shows 0 added to every score (None when any head added something)."""
    if np.any(bias):
        return None
    return f"The relative position bias is switched off for the {stack} in this run: 0 was added to every score."


def pe_off(label: str, added: np.ndarray) -> str | None:
    """The note under a side's PE grid: positional encoding is switched off, said only when the trace shows zeros
    added to every token (None when any position vector was added)."""
    if np.any(added):
        return None
    return f"Positional encoding is switched off for the {label} tokens in this run: zeros were added."
