"""What each head does: attention statistics per head and automatic labels with their evidence.

For every head of every attention kind, on one sentence or summed over many (each query row counts once):

- ``entropy``: the row's entropy divided by log(keys it may see), 0 = all on one key, 1 = uniform.
- ``distance``: mean |query position − key position| weighted by attention, in tokens. For cross-attention
  the query position is scaled onto the source (row i of Tq ↔ i·(Tk−1)/(Tq−1)): 0 = on the diagonal.
- ``diagonal``: weight on the key at the query's own position (cross: the nearest scaled-diagonal key).
- ``previous`` / ``next``: weight on the key one before / after the query (self-attention only; rows
  that have no such key, or may not see it, are left out — the causal decoder has no ``next``).
- ``eos``: weight on ``</s>`` keys; ``first``: on key 0 (``<s>`` in the decoder); ``punctuation``: on keys
  that are only punctuation.

A statistic is the mean over the rows where it is defined; NaN where no row defines it. Rows that may see
only one key (the causal decoder's first row) define none: their attention is not a choice.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import AttentionKind
from ..recording.trace import Trace
from ..sites import analysis_site

STATS = ("entropy", "distance", "diagonal", "previous", "next", "eos", "first", "punctuation")
STAT_TITLES = {
    "entropy": "entropy (0 = one key, 1 = uniform)",
    "distance": "mean distance to the diagonal (tokens)",
    "diagonal": "weight on the own position",
    "previous": "weight on the previous token",
    "next": "weight on the next token",
    "eos": "weight on </s>",
    "first": "weight on the first token",
    "punctuation": "weight on punctuation",
}
# The label rules: (label, statistic, threshold, kinds it applies to). A head gets every label whose
# statistic reaches the threshold (on the statistic's mean over the rows that define it).
LABEL_RULES: tuple[tuple[str, str, float, tuple[str, ...]], ...] = (
    ("previous-token", "previous", 0.5, ("encoder", "decoder")),
    ("next-token", "next", 0.5, ("encoder",)),
    ("self/diagonal", "diagonal", 0.5, ("encoder", "decoder")),
    ("EOS sink", "eos", 0.5, ("encoder", "decoder", "cross")),
    ("first-token sink", "first", 0.5, ("encoder", "decoder", "cross")),
    ("punctuation", "punctuation", 0.5, ("encoder", "decoder", "cross")),
    ("broad/uniform", "entropy", 0.85, ("encoder", "decoder", "cross")),
)
ALIGNMENT_AER = 0.3  # a cross head whose alignment error rate on gold data is at most this is an alignment head


def is_punctuation(piece: str) -> bool:
    text = piece.replace("▁", "")
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


@dataclass(frozen=True)
class HeadLabel:
    kind: AttentionKind
    layer: int  # 0-based
    head: int  # 0-based
    label: str
    evidence: str  # e.g. "previous 0.83 ≥ 0.5 over 412 rows"


@dataclass(frozen=True)
class HeadStatistics:
    """Per kind and statistic, the (layers, heads) sums and the number of rows that define it."""

    sums: Mapping[str, Mapping[str, np.ndarray]]  # kind -> stat -> (L, H)
    rows: Mapping[str, Mapping[str, int]]  # kind -> stat -> rows summed
    n_sentences: int = 1
    alignment_aer: Mapping[str, np.ndarray] = field(default_factory=dict)  # "cross" -> (L, H) AER, when scored

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self.sums)

    def mean(self, kind: str, stat: str) -> np.ndarray:
        """(L, H) mean of ``stat`` over the rows that define it (NaN where none does)."""
        n = self.rows[kind][stat]
        s = self.sums[kind][stat]
        return s / n if n else np.full_like(s, np.nan)

    def __add__(self, other: HeadStatistics) -> HeadStatistics:
        if set(self.sums) != set(other.sums):
            raise ValueError("statistics of different models cannot be added")
        return HeadStatistics(
            sums={k: {s: self.sums[k][s] + other.sums[k][s] for s in STATS} for k in self.sums},
            rows={k: {s: self.rows[k][s] + other.rows[k][s] for s in STATS} for k in self.rows},
            n_sentences=self.n_sentences + other.n_sentences,
        )

    def with_alignment(self, aer: np.ndarray) -> HeadStatistics:
        """The same statistics with each cross head's alignment error rate (L, H) on gold data."""
        return HeadStatistics(self.sums, self.rows, self.n_sentences, {"cross": np.asarray(aer, dtype=np.float64)})

    def labels(self) -> list[HeadLabel]:
        out = []
        for kind in self.kinds:
            for label, stat, threshold, kinds in LABEL_RULES:
                if kind not in kinds:
                    continue
                values = self.mean(kind, stat)
                for layer, head in zip(*np.nonzero(np.nan_to_num(values, nan=-1.0) >= threshold), strict=True):
                    v = float(values[layer, head])
                    evidence = f"{stat} {v:.2f} ≥ {threshold} over {self.rows[kind][stat]} rows"
                    out.append(HeadLabel(kind, int(layer), int(head), label, evidence))  # type: ignore[arg-type]
        aer = self.alignment_aer.get("cross")
        if aer is not None and "cross" in self.sums:
            for layer, head in zip(*np.nonzero(np.nan_to_num(aer, nan=2.0) <= ALIGNMENT_AER), strict=True):
                v = float(aer[layer, head])
                out.append(
                    HeadLabel("cross", int(layer), int(head), "alignment", f"AER {v:.2f} ≤ {ALIGNMENT_AER} on gold")
                )
        return sorted(out, key=lambda x: (x.kind, x.layer, x.head, x.label))

    def table(self) -> list[dict[str, Any]]:
        """One row per head: kind, layer and head (1-based), every statistic, labels and their evidence."""
        labels: dict[tuple[str, int, int], list[HeadLabel]] = {}
        for x in self.labels():
            labels.setdefault((x.kind, x.layer, x.head), []).append(x)
        rows = []
        for kind in self.kinds:
            n_layers, n_heads = self.sums[kind][STATS[0]].shape
            for layer in range(n_layers):
                for head in range(n_heads):
                    row: dict[str, Any] = {"kind": kind, "layer": layer + 1, "head": head + 1}
                    for stat in STATS:
                        v = float(self.mean(kind, stat)[layer, head])
                        row[stat] = None if np.isnan(v) else round(v, 4)
                    if kind in self.alignment_aer:
                        row["alignment AER"] = round(float(self.alignment_aer[kind][layer, head]), 4)
                    found = labels.get((kind, layer, head), [])
                    row["labels"] = ", ".join(x.label for x in found)
                    row["evidence"] = "; ".join(x.evidence for x in found)
                    rows.append(row)
        return rows

    # ----------------------------------------------------------------- JSON / trace arrays
    def to_dict(self) -> dict[str, Any]:
        return {
            "n_sentences": self.n_sentences,
            "sums": {k: {s: v.tolist() for s, v in d.items()} for k, d in self.sums.items()},
            "rows": {k: dict(d) for k, d in self.rows.items()},
            "alignment_aer": {k: v.tolist() for k, v in self.alignment_aer.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HeadStatistics:
        return cls(
            sums={k: {s: np.asarray(v, dtype=np.float64) for s, v in d.items()} for k, d in data["sums"].items()},
            rows={k: {s: int(n) for s, n in d.items()} for k, d in data["rows"].items()},
            n_sentences=int(data["n_sentences"]),
            alignment_aer={k: np.asarray(v, dtype=np.float64) for k, v in data.get("alignment_aer", {}).items()},
        )

    def to_arrays(self, name: str = "head_stats") -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """``analysis.<name>.<kind>.<stat>`` (L, H) means for ``Trace.with_analysis``, and the details."""
        arrays = {analysis_site(name, k, s): self.mean(k, s) for k in self.kinds for s in STATS}
        return arrays, {name: {**self.to_dict(), "labels": [vars(x) for x in self.labels()]}}

    @classmethod
    def from_trace(cls, trace: Trace, name: str = "head_stats") -> HeadStatistics | None:
        details = trace.meta.get("analysis", {}).get(name)
        return None if details is None else cls.from_dict(details)


def kind_statistics(
    maps: Sequence[np.ndarray], allowed: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], kind: str
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Sums over rows of one kind's maps [(H, Tq, Tk) per layer] and the rows each statistic counted."""
    n_layers, (n_heads, tq, tk) = len(maps), maps[0].shape
    a = np.stack(maps).astype(np.float64)  # (L, H, Tq, Tk)
    allowed = allowed.astype(bool)  # (Tq, Tk)
    n_allowed = allowed.sum(-1)  # (Tq,)
    sums: dict[str, np.ndarray] = {}
    rows: dict[str, int] = {}

    def add(stat: str, per_row: np.ndarray, valid: np.ndarray) -> None:  # per_row (L, H, Tq), valid (Tq,)
        sums[stat] = per_row[..., valid].sum(-1)
        rows[stat] = int(valid.sum())

    choice = n_allowed >= 2  # a row that may see one key only (the causal decoder's first) says nothing
    ent = -(a * np.log(np.clip(a, 1e-12, None))).sum(-1)  # (L, H, Tq)
    add("entropy", ent / np.log(np.maximum(n_allowed, 2)), choice)
    qi = np.arange(tq, dtype=np.float64)
    if kind == "cross":
        qi = qi * (tk - 1) / max(tq - 1, 1)
    kj = np.arange(tk)
    add("distance", (a * np.abs(qi[:, None] - kj[None, :])).sum(-1), choice)
    diag = np.clip(np.rint(qi).astype(int), 0, tk - 1)
    add("diagonal", a[..., np.arange(tq), diag], choice & allowed[np.arange(tq), diag])
    if kind == "cross":
        for stat in ("previous", "next"):
            sums[stat], rows[stat] = np.zeros((n_layers, n_heads)), 0
    else:
        i = np.arange(tq)
        prev, nxt = i - 1, i + 1
        ok_prev = choice & (prev >= 0) & allowed[i, np.clip(prev, 0, tk - 1)]
        ok_next = choice & (nxt < tk) & allowed[i, np.clip(nxt, 0, tk - 1)]
        add("previous", a[..., i, np.clip(prev, 0, tk - 1)], ok_prev)
        add("next", a[..., i, np.clip(nxt, 0, tk - 1)], ok_next)
    eos = np.array([t == "</s>" for t in k_tokens])
    punct = np.array([is_punctuation(t) for t in k_tokens])
    add("eos", a[..., eos].sum(-1) if eos.any() else np.zeros(a.shape[:3]), choice)
    add("first", a[..., 0], choice)
    add("punctuation", a[..., punct].sum(-1) if punct.any() else np.zeros(a.shape[:3]), choice)
    return sums, rows


def kind_tokens(trace: Trace, kind: AttentionKind) -> tuple[list[str], list[str]]:
    """(query pieces, key pieces) of ``kind``'s maps in ``trace``: encoder = source × source, decoder = decoder
    inputs × decoder inputs, cross = decoder inputs × source."""
    src, tgt = trace.src_tokens, trace.tgt_tokens
    return {"encoder": (src, src), "decoder": (tgt, tgt), "cross": (tgt, src)}[kind]


def sentence_statistics(trace: Trace) -> HeadStatistics:
    """The statistics of one traced sentence (a translation or a teacher-forced pass, batch of one)."""
    sums: dict[str, dict[str, np.ndarray]] = {}
    rows: dict[str, dict[str, int]] = {}
    for kind in trace.kinds:
        maps = [trace.attention(kind, layer) for layer in range(trace.n_layers[kind])]
        q_tokens, k_tokens = kind_tokens(trace, kind)
        sums[kind], rows[kind] = kind_statistics(maps, trace.mask(kind), q_tokens, k_tokens, kind)
    return HeadStatistics(sums=sums, rows=rows)


def total(stats: Iterable[HeadStatistics]) -> HeadStatistics:
    """Many sentences' statistics as one (each query row weighs the same)."""
    it = iter(stats)
    try:
        out = next(it)
    except StopIteration:
        raise ValueError("no statistics to add") from None
    for s in it:
        out = out + s
    return out
