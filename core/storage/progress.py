"""Progress of a long job (importing a folder), reported to a ``progress(fraction, text)`` callback.

A job made of parts gives each part ``part(progress, start, end)``: the part reports its own fractions 0..1 and the
callback sees them as start..end of the whole, so the whole only goes forward. None everywhere = nothing reported.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

Progress = Callable[[float, str], None]  # (fraction of the whole job done, 0..1; what it is doing, in words)


def part(progress: Progress | None, start: float, end: float) -> Progress | None:
    """``progress`` for the part of a job from ``start`` to ``end`` (0 <= start <= end <= 1): the part's fraction f
    is reported as start + f (end - start), f clipped to 0..1. None when ``progress`` is None."""
    if not 0.0 <= start <= end <= 1.0:
        raise ValueError(f"a part of a job spans 0 <= start <= end <= 1, got {start} .. {end}")
    if progress is None:
        return None
    report = progress

    def scaled(fraction: float, text: str) -> None:
        report(start + (end - start) * min(max(fraction, 0.0), 1.0), text)

    return scaled


class ImportSteps:
    """The parts of one import (``core.importers``), each a share of the bar: checking every tensor of the weights
    file (one report per tensor, with counts), the weights' digest (per 64 MiB read), writing the checkpoint, done."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress
        self.reading = part(progress, 0.0, 0.6)
        self.digest = part(progress, 0.6, 0.8)

    def writing(self, out: Path) -> None:
        if self.progress is not None:
            self.progress(0.85, f"Writing the checkpoint {out.name} …")

    def done(self, out: Path) -> Path:
        if self.progress is not None:
            self.progress(1.0, f"Wrote the checkpoint {out.name}.")
        return out
