"""Word alignment from cross-attention, scored by alignment error rate (AER) against hand-made gold links.

Pieces become words: a piece starting with ``▁`` starts a word and the pieces after it join it (so
punctuation stays with its word, as in the whitespace split of the text); ``</s>``, ``<s>`` and padding
belong to no word. A target word's row is the mean of its pieces' rows; a source word's column is the sum of
its pieces' columns; rows are then renormalised over the source words (the weight on ``</s>`` is dropped).

Shift-by-one: the decoder row of input position t is where output piece t was predicted. ``shift=0`` aligns
output piece t with row t (the row that predicted it); ``shift=1`` with row t+1 (the row where it was the
decoder's input), which suits some layers better — the finder tries both.

Gold files: one pair per line, ``source<TAB>target<TAB>links`` with Pharaoh links ``i-j`` (sure) and ``i?j``
(possible), 0-based word indices (words = the whitespace split of each side); ``#`` lines are comments.
AER = 1 − (|A∩S| + |A∩P|) / (|A| + |S|), with every sure link also possible (Och & Ney 2003).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..errors import InputError, not_utf8

SPECIALS = ("</s>", "<s>", "<pad>", "<unk>")
Link = tuple[int, int]  # (source word, target word)
Method = Literal["argmax", "threshold"]
THRESHOLD = 0.3  # 'threshold' keeps links of at least this share of a target word's weight on source words


def word_spans(pieces: Sequence[str]) -> list[list[int]]:
    """Indices of the pieces of each word (specials belong to none)."""
    words: list[list[int]] = []
    for i, p in enumerate(pieces):
        if p in SPECIALS:
            continue
        if p.startswith("▁") or not words:
            words.append([i])
        else:
            words[-1].append(i)
    return words


def word_matrix(
    cross: np.ndarray, src_pieces: Sequence[str], out_pieces: Sequence[str], *, shift: int = 0
) -> np.ndarray:
    """(target words, source words) alignment weights from one (Tq, Tk) cross-attention map.

    ``out_pieces`` are the output pieces (piece t predicted at row t); rows beyond the map are dropped."""
    return normalised(_pooled(cross, src_pieces, out_pieces, shift))


def pooling(
    src_pieces: Sequence[str], out_pieces: Sequence[str], shape: tuple[int, ...], *, shift: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The two matrices that turn a (Tq, Tk) cross-attention map into target × source word weights, before
    ``normalised``: rows (target words, Tq) averages each target word's rows (shifted; rows beyond the map
    dropped), cols (Tk, source words) sums each source word's pieces. Linear, so one pair's maps of every head
    pool at once (``rows @ maps @ cols``) and an average of heads pools to the average of their pooled maps."""
    if shift not in (0, 1):
        raise ValueError(f"shift is 0 or 1, got {shift}")
    n_rows, n_keys = shape[-2], shape[-1]
    if len(src_pieces) > n_keys:
        raise ValueError(f"{len(src_pieces)} source pieces for a map of {n_keys} keys")
    src_words, tgt_words = word_spans(src_pieces), word_spans(out_pieces)
    rows = np.zeros((len(tgt_words), n_rows))
    for w, pieces in enumerate(tgt_words):
        kept = [t + shift for t in pieces if t + shift < n_rows]
        if kept:
            rows[w, kept] = 1.0 / len(kept)
    cols = np.zeros((n_keys, len(src_words)))
    for w, pieces in enumerate(src_words):
        cols[pieces, w] = 1.0
    return rows, cols


def normalised(m: np.ndarray) -> np.ndarray:
    """Each row (last axis) divided by its sum, all-zero rows staying 0: a target word's row over the source words,
    a layer's rows of value zeroing (the authors' ContextMixingASR)."""
    total = m.sum(-1, keepdims=True)
    return np.divide(m, total, out=np.zeros_like(m, dtype=np.float64), where=total > 0)


