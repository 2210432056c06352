"""How beam search finishes hypotheses: the one part of ``core.decoding.search.beam_search`` that varies by checkpoint.

``beam_search`` runs one loop; at every step it asks the call's finishing policy which of the best extensions
(best first) end there and which go on, hands it the ones that end, asks whether to stop, and at the end asks it for
the winner. ``ModelConfig.beam`` picks the policy:

``LabFinish`` ("lab", every checkpoint trained or converted here; Marian's C++ decoder): ``beam_size`` candidates a
step; those ending in eos are finished and not extended (the next step again keeps ``beam_size`` candidates, from
the others' extensions); it stops when ``beam_size`` hypotheses have
finished or none is left; finished hypotheses rank by log-prob / length**alpha, and when none finished within
``max_len`` the live ones are ranked so.

``TransformersFinish`` ("transformers", imported Hugging Face folders): ``GenerationMixin._beam_search`` of
transformers 5.23. It looks at 2 x ``beam_size`` candidates and always goes on with the ``beam_size`` best that do
not end in eos; an eos among the ``beam_size`` best (or, at ``max_len``, each of them) enters a pool of the
``beam_size`` best finished hypotheses, scored log-prob / length**length_penalty, where length counts the generated
ids, eos included (the start token not); it stops at ``max_len``, when ``early_stopping`` is True and the pool is
full, or when the pool is full and the best live hypothesis cannot beat the pool's worst even at length L:
its own current length (early_stopping False, or "never" with length_penalty <= 0) or ``max_len`` ("never" with
length_penalty > 0). The scores are float32 tensors divided as transformers divides them, so ties break alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from torch import Tensor

from ..config import ModelConfig


@dataclass
class LabFinish:
    """The lab's policy (see the module docstring). One per ``beam_search`` call: it holds the call's finished pool."""

    beam_size: int
    alpha: float
    finished: list[tuple[float, list[int]]] = field(default_factory=list)

    @property
    def width(self) -> int:
        """How many of the best extensions a step looks at."""
        return self.beam_size

    def select(self, is_eos: list[bool], last: bool) -> tuple[list[int], list[int]]:
        """(ended, alive): the candidates (indices into the step's best-first list) that end here and those the
        next step extends, each best first."""
        return [j for j, e in enumerate(is_eos) if e], [j for j, e in enumerate(is_eos) if not e]

    def add(self, score: Tensor, seq: list[int]) -> None:
        """A hypothesis that ended: its cumulative log-prob (0-d float32) and generated ids (eos included)."""
        self.finished.append((float(score) / (len(seq) ** self.alpha), seq))

    def done(self, step: int, alive_scores: Tensor) -> bool:
        """Whether to stop after output position ``step``; alive_scores (n,): the live hypotheses', best first."""
        return len(self.finished) >= self.beam_size or alive_scores.shape[0] == 0

    def best(self, tokens: Tensor, scores: Tensor) -> list[int]:
        """The winner's ids; tokens (n, t) and scores (n,): the live hypotheses when the loop ended."""
        if not self.finished:  # max_len reached: rank the live beams
            for row, score in zip(tokens.tolist(), scores.tolist(), strict=True):
                self.finished.append((score / (max(len(row), 1) ** self.alpha), row))
        return max(self.finished, key=lambda item: item[0])[1]


@dataclass
class TransformersFinish:
    """transformers' policy (see the module docstring). One per ``beam_search`` call: it holds the pool."""

    beam_size: int
    length_penalty: float
    early_stopping: bool | Literal["never"]
    max_len: int
    pool: list[tuple[Tensor, list[int]]] = field(default_factory=list)  # best first, at most beam_size

    @property
    def width(self) -> int:
        return 2 * self.beam_size  # (1 + the number of eos ids) x num_beams

    def select(self, is_eos: list[bool], last: bool) -> tuple[list[int], list[int]]:
        top = range(min(self.beam_size, len(is_eos)))
        ended = [j for j in top if is_eos[j] or last]  # at max_len every one of the best ends
        alive = [j for j, e in enumerate(is_eos) if not e][: self.beam_size]
        return ended, alive

    def add(self, score: Tensor, seq: list[int]) -> None:
        penalised = score / (len(seq) ** self.length_penalty)  # float32, as transformers divides
        if len(self.pool) == self.beam_size and not bool(penalised > self.pool[-1][0]):
            return
        at = next((i for i, (s, _) in enumerate(self.pool) if bool(penalised > s)), len(self.pool))
        self.pool.insert(at, (penalised, seq))
        del self.pool[self.beam_size :]

    def done(self, step: int, alive_scores: Tensor) -> bool:
        if alive_scores.shape[0] == 0 or step + 1 >= self.max_len:
            return True
        if len(self.pool) < self.beam_size:
            return False
        if self.early_stopping is True:
            return True
        length = self.max_len if self.early_stopping == "never" and self.length_penalty > 0 else step + 1
        return not bool(alive_scores[0] / (length**self.length_penalty) > self.pool[-1][0])

    def best(self, tokens: Tensor, scores: Tensor) -> list[int]:
        if self.pool:
            return self.pool[0][1]
        return LabFinish(self.beam_size, self.length_penalty).best(tokens, scores)  # nothing could be scored


Finishing = LabFinish | TransformersFinish


def finishing(config: ModelConfig, beam_size: int, alpha: float | None, max_len: int) -> Finishing:
    """The finishing policy of one beam search on a model of ``config``: ``config.beam``'s, with the call's length
    penalty ``alpha`` (None: ``config.length_penalty``) and its ``max_len`` output ids."""
    penalty = config.length_penalty if alpha is None else alpha
    if config.beam == "transformers":
        return TransformersFinish(beam_size, penalty, config.early_stopping, max_len)
    return LabFinish(beam_size, penalty)


def generation_settings(config: ModelConfig) -> dict[str, Any]:
    """The beam settings as transformers' generation_config.json names them: what the exporters write, and what the
    importers read back (``core.importers.hf_common.beam_settings``)."""
    return {"length_penalty": config.length_penalty, "early_stopping": config.early_stopping}
