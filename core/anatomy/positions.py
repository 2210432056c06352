"""What a model knows about word order, read from its weights: the absolute position rows each side adds
(sinusoids or a learned table, read from row ``position_offset`` on), or T5's learned relative position bias — per
head, against the distance from query to key, and the bucket each distance falls in.

Nothing here changes the model; every array is a float64 / int64 numpy copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from ..sites import Side
from ..transformer.model import Transformer
from ..transformer.positional import relative_bucket

Stack = Literal["encoder", "decoder"]


def position_rows(model: Transformer, side: Side, n: int) -> np.ndarray:
    """(T, D) the position rows ``side`` adds to its first ``n`` tokens ('src': the encoder's input, 'tgt': the
    decoder's), as the model adds them (after its row offset). A learned table gives at most as many rows as it
    has; a model with relative positions (T5) adds none: zeros."""
    if model.config.positional == "learned":
        n = min(n, model.config.max_positions)
    with torch.no_grad():
        return model.side_positions(side)(n).detach().double().cpu().numpy().copy()


@dataclass(frozen=True)
class RelativeBias:
    """One stack's relative position bias (T5), as its self-attention adds it to the scores.

    ``distances`` are key position − query position (negative: a key before the query); the decoder's are ≤ 0 only
    (its causal mask hides later keys). ``values[h, i]`` is what head h adds at ``distances[i]``; ``buckets[i]`` is
    the learned entry that distance reads (``table[h, bucket]``)."""

    stack: Stack
    distances: np.ndarray  # (N,) int64
    buckets: np.ndarray  # (N,) int64, in [0, n_buckets)
    values: np.ndarray  # (H, N) float64
    table: np.ndarray  # (H, n_buckets) float64, the learned entries
    max_distance: int  # from this distance on, every distance shares the last bucket of its direction
    bidirectional: bool  # the encoder's: keys after the query have buckets of their own

    @property
    def n_buckets(self) -> int:
        return int(self.table.shape[1])

    @property
    def exact(self) -> int:
        """Distances below this one have a bucket each; larger ones share buckets spaced logarithmically."""
        per_direction = self.n_buckets // 2 if self.bidirectional else self.n_buckets
        return per_direction // 2

    def bucket_map(self, n: int) -> np.ndarray:
        """(n, n) int64: the bucket read by query position i (row) for key position j (column)."""
        relative = torch.arange(n)[None, :] - torch.arange(n)[:, None]  # (Tq, Tk) key − query
        return relative_bucket(relative, self.bidirectional, self.n_buckets, self.max_distance).numpy()


def relative_bias(model: Transformer, stack: Stack, span: int) -> RelativeBias | None:
    """The relative position bias of ``stack``'s self-attention for distances up to ``span`` either way (the
    decoder's: backwards only), computed from the learned entries; None for a model without one."""
    module = model.encoder_bias if stack == "encoder" else model.decoder_bias
    if module is None:
        return None
    bidirectional = bool(module.bidirectional)
    distances = torch.arange(-span, span + 1 if bidirectional else 1)  # (N,)
    buckets = relative_bucket(distances, bidirectional, int(module.n_buckets), int(module.max_distance))  # (N,)
    table = module.embedding.weight.detach().double().cpu().T  # (H, n_buckets)
    return RelativeBias(
        stack=stack,
        distances=distances.numpy().astype(np.int64),
        buckets=buckets.numpy().astype(np.int64),
        values=table[:, buckets].numpy().copy(),  # (H, N)
        table=table.numpy().copy(),
        max_distance=int(module.max_distance),
        bidirectional=bidirectional,
    )
