"""What sampling did at each step of a sampled translation, read from its trace (the ``output.draw.*`` sites
decoding recorded while it drew, ``core.decoding.sampling.Drawn``): the model's distribution over the step's most
probable pieces before temperature, the distribution the piece was drawn from (after temperature and the top-k /
top-p cut), the pieces the cut removed and the piece drawn. Pure: no Streamlit."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from core import Trace
from core.sites import DRAW_ARRAYS, DrawArray, draw_site, output_site

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


def trace_draws(trace: Trace, shown: int = SHOWN) -> tuple[StepDraw, ...]:
    """``step_draws`` of a sampled translation's trace; ValueError when it holds no draw (not sampled)."""
    if draw_site("prob") not in trace:
        raise ValueError("this translation was not sampled: its trace holds no draw")
    return step_draws(
        trace[output_site("top_ids")],
        trace[output_site("top_probs")],
        trace[output_site("ids")],
        trace[output_site("probs")],
        {what: trace[draw_site(what)] for what in DRAW_ARRAYS},
        trace.piece,
        shown,
    )


def step_draws(
    top_ids: np.ndarray,
    top_probs: np.ndarray,
    ids: np.ndarray,
    probs: np.ndarray,
    draw: Mapping[DrawArray, np.ndarray],
    piece: Callable[[int], str],
    shown: int = SHOWN,
) -> tuple[StepDraw, ...]:
    """Each step's ``StepDraw``: ``top_ids`` / ``top_probs`` (T, k) the model's most probable pieces at each step,
    ``ids`` / ``probs`` (T,) the pieces taken and the model's probability of each, ``draw`` the ``output.draw.*``
    arrays of the same steps (``core.sites``)."""
    out = []
    for t, taken in enumerate(ids):
        rows = list(range(min(shown, top_ids.shape[1])))
        found = [i for i in rows if top_ids[t, i] == taken]
        names = [piece(int(top_ids[t, i])) for i in rows]
        before = [float(top_probs[t, i]) for i in rows]
        after = [float(draw["top_probs"][t, i]) for i in rows]
        if not found:  # the drawn piece ranks below the shown ones: it comes last
            names.append(piece(int(taken)))
            before.append(float(probs[t]))
            after.append(float(draw["prob"][t]))
        out.append(
            StepDraw(
                pieces=tuple(names),
                before=tuple(before),
                after=tuple(after),
                drawn=found[0] if found else len(names) - 1,
                rank=int(draw["rank"][t]),
                kept=int(draw["kept"][t]),
                cut=int(draw["cut"][t]),
                cut_pieces=tuple(names[i] for i in rows if draw["top_cut"][t, i]),
            )
        )
    return tuple(out)
