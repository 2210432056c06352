"""Sentences the Compare page states about two runs, each computed from the runs (``core.analysis.compare``).

One function per claim, a test for each branch (tests/viz_app/test_claims_compare.py). Pure: no Streamlit, no
model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core.analysis.compare import Comparison, KindChange
from viz_app.claims import bare, counted, first_changed_word, first_upper, md, quote

# a head whose matched rows moved less than this (total variation) is said not to have changed: the student's encoder,
# a float16 copy of its teacher's, moves the teacher's encoder attention by at most 4.5e-4 to 4.8e-4 (three sentences,
# distilled-en-pt against bergamot-en-pt, measured), and the page prints three decimals
CHANGED = 1e-3


def outputs_note(a: str, b: str) -> str:
    """Where the two translations part, word by word."""
    first = first_changed_word(a, b)
    if first is None:  # the same words (perhaps spaced otherwise)
        return "Both runs write the same translation."
    wa, wb = a.split(), b.split()
    x = quote(wa[first]) if first < len(wa) else "nothing more"
    y = quote(wb[first]) if first < len(wb) else "nothing more"
    return f"The translations part at word {first + 1}: {x} in A, {y} in B."


def kind_note(change: KindChange, name: str) -> str:
    """How many of one kind's heads changed, and the most changed."""
    finite = [(float(v), layer, head) for (layer, head), v in _cells(change) if v == v]
    n = change.change.size
    if not finite:
        return f"{name}: no piece is shared by both runs, so no head can be compared."
    moved = [c for c in finite if c[0] >= CHANGED]
    if not moved:
        return f"{name}: no head changed (every matched row moved less than {CHANGED:g})."
    top, layer, head = max(moved)
    share = "every one of the" if len(moved) == n else f"{len(moved)} of the"
    return (
        f"{name}: {share} {n} heads changed (by {CHANGED:g} or more); most of all layer {layer + 1} head {head + 1} "
        f"({top:.3f})."
    )


def _cells(change: KindChange) -> list[tuple[tuple[int, int], float]]:
    n_layers, n_heads = change.change.shape
    return [((layer, head), float(change.change[layer, head])) for layer in range(n_layers) for head in range(n_heads)]


def unmatched_note(change: KindChange, name: str) -> str | None:
    """The pieces of either run that had no counterpart and were left out of the measure (None: all matched)."""
    if change.matched_all:
        return None
    parts = []
    for what, (left_a, left_b) in (("queries", change.unmatched_queries), ("keys", change.unmatched_keys)):
        sides = [f"{run}'s {_pieces(left)}" for run, left in (("A", left_a), ("B", left_b)) if left]
        if sides:
            parts.append(f"as {what}, {' and '.join(sides)}")
    return (
        f"{name}: compared over the {change.rows} query and {change.keys} key pieces both runs share; left out, "
        + "; ".join(parts)
        + "."
    )


def _pieces(pieces: Sequence[str]) -> str:
    shown = ", ".join(quote(bare(p)) for p in pieces[:6])
    return shown + (f" and {len(pieces) - 6} more" if len(pieces) > 6 else "")


def counterpart_note(found: Comparison, names: Mapping[str, str], a_model: str, b_model: str) -> str | None:
    """The attention kinds only one run's model has (an SSRU decoder has no self-attention), said plainly."""
    parts = []
    for kind in sorted(set(found.only_a) | set(found.only_b)):
        if kind in found.only_a and kind in found.only_b:
            parts.append(
                f"{names[kind]}: the two models' layers or heads differ in number, so no head has a counterpart"
            )
        else:
            has, lacks = (a_model, b_model) if kind in found.only_a else (b_model, a_model)
            parts.append(
                f"{first_upper(names[kind])}: only {md(has)} has it ({md(lacks)} has none), so it has no counterpart"
            )
    return "; ".join(parts) + "." if parts else None


def ranked_title(changes: Sequence[float]) -> str:
    """The heading over the table of the heads that changed most (``changes``, most first): said as it is when
    they changed by less than ``CHANGED``."""
    n, still = len(changes), sum(c < CHANGED for c in changes)
    if still == n:
        return f"{counted(n, 'head')}, none changed (each by less than {CHANGED:g})"
    if still:
        return f"The {n} heads that changed most ({still} of them by less than {CHANGED:g})"
    return f"The {n} heads that changed most"


def share_note(a: float, b: float) -> str:
    """The two runs' mean source shares (ALTI+), compared."""
    if f"{a:.3f}" == f"{b:.3f}":  # the same as printed
        return f"Both translations draw as much on the source: a mean source share of {a:.3f}."
    more = "A" if a > b else "B"
    return f"Mean source share: A {a:.3f}, B {b:.3f} — {more}'s translation draws more on the source."


def attribution_note(piece_a: str, top_a: str, piece_b: str, top_b: str) -> str:
    """Which source piece the first differing output piece of each run is most attributed to."""
    return (
        f"A's {quote(bare(piece_a))} owes most to the source piece {quote(bare(top_a))}; "
        f"B's {quote(bare(piece_b))} to {quote(bare(top_b))} (integrated gradients)."
    )
