"""Decoding steps timed on this machine, with the key/value cache and without it.

``measure_steps(model, translation)`` replays the translation's own decoder inputs one step at a time through
``Transformer.decode`` — with a ``DecoderState`` (the cache: only the new position is computed) and without one
(each step recomputes the whole prefix, as decoding does with the causal mask off) — and returns each step's
median time over a few repeats. Both ways run the same reference path (no fast-path weights) and make the same
predictions, so the difference is the cache's. Times vary with the machine and its load: chart them, never
compare them with a threshold.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..fast.plan import DecoderState
from ..results import Translation
from ..sites import ids_site
from ..transformer.model import Transformer


@dataclass(frozen=True)
class MeasuredSteps:
    """Seconds per decoding step t (median of ``repeats`` runs), (out_len,) each way; the encoder's time apart."""

    cached: np.ndarray
    uncached: np.ndarray
    encoder: float
    repeats: int
    device: str
    threads: int  # torch's intra-op threads while measuring

    @property
    def out_len(self) -> int:
        return int(self.cached.shape[0])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _run(model: Transformer, src: Tensor, tgt: Tensor, cached: bool) -> tuple[float, list[float]]:
    """One replay: the encoder's seconds, and each step's."""
    device = src.device
    _sync(device)
    start = time.perf_counter()
    memory = model.encode(src)  # (1, Ts, D)
    _sync(device)
    encoder = time.perf_counter() - start
    state = DecoderState.empty(model.config.n_decoder_layers) if cached else None
    seconds = []
    for t in range(tgt.shape[1]):
        start = time.perf_counter()
        inputs = tgt[:, t : t + 1] if cached else tgt[:, : t + 1]  # (1, 1) or (1, t + 1)
        logits = model.decode(inputs, memory, None, state=state)[:, -1]  # (1, V)
        torch.softmax(logits.float(), dim=-1).argmax(dim=-1)  # the step's choice, as decoding makes it
        _sync(device)
        seconds.append(time.perf_counter() - start)
    return encoder, seconds


@torch.inference_mode()
def measure_steps(model: Transformer, translation: Translation, *, repeats: int = 3) -> MeasuredSteps:
    """Time each decoding step of ``translation`` both ways on ``model`` (the one that made it; eval mode).

    One warm-up replay each way first; then the ways alternate, so that a change in the machine's load hits both.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if model.training:
        raise ValueError("measure_steps needs the model in eval mode (dropout off)")
    trace = translation.trace
    device = next(model.parameters()).device
    src = torch.tensor(trace[ids_site("src")], device=device)[None]  # (1, Ts)
    tgt = torch.tensor(trace[ids_site("tgt")], device=device)[None]  # (1, Tt): start, then outputs
    runs: dict[bool, list[list[float]]] = {True: [], False: []}
    encoders = []
    for cached in (True, False):
        _run(model, src, tgt, cached)
    for _ in range(repeats):
        for cached in (True, False):
            encoder, seconds = _run(model, src, tgt, cached)
            runs[cached].append(seconds)
            encoders.append(encoder)

    def median(rows: list[list[float]]) -> np.ndarray:
        out = np.array([statistics.median(step) for step in zip(*rows, strict=True)])
        out.flags.writeable = False
        return out

    return MeasuredSteps(
        median(runs[True]),
        median(runs[False]),
        statistics.median(encoders),
        repeats,
        str(device),
        torch.get_num_threads(),
    )
