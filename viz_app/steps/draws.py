"""What sampling did at each step of a sampled translation: the model's distribution over the step's most probable
pieces before temperature, the distribution the piece was drawn from (``core.decoding.sampling.reshaped``: after
temperature and the top-k / top-p cut), the pieces the cut removed and the piece drawn. Pure: no Streamlit (the
page's cached run is ``viz_app/steps/sampling.py``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from core.decoding.sampling import Sampling, reshaped

SHOWN = 10  # the step's most probable pieces shown (the drawn one added when it is below them)


@dataclass(frozen=True)
class StepDraw:
    """One step of a sampled translation. ``pieces`` (N): the model's ``SHOWN`` most probable, then the drawn one
    when it ranks below them; ``before`` / ``after`` (N): their probability as the model gives it and in the
    distribution the piece was drawn from (0: cut, or banned by a rule)."""

    pieces: tuple[str, ...]
    before: tuple[float, ...]
    after: tuple[float, ...]
    drawn: int  # index into ``pieces``
    rank: int  # the drawn piece's rank in the model's distribution (1 = its top choice)
    kept: int  # pieces left to draw from (after > 0), over the whole distribution
    cut: int  # pieces temperature left and top-k / top-p removed, over the whole distribution
    cut_pieces: tuple[str, ...]  # those of them among ``pieces``

    @property
    def piece(self) -> str:
        return self.pieces[self.drawn]


def step_draws(
    probs: np.ndarray,
    ids: np.ndarray,
    out_ids: Sequence[int],
    sampling: Sampling,
    piece: Callable[[int], str],
    shown: int = SHOWN,
) -> tuple[StepDraw, ...]:
    """Each step's ``StepDraw`` from the model's whole distribution at every step: ``probs`` (T, V|S) sorted from
    the most probable, ``ids`` (T, V|S) their vocabulary ids (a teacher-forced pass over ``out_ids`` recorded with
    ``Record(top_k=...)`` the vocabulary's size), ``out_ids`` (T,) the pieces drawn."""
    before = torch.tensor(np.asarray(probs, dtype=np.float32))  # (T, V|S), a copy: the trace is read-only
    after = reshaped(before, sampling).numpy()  # (T, V|S)
    tempered = reshaped(before, Sampling(temperature=sampling.temperature)).numpy()  # no cut
    removed = (tempered > 0) & (after == 0)  # (T, V|S) what the cut took
    out = []
    for t, drawn_id in enumerate(out_ids):
        found = np.flatnonzero(ids[t] == drawn_id)
        j = int(found[0]) if found.size else -1  # -1: outside the scored ids (a forced id off the shortlist)
        rows = list(range(min(shown, ids.shape[1])))
        names = [piece(int(ids[t, i])) for i in rows]
        b, a = [float(probs[t, i]) for i in rows], [float(after[t, i]) for i in rows]
        if j < 0 or j >= len(rows):
            names.append(piece(int(drawn_id)))
            b.append(float(probs[t, j]) if j >= 0 else 0.0)
            a.append(float(after[t, j]) if j >= 0 else 0.0)
        out.append(
            StepDraw(
                pieces=tuple(names),
                before=tuple(b),
                after=tuple(a),
                drawn=j if 0 <= j < len(rows) else len(names) - 1,
                rank=j + 1 if j >= 0 else ids.shape[1] + 1,
                kept=int((after[t] > 0).sum()),
                cut=int(removed[t].sum()),
                cut_pieces=tuple(piece(int(ids[t, i])) for i in rows if removed[t, i]),
            )
        )
    return tuple(out)