def links(matrix: np.ndarray, method: Method = "argmax", threshold: float = THRESHOLD) -> set[Link]:
    """Links (source word, target word) from a (target, source) word matrix."""
    if method == "argmax":
        return {(int(matrix[j].argmax()), j) for j in range(matrix.shape[0]) if matrix[j].sum() > 0}
    if method == "threshold":
        return {(int(i), int(j)) for j, i in zip(*np.nonzero(matrix >= threshold), strict=True)}
    raise ValueError(f"method is 'argmax' or 'threshold', got {method!r}")


# ----------------------------------------------------------------------------- gold data and AER
@dataclass(frozen=True)
class GoldPair:
    source: str
    target: str
    sure: frozenset[Link]
    possible: frozenset[Link]  # includes the sure links


def parse_links(text: str, n_src: int, n_tgt: int, where: str = "") -> tuple[set[Link], set[Link]]:
    """(sure, possible ⊇ sure) from Pharaoh ``i-j`` / ``i?j`` text; InputError naming a bad link."""
    sure: set[Link] = set()
    possible: set[Link] = set()
    for item in text.split():
        sep = "-" if "-" in item else "?"
        a, _, b = item.partition(sep)
        if not (a.isdigit() and b.isdigit()):
            raise InputError(f"{where}: {item!r} is not a link 'i-j' (sure) or 'i?j' (possible)")
        link = (int(a), int(b))
        if link[0] >= n_src or link[1] >= n_tgt:
            raise InputError(f"{where}: link {item} is outside {n_src} source × {n_tgt} target words")
        (sure if sep == "-" else possible).add(link)
    return sure, possible | sure


def read_gold(path: str | Path) -> list[GoldPair]:
    """Pairs of a gold file (format in the module doc); InputError naming the line of a bad one."""
    path = Path(path)
    pairs = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(path, exc) from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 3:
            raise InputError(f"{path}:{n}: expected source<TAB>target<TAB>links, got {len(fields)} fields")
        src, tgt, text = fields
        sure, possible = parse_links(text, len(src.split()), len(tgt.split()), f"{path}:{n}")
        pairs.append(GoldPair(src, tgt, frozenset(sure), frozenset(possible)))
    return pairs


def aer(predicted: Iterable[set[Link]], gold: Iterable[GoldPair]) -> float:
    """Corpus AER of predicted link sets against gold pairs (in the same order)."""
    a_s = a_p = n_a = n_s = 0
    for pred, g in zip(predicted, gold, strict=True):
        a_s += len(pred & g.sure)
        a_p += len(pred & g.possible)
        n_a += len(pred)
        n_s += len(g.sure)
    return 1.0 - (a_s + a_p) / (n_a + n_s) if n_a + n_s else float("nan")


# ----------------------------------------------------------------------------- the alignment-head finder
@dataclass(frozen=True)
class AlignmentScores:
    """AER of every way of reading alignment off the cross-attention, on the same gold pairs."""

    head_aer: np.ndarray  # (L, H) per head, with its best shift and method
    layer_aer: np.ndarray  # (L,) each layer's heads averaged
    all_aer: float  # every cross head averaged
    best_head: tuple[int, int]  # 0-based (layer, head)
    best_k: tuple[tuple[int, int], ...]  # the heads whose average aligns best (greedy, up to K_MAX)
    best_k_aer: float
    baselines: dict[str, float]  # "last layer average", "first head of the last layer (CTranslate2's default)"
    shift: int  # the shift the figures use
    method: str
    n_pairs: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "head_aer": self.head_aer.tolist(),
            "layer_aer": self.layer_aer.tolist(),
            "all_aer": self.all_aer,
            "best_head": list(self.best_head),
            "best_k": [list(x) for x in self.best_k],
            "best_k_aer": self.best_k_aer,
            "baselines": self.baselines,
            "shift": self.shift,
            "method": self.method,
            "n_pairs": self.n_pairs,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AlignmentScores:
        return cls(
            head_aer=np.asarray(d["head_aer"], dtype=np.float64),
            layer_aer=np.asarray(d["layer_aer"], dtype=np.float64),
            all_aer=float(d["all_aer"]),
            best_head=(int(d["best_head"][0]), int(d["best_head"][1])),
            best_k=tuple((int(a), int(b)) for a, b in d["best_k"]),
            best_k_aer=float(d["best_k_aer"]),
            baselines={k: float(v) for k, v in d["baselines"].items()},
            shift=int(d["shift"]),
            method=str(d["method"]),
            n_pairs=int(d["n_pairs"]),
        )


