"""The Steps page's sentence on a sampled step: what temperature and the top-k / top-p cut did to the piece drawn,
computed from the step's two distributions (``viz_app/steps/draws.py``), one branch per case."""

from __future__ import annotations

from viz_app.claims import counted, quote


def _p(p: float) -> str:
    """A probability as 'p 0.91'; a small one with two significant digits ('0.0031'), never '0.00'."""
    return f"{p:.2f}" if p >= 0.01 or p == 0 else f"{p:.2g}"


def _cut_named(top_k: int | None, top_p: float | None) -> str:
    return ", ".join(([f"top-k {top_k}"] if top_k is not None else []) + ([f"top-p {top_p:g}"] if top_p else []))


def settings(temperature: float, top_k: int | None, top_p: float | None, seed: int) -> str:
    """How pieces were drawn, in words: 'temperature 1.3, top-p 0.9, seed 3'."""
    named = _cut_named(top_k, top_p)
    return f"temperature {temperature:g}{', ' + named if named else ''}, seed {seed}"


def draw_claim(
    *,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    piece: str,
    before: float,
    after: float,
    rank: int,
    kept: int,
    cut: int,
) -> str:
    """The sentence under a sampled step's chart: ``piece`` the drawn one, ``before`` / ``after`` its probability
    before temperature and in the distribution it was drawn from, ``rank`` its rank in the model's (1 = top),
    ``kept`` the pieces left to draw from and ``cut`` those the top-k / top-p cut removed."""
    if after == 0:
        return (
            f"{quote(piece)} was not drawn: a generation rule of the model forced it here (the model gave it "
            f"p {_p(before)})."
        )
    if temperature == 0:
        return (
            f"At temperature 0 sampling takes the model's top choice, {quote(piece)} (p {_p(before)}), as greedy "
            "decoding does: nothing is left to chance."
        )
    said = (
        f"At temperature {temperature:g} the drawn piece {quote(piece)} had p {_p(before)} before and {_p(after)} after"
    )
    said += "; it was the model's own top choice" if rank == 1 else f"; the model ranked it {rank}"
    named = _cut_named(top_k, top_p)
    if not named:
        return f"{said}. No top-k or top-p cut: all {counted(kept, 'piece')} stayed in the draw."
    if cut == 0:
        return f"{said}. The cut ({named}) removed nothing here: all {counted(kept, 'piece')} stayed in the draw."
    return f"{said}. The cut ({named}) kept {counted(kept, 'piece')} and removed {cut:,}."
