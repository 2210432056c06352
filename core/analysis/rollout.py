"""Attention rollout (Abnar & Zuidema, 2020) through the encoder, and on through the decoder and cross-attention.

Each attention layer mixes positions; the residual connection keeps each position's own content. Rollout
models a layer as ``0.5 * A + 0.5 * I`` (A: the layer's attention with its heads fused by mean, max or min,
rows renormalised) and multiplies the layers: row i of the result says how much of position i's final
representation traces back to each input position — if information moved only along attention. It ignores
the values, the feed-forward layers and the norms, so it is a picture of where attention routes, not proof of
what the model used (compare ``core.analysis.importance``).

For an encoder-decoder model every decoder position's representation is tracked as a mix of source positions
(through cross-attention, after the encoder's own rollout) and target-prefix positions (through decoder
self-attention). Each decoder layer: self-attention mixes target positions (``0.5 A + 0.5 I``); cross-attention
then adds source content: ``state = 0.5 * state + 0.5 * [C @ R_enc | 0]``. Rows of ``[source | target]`` sum to 1.
An SSRU decoder has no self-attention: its recurrence is treated as the identity (said in ``notes``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ..recording.trace import Trace
from ..sites import keep_site

Fusion = Literal["mean", "max", "min"]
FUSIONS: tuple[Fusion, ...] = ("mean", "max", "min")


def fuse_heads(weights: np.ndarray, fusion: Fusion = "mean") -> np.ndarray:
    """(H, Tq, Tk) -> (Tq, Tk): heads fused, rows renormalised (a row that is all 0 stays 0)."""
    if fusion not in FUSIONS:
        raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
    fused = {"mean": weights.mean(0), "max": weights.max(0), "min": weights.min(0)}[fusion].astype(np.float64)
    total = fused.sum(-1, keepdims=True)
    return np.divide(fused, total, out=np.zeros_like(fused), where=total > 0)


def with_residual(attention: np.ndarray) -> np.ndarray:
    """0.5 A + 0.5 I on a square (T, T) matrix, rows renormalised."""
    mixed = 0.5 * attention + 0.5 * np.eye(attention.shape[0])
    return mixed / mixed.sum(-1, keepdims=True)


def rollout(layers: list[np.ndarray]) -> np.ndarray:
    """Rollout of square per-layer attention matrices (T, T), first layer first: Â_L ··· Â_1 with Â = 0.5 A + 0.5 I."""
    if not layers:
        raise ValueError("rollout needs at least one layer")
    out = np.eye(layers[0].shape[0])
    for attention in layers:
        out = with_residual(attention) @ out
    return out


@dataclass(frozen=True)
class Rollout:
    """Rollout of one traced translation."""

    fusion: Fusion
    encoder: np.ndarray  # (Ts, Ts): each source position's final representation over source inputs
    source: np.ndarray  # (Tt, Ts): each decoder position's share coming from each source input
    target: np.ndarray  # (Tt, Tt): ... and from each decoder input (the target prefix)
    notes: tuple[str, ...] = field(default=())

    def per_output(self) -> np.ndarray:
        """(Tt, Ts) the source part of each output token's row, renormalised to sum to 1."""
        total = self.source.sum(-1, keepdims=True)
        return np.divide(self.source, total, out=np.zeros_like(self.source), where=total > 0)


def trace_rollout(trace: Trace, fusion: Fusion = "mean") -> Rollout:
    """Rollout of ``trace`` (one batch item, ``trace.item``): encoder, then decoder self- and cross-attention."""
    keep = trace[keep_site("src")].astype(bool)  # padded source positions take no part
    enc_layers = [fuse_heads(trace.attention("encoder", layer), fusion) for layer in range(trace.n_layers["encoder"])]
    encoder = rollout(enc_layers)
    encoder[:, ~keep] = 0.0
    n_dec = trace.shape.n_decoder_layers
    cross = [fuse_heads(trace.attention("cross", layer), fusion) for layer in range(n_dec)]
    Tt, Ts = cross[0].shape
    source = np.zeros((Tt, Ts))
    target = np.eye(Tt)
    notes: list[str] = []
    has_self = "decoder" in trace.kinds
    if not has_self:
        notes.append(
            "This decoder reads the target with an SSRU (a recurrence), not attention: rollout treats it as "
            "the identity, so the target-prefix share is only what each position keeps of itself."
        )
    for layer in range(n_dec):
        if has_self:
            mix = with_residual(fuse_heads(trace.attention("decoder", layer), fusion))  # (Tt, Tt)
            source, target = mix @ source, mix @ target
        source = 0.5 * source + 0.5 * (cross[layer] @ encoder)
        target = 0.5 * target
    return Rollout(fusion, encoder, source, target, tuple(notes))


# ---- attention sinks: special tokens that soak up rollout's mass ----

SINK_SHARE = 0.2  # special tokens holding this much of the average output row dominate the map
ROWS_ALIKE = 0.1  # rows whose mean distance from the average row is below this say nearly the same thing
_SPECIAL = re.compile(r"<[^<>\s]+>")  # one piece that is a <name>: </s>, <unk>, <pad>


def special_positions(tokens: Sequence[str]) -> tuple[int, ...]:
    """Positions of special pieces (``</s>``, ``<unk>``, ``<pad>``: one ``<name>`` piece, no word in it)."""
    return tuple(j for j, tok in enumerate(tokens) if _SPECIAL.fullmatch(tok))


def set_aside(per_output: np.ndarray, columns: Sequence[int]) -> np.ndarray:
    """(Tt, Ts) -> (Tt, Ts - len(columns)): ``columns`` removed, each row renormalised to sum to 1 (a row with
    nothing left stays 0)."""
    kept = np.delete(per_output.astype(np.float64), list(columns), axis=1)
    total = kept.sum(-1, keepdims=True)
    return np.divide(kept, total, out=np.zeros_like(kept), where=total > 0)


@dataclass(frozen=True)
class Concentration:
    """Where a rollout map's mass sits, and how alike its rows are.

    special_share: mean over output rows of the share on the special columns (0 when there are none).
    top_column / top_share: the column with the largest mean share, and that mean share.
    row_spread: mean over rows of the total-variation distance from the average row (½ Σ |row − mean|):
    0 = every row the same, 1 = rows with nothing in common.
    """

    special: tuple[int, ...]
    special_share: float
    top_column: int
    top_share: float
    row_spread: float

    @property
    def sink_dominated(self) -> bool:
        """The special tokens hold at least ``SINK_SHARE`` of the average row."""
        return bool(self.special) and self.special_share >= SINK_SHARE

    @property
    def rows_alike(self) -> bool:
        return self.row_spread < ROWS_ALIKE


def concentration(per_output: np.ndarray, special: Sequence[int] = ()) -> Concentration:
    """Summary of a (Tt, Ts) map whose rows are distributions over the source (``Rollout.per_output``)."""
    if per_output.ndim != 2 or per_output.shape[0] == 0 or per_output.shape[1] == 0:
        raise ValueError(f"concentration needs a non-empty (Tt, Ts) map, got shape {per_output.shape}")
    z = per_output.astype(np.float64)
    mean_row = z.mean(0)
    spread = float((0.5 * np.abs(z - mean_row).sum(-1)).mean())
    share = float(z[:, list(special)].sum(-1).mean()) if special else 0.0
    top = int(mean_row.argmax())
    return Concentration(tuple(special), share, top, float(mean_row[top]), spread)