K_MAX = 4


def _pooled(maps: np.ndarray, src: Sequence[str], out: Sequence[str], shift: int) -> np.ndarray:
    """One pair's maps of every head (..., Tq, Tk) pooled to (..., target words, source words), before
    ``normalised``."""
    rows, cols = pooling(src, out, maps.shape, shift=shift)
    return rows @ maps.astype(np.float64) @ cols


def score_heads(
    maps: Sequence[np.ndarray],
    src_pieces: Sequence[Sequence[str]],
    out_pieces: Sequence[Sequence[str]],
    gold: Sequence[GoldPair],
    *,
    method: Method = "argmax",
) -> AlignmentScores:
    """Score every cross head, layer average, the all-heads average and a greedy best-k combination.

    ``maps[n]`` is pair n's cross-attention, (L, H, Tq, Tk); its pieces must make the gold pair's words
    (InputError naming the pair otherwise). The shift (0 or 1) that gives the lower all-heads AER is used."""
    for n, (s, o, g) in enumerate(zip(src_pieces, out_pieces, gold, strict=True)):
        if len(word_spans(s)) != len(g.source.split()) or len(word_spans(o)) != len(g.target.split()):
            raise InputError(
                f"gold pair {n + 1}: its words ({len(g.source.split())} → {len(g.target.split())}) are not the "
                f"model's pieces merged into words ({len(word_spans(s))} → {len(word_spans(o))})"
            )

    pooled = {  # shift -> each pair's (L, H, target words, source words) weights before normalising, every head
        sh: [_pooled(m, src, out, sh) for m, src, out in zip(maps, src_pieces, out_pieces, strict=True)]
        for sh in (0, 1)
    }

    def corpus_aer(combine: Callable[[np.ndarray], np.ndarray], shift: int) -> float:
        return aer([links(normalised(combine(p)), method) for p in pooled[shift]], gold)

    shift = min((0, 1), key=lambda sh: corpus_aer(lambda m: m.mean((0, 1)), sh))
    n_layers, n_heads = maps[0].shape[:2]

    def one_head(layer: int, head: int) -> Callable[[np.ndarray], np.ndarray]:
        return lambda m: m[layer, head]

    def one_layer(layer: int) -> Callable[[np.ndarray], np.ndarray]:
        return lambda m: m[layer].mean(0)

    head_aer = np.array(
        [[corpus_aer(one_head(layer, head), shift) for head in range(n_heads)] for layer in range(n_layers)]
    )
    layer_aer = np.array([corpus_aer(one_layer(layer), shift) for layer in range(n_layers)])

    def combo_aer(heads: Sequence[tuple[int, int]]) -> float:
        idx = tuple(np.array(heads).T)
        return corpus_aer(lambda m: m[idx].mean(0), shift)

    best_head = tuple(int(x) for x in np.unravel_index(np.nanargmin(head_aer), head_aer.shape))
    chosen: list[tuple[int, int]] = [best_head]  # type: ignore[list-item]
    best_k_aer = float(head_aer[best_head])
    candidates = list(itertools.product(range(n_layers), range(n_heads)))
    while len(chosen) < K_MAX:
        trial = [(combo_aer([*chosen, c]), c) for c in candidates if c not in chosen]
        if not trial:
            break
        value, pick = min(trial)
        if value >= best_k_aer:
            break
        chosen.append(pick)
        best_k_aer = value
    return AlignmentScores(
        head_aer=head_aer,
        layer_aer=layer_aer,
        all_aer=corpus_aer(lambda m: m.mean((0, 1)), shift),
        best_head=best_head,  # type: ignore[arg-type]
        best_k=tuple(chosen),
        best_k_aer=best_k_aer,
        baselines={
            "last layer average": float(layer_aer[-1]),
            "first head of the last layer (CTranslate2's default)": float(head_aer[-1, 0]),
        },
        shift=shift,
        method=method,
        n_pairs=len(gold),
    )
