"""What a call returns: ``Translation`` (a view on its Trace), its ``Step``s, and the ``BeamTree`` of a beam search."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .config import InferenceOptions
from .decoding.search import BeamStep
from .recording.trace import Trace
from .sites import AttentionKind, output_site


@dataclass(frozen=True)
class Step:
    """One decoding step: the token chosen at position ``index`` and what the model weighed (a view on the Trace)."""

    index: int
    token: str
    token_id: int
    prob: float
    top_k: list[tuple[str, float]]
    trace: Trace = field(repr=False)

    def attention(self, kind: AttentionKind, layer: int) -> np.ndarray:
        """This step's attention rows: (heads, n_key) over the keys visible at this step.

        With the causal mask on these are rows of the trace; with it off (each step recomputed the
        prefix) they are the rows this step itself computed (the trace's ``step_rows``)."""
        rows = self.trace.step_rows(kind, layer)
        if rows is None:
            rows = self.trace.attention(kind, layer)[:, self.index]
        else:
            rows = rows[:, self.index]
        return rows[:, : self.index + 1] if kind == "decoder" else rows


@dataclass(frozen=True)
class Translation:
    """Result of ``Bundle.translate`` / ``Bundle.trace``: a view on its Trace, which holds everything
    (``Translation(core.Trace.load(path))`` gives it back from a saved trace, without the model)."""

    trace: Trace

    @property
    def text(self) -> str:
        return str(self.trace.meta.get("text", ""))

    @property
    def source_text(self) -> str:
        return str(self.trace.meta.get("source_text", ""))

    @property
    def options(self) -> InferenceOptions:
        return self.trace.options

    @property
    def beam_size(self) -> int:
        return int(self.trace.meta.get("beam_size", 1))

    @property
    def notices(self) -> tuple[str, ...]:
        return tuple(self.trace.meta.get("notices", ()))

    @property
    def src_tokens(self) -> list[str]:
        """Source pieces, eos included."""
        return self.trace.src_tokens

    @property
    def tgt_tokens(self) -> list[str]:
        """Decoder inputs: start token, then the output pieces before the last."""
        return self.trace.tgt_tokens

    @property
    def output_tokens(self) -> list[str]:
        """What the decoder predicted at each position (eos included)."""
        return self.trace.output_tokens

    @property
    def output_ids(self) -> tuple[int, ...]:
        """The output ids the run produced (eos included if produced): what ``Bundle.teacher_forced(...,
        target_ids=...)`` feeds to re-run this output exactly (its text need not re-tokenize to them)."""
        site = output_site("ids")
        return tuple(int(i) for i in self.trace[site]) if site in self.trace else ()

    @functools.cached_property
    def steps(self) -> list[Step]:
        """One ``Step`` per output position, made once per Translation (pages index it per step: the Steps page's
        slider labels every step, which rebuilt them all for each label, quadratic in the output's length)."""
        t = self.trace
        if output_site("ids") not in t:
            return []
        ids, probs, top_ids, top_probs = (t[output_site(what)] for what in ("ids", "probs", "top_ids", "top_probs"))
        return [
            Step(
                i,
                t.piece(ids[i]),
                int(ids[i]),
                float(probs[i]),
                [(t.piece(j), float(q)) for j, q in zip(top_ids[i], top_probs[i], strict=True)],
                t,
            )
            for i in range(len(ids))
        ]

    @property
    def truncated(self) -> bool:
        return any(n.startswith("Truncated") for n in self.notices)

    @property
    def forced_prefix(self) -> int:
        """How many first output pieces were forced (``Bundle.translate_from``); 0 for a free translation."""
        return int(self.trace.meta.get("forced_prefix", 0))

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "src_tokens": self.src_tokens,
            "tgt_tokens": self.tgt_tokens,
            "output_tokens": self.output_tokens,
            "options": self.options.to_dict(),
            "beam_size": self.beam_size,
            "notices": list(self.notices),
            "steps": [{"index": s.index, "token": s.token, "prob": s.prob, "top_k": s.top_k} for s in self.steps],
        }


@dataclass(frozen=True)
class BeamTree:
    """Every hypothesis beam search weighed for one sentence (``Bundle.beam_tree``), step by step.

    ``steps[t]`` is the ``BeamStep`` of output position t. ``output_ids`` is what ``beam_search`` returned (eos
    included if produced), ``greedy_ids`` the greedy translation's ids, for comparison."""

    steps: tuple[BeamStep, ...]
    output_ids: tuple[int, ...]
    greedy_ids: tuple[int, ...]
    src_tokens: tuple[str, ...]
    vocab: Mapping[int, str] = field(repr=False)
    beam_size: int
    alpha: float
    options: InferenceOptions
    eos_id: int
    meta: Mapping[str, Any] = field(default_factory=dict)  # source_text, text, greedy_text, model

    def piece(self, token_id: int) -> str:
        return self.vocab.get(int(token_id), f"<{int(token_id)}>")

    @property
    def winner_path(self) -> tuple[int, ...]:
        """For each output position, the index of the winner's candidate in that step's candidates."""
        out = list(self.output_ids)
        if not out:
            return ()
        last = self.steps[len(out) - 1]
        matches = [j for j in range(last.n_kept) if last.path(j) == out]
        if not matches:
            raise ValueError("the winner is not among the recorded hypotheses")
        path = [matches[0]]
        for t in range(len(out) - 1, 0, -1):
            row = int(self.steps[t].candidate_parents[path[-1]])
            path.append(self.steps[t - 1].alive[row])
        return tuple(reversed(path))

    @property
    def divergence(self) -> int | None:
        """The first output position where greedy decoding chose another piece than the winning beam (it chose
        the same ones before); None when both give the same output."""
        a, b = self.output_ids, self.greedy_ids
        for t in range(max(len(a), len(b))):
            if t >= len(a) or t >= len(b) or a[t] != b[t]:
                return t
        return None

    def parent_candidate(self, step: int, candidate: int) -> int | None:
        """The candidate of step ``step - 1`` that candidate ``candidate`` of ``step`` extends (None at step 0)."""
        if step == 0:
            return None
        return self.steps[step - 1].alive[int(self.steps[step].candidate_parents[candidate])]
