"""How each head behaves across many sentences, not only on the whole set's average: the per-sentence values of
its statistics (``heads.STATS``), its cross-attention's agreement with ALTI+, and how often a set label holds.

A head's label on "What does each head do?" comes from its statistic's mean over every row of a set of sentences
(``HeadStatistics.labels``); one sentence can suggest a role the head does not keep (HeadVis, 2026, found this
common). ``HeadSpread`` keeps each sentence's own (L, H) means, so a page can draw their distribution, and
``stability`` says on what share of the sentences the set label's rule holds on that sentence alone: below
``STABLE`` the label is marked unsteady.

``alti`` (cross-attention only) is each head's agreement with ALTI+ on a sentence: the Pearson correlation of the
head's cross-attention map (output rows × source pieces) with the ALTI+ source contributions of the same rows
(``Contributions.source_matrix``, each row rescaled to sum to 1): 1 = the head attends where the source
contributions are, 0 = unrelated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .alignment import normalised
from .heads import LABEL_RULES, STATS, HeadStatistics

STABLE = 0.5  # a set label that holds on fewer than this share of the sentences is marked unsteady
SPREAD_STATS = (*STATS, "alti")
QUANTILES = (25, 50, 75)


@dataclass(frozen=True)
class LabelStability:
    """How often a head's set label holds sentence by sentence: on ``holds`` of the ``defined`` sentences whose
    rows define the label's statistic."""

    kind: str
    layer: int  # 0-based
    head: int  # 0-based
    label: str
    holds: int
    defined: int

    @property
    def share(self) -> float:
        return self.holds / self.defined if self.defined else float("nan")

    @property
    def steady(self) -> bool:
        return bool(self.defined) and self.share >= STABLE


@dataclass(frozen=True)
class HeadSpread:
    """Per kind and statistic, each sentence's (L, H) means: ``values[kind][stat]`` is (N, L, H), NaN where the
    sentence defines none (``alti``: cross-attention only)."""

    values: Mapping[str, Mapping[str, np.ndarray]]

    @property
    def n_sentences(self) -> int:
        first = next(iter(self.values.values()))
        return int(next(iter(first.values())).shape[0])

    def quantiles(self, kind: str, stat: str) -> np.ndarray:
        """(3, L, H): the 25th, 50th and 75th percentiles over the sentences that define the statistic (NaN for
        a head no sentence defines)."""
        v = self.values[kind][stat]
        out = np.full((len(QUANTILES), *v.shape[1:]), np.nan)
        defined = ~np.isnan(v)
        for layer, head in zip(*np.nonzero(defined.any(0)), strict=True):
            out[:, layer, head] = np.percentile(v[defined[:, layer, head], layer, head], QUANTILES)
        return out

    def stability(self, stats: HeadStatistics) -> list[LabelStability]:
        """Each label ``stats`` gives (its rules on the set's means), with how many sentences it holds on alone.
        (The alignment label is scored on gold pairs, not per sentence: not listed.)"""
        rules = {label: (stat, threshold) for label, stat, threshold, _ in LABEL_RULES}  # one rule per label
        out = []
        for x in stats.labels():
            rule = rules.get(x.label)
            if rule is None or x.kind not in self.values:
                continue
            stat, threshold = rule
            per_sentence = self.values[x.kind][stat][:, x.layer, x.head]
            defined = ~np.isnan(per_sentence)
            holds = int((per_sentence[defined] >= threshold).sum())
            out.append(LabelStability(x.kind, x.layer, x.head, x.label, holds, int(defined.sum())))
        return out

    def save(self, path: Path) -> None:
        arrays: dict[str, Any] = {f"{k}.{s}": v for k, d in self.values.items() for s, v in d.items()}
        np.savez_compressed(path, **arrays)

    @classmethod
    def load(cls, path: Path) -> HeadSpread:
        values: dict[str, dict[str, np.ndarray]] = {}
        with np.load(path) as data:
            for name in data.files:
                kind, stat = name.split(".")
                values.setdefault(kind, {})[stat] = data[name]
        return cls(values)


def sentence_means(stats: HeadStatistics) -> dict[str, dict[str, np.ndarray]]:
    """One sentence's (L, H) mean of every statistic (NaN where its rows define none)."""
    return {kind: {stat: stats.mean(kind, stat) for stat in STATS} for kind in stats.kinds}


def alti_agreement(cross_maps: Sequence[np.ndarray], source_matrix: np.ndarray) -> np.ndarray:
    """(L, H) Pearson correlation of each cross head's map [(H, T, S) per layer] with ALTI+'s source contributions
    (T, S), each row rescaled to sum to 1; NaN where either is constant."""
    alti = normalised(source_matrix)
    b = alti.ravel() - alti.mean()
    maps = np.stack(cross_maps).astype(np.float64)  # (L, H, T, S)
    a = maps.reshape(*maps.shape[:2], -1)
    a = a - a.mean(-1, keepdims=True)
    denominator = np.linalg.norm(a, axis=-1) * np.linalg.norm(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, (a @ b) / denominator, np.nan)


def spread(per_sentence: Sequence[Mapping[str, Mapping[str, np.ndarray]]]) -> HeadSpread:
    """The ``HeadSpread`` of sentences' means (``sentence_means``, with ``cross``'s ``alti`` where measured)."""
    if not per_sentence:
        raise ValueError("no sentences to spread")
    values: dict[str, dict[str, np.ndarray]] = {}
    for kind, first in per_sentence[0].items():
        shape = next(iter(first.values())).shape
        values[kind] = {}
        for stat in SPREAD_STATS:
            if stat == "alti" and kind != "cross":
                continue
            values[kind][stat] = np.stack([s[kind].get(stat, np.full(shape, np.nan)) for s in per_sentence])
    return HeadSpread(values)
