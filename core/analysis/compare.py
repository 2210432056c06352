"""Two runs side by side (the Compare page, issue 46): what changed between run A and run B, head by head.

Two runs may differ in their sentence (a minimal pair), their model (a student and its teacher) or their switches.
Their attention maps are compared where their pieces can be matched: the queries and the keys of each kind are
paired by ``match`` (the longest common runs of equal pieces, ``difflib``; the identity when the pieces are the
same), and each head's change is the **mean total-variation distance** between its matched rows, each row taken
over the matched keys only and rescaled to sum to 1: 0 = the same distribution, 1 = disjoint. What cannot be
matched (a changed word's pieces, an extra output piece) is counted and named, never dropped silently; a kind that
one run's model does not have (an SSRU decoder has no self-attention) is named as having no counterpart. (The
outputs' word difference is the app's to show.)

Pure functions of two ``Trace``s: no model is run here.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..recording.trace import Trace
from ..sites import ATTENTION_KINDS, AttentionKind
from .heads import kind_tokens

MEASURE = "mean total-variation distance between matched attention rows"
MEASURE_NOTE = (
    "for each head, each query piece the two runs share is compared over the key pieces they share (each row "
    "rescaled to sum to 1): half the summed absolute difference, 0 = the same attention, 1 = none in common; "
    "the mean over those rows"
)


def match(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int]]:
    """Index pairs (i in ``a``, j in ``b``) of the pieces the two sequences share, in order: every position when they
    are equal, else the matching blocks ``difflib.SequenceMatcher`` finds (no junk heuristics)."""
    if list(a) == list(b):
        return [(i, i) for i in range(len(a))]
    blocks = difflib.SequenceMatcher(a=list(a), b=list(b), autojunk=False).get_matching_blocks()
    return [(block.a + k, block.b + k) for block in blocks for k in range(block.size)]


@dataclass(frozen=True)
class KindChange:
    """One attention kind's change: ``change`` (L, H) the measure per head, over ``rows`` matched query pieces and
    ``keys`` matched key pieces; the pieces of A and of B left unmatched, as queries and as keys."""

    kind: AttentionKind
    change: np.ndarray  # (L, H)
    rows: int
    keys: int
    unmatched_queries: tuple[tuple[str, ...], tuple[str, ...]]  # (A's, B's)
    unmatched_keys: tuple[tuple[str, ...], tuple[str, ...]]

    @property
    def matched_all(self) -> bool:
        return not any(self.unmatched_queries + self.unmatched_keys)


@dataclass(frozen=True)
class Comparison:
    """Every kind both runs have, and the kinds only one has (``only_a``, ``only_b``)."""

    kinds: dict[str, KindChange]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]

    def ranked(self, n: int | None = None) -> list[tuple[str, int, int, float]]:
        """(kind, layer, head, change) of every compared head (0-based), most changed first (ties: kind, layer,
        head order)."""
        rows = [
            (kind, layer, head, float(c.change[layer, head]))
            for kind, c in self.kinds.items()
            for layer in range(c.change.shape[0])
            for head in range(c.change.shape[1])
            if np.isfinite(c.change[layer, head])
        ]
        rows.sort(key=lambda r: -r[3])
        return rows[:n] if n is not None else rows


def total_variation(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Half the L1 distance between rows of ``a`` and ``b`` (..., K), each rescaled to sum to 1 first (a row with no
    weight left on the matched keys is NaN)."""
    sa, sb = a.sum(-1, keepdims=True), b.sum(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        pa = np.where(sa > 0, a / sa, np.nan)
        pb = np.where(sb > 0, b / sb, np.nan)
    return 0.5 * np.abs(pa - pb).sum(-1)


def kind_change(a: Trace, b: Trace, kind: AttentionKind) -> KindChange:
    """``KindChange`` of one kind both traces have (the same layers × heads shape; ValueError otherwise)."""
    if (a.n_layers[kind], a.n_heads) != (b.n_layers[kind], b.n_heads):
        raise ValueError(
            f"{kind}: {a.n_layers[kind]} layers × {a.n_heads} heads against {b.n_layers[kind]} × {b.n_heads}"
        )
    (qa, ka), (qb, kb) = kind_tokens(a, kind), kind_tokens(b, kind)
    rows, keys = match(qa, qb), match(ka, kb)
    change = np.full((a.n_layers[kind], a.n_heads), np.nan)
    if rows and keys:
        for layer in range(a.n_layers[kind]):
            change[layer] = np.nanmean(total_variation(*_shared(a, b, kind, layer, rows, keys)), axis=-1)
    return KindChange(
        kind,
        change,
        len(rows),
        len(keys),
        (_left(qa, {i for i, _ in rows}), _left(qb, {j for _, j in rows})),
        (_left(ka, {i for i, _ in keys}), _left(kb, {j for _, j in keys})),
    )


def _shared(
    a: Trace,
    b: Trace,
    kind: AttentionKind,
    layer: int,
    rows: Sequence[tuple[int, int]],
    keys: Sequence[tuple[int, int]],
) -> tuple[np.ndarray, np.ndarray]:
    """Layer ``layer``'s maps of ``kind`` in A and in B (H, R, K) over the matched query ``rows`` and ``keys``."""
    ma = np.asarray(a.attention(kind, layer), dtype=np.float64)[:, [i for i, _ in rows]][:, :, [i for i, _ in keys]]
    mb = np.asarray(b.attention(kind, layer), dtype=np.float64)[:, [j for _, j in rows]][:, :, [j for _, j in keys]]
    return ma, mb


def shared_maps(
    a: Trace, b: Trace, kind: AttentionKind, layer: int
) -> tuple[np.ndarray, np.ndarray, list[str], list[str]] | None:
    """Layer ``layer``'s maps of ``kind`` in A and in B (H, R, K) over the query and key pieces both runs share
    (``match``, as ``kind_change`` compares them), and those pieces as A has them; None when no query or no key
    piece is shared."""
    (qa, ka), (qb, kb) = kind_tokens(a, kind), kind_tokens(b, kind)
    rows, keys = match(qa, qb), match(ka, kb)
    if not (rows and keys):
        return None
    return *_shared(a, b, kind, layer, rows, keys), [qa[i] for i, _ in rows], [ka[i] for i, _ in keys]


def _left(pieces: Sequence[str], used: set[int]) -> tuple[str, ...]:
    return tuple(p for i, p in enumerate(pieces) if i not in used)


def compare(a: Trace, b: Trace) -> Comparison:
    """Every attention kind of the two traces: compared where both have it with the same shape, else named."""
    kinds: dict[str, KindChange] = {}
    only_a, only_b = [], []
    for kind in ATTENTION_KINDS:
        in_a, in_b = kind in a.kinds, kind in b.kinds
        if in_a and in_b and (a.n_layers[kind], a.n_heads) == (b.n_layers[kind], b.n_heads):
            kinds[kind] = kind_change(a, b, kind)
        elif in_a and not in_b:
            only_a.append(kind)
        elif in_b and not in_a:
            only_b.append(kind)
        elif in_a and in_b:  # both, of other shapes: no head has a counterpart
            only_a.append(kind)
            only_b.append(kind)
    return Comparison(kinds, tuple(only_a), tuple(only_b))
