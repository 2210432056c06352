"""The decoder's logit lens: what each decoder layer would say if it were the last.

At every output step, each decoder layer's residual stream (``decoder.{layer}.out``, recorded in one teacher-forced
pass over the translation) is read through the decoder's final norm and the output layer, and turned into a
distribution over the next piece the way greedy decoding turns the last layer's logits into one
(``core.decoding.search.step_probs``: repetition penalty, softmax, suppressed ids at 0, bans). So the last layer's
lens IS the model's own distribution (tested), and an earlier layer's is what the output layer makes of that layer's
stream (nostalgebraist 2020, "interpreting GPT: the logit lens"; here for an encoder-decoder's decoder).

What it is not: earlier layers were never trained to be read this way. A layer whose lens looks wrong may hold the
answer in a form only the later layers turn into logits (a tuned lens, Belrose et al. 2023, learns that map).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..bundle import Bundle
from ..config import InferenceOptions, Record
from ..decoding.search import position_scores, step_probs, suppressed_columns
from ..errors import InputError
from ..recording.call import Call
from ..recording.trace import Trace
from ..results import Translation
from ..sites import analysis_site, ids_site, layer_site, output_site

TOP = 5


@dataclass(frozen=True)
class LogitLens:
    """Per decoder layer (L) and output step (T): the ``top`` pieces and their probabilities, and the probability and
    rank (1 = the top choice) of the piece finally chosen; ``first_top[t]``: the first layer (0-based) from which that
    piece stays the top choice (L - 1 when only the last layer picks it; -1 when the last layer does not rank it
    first: a given translation's piece, a forced id, or a tie at the top)."""

    chosen: tuple[str, ...]  # (T,) the pieces of the translation, eos included
    chosen_ids: tuple[int, ...]
    top_pieces: tuple[tuple[tuple[str, ...], ...], ...]  # (L, T, top)
    top_probs: np.ndarray  # (L, T, top)
    chosen_prob: np.ndarray  # (L, T)
    chosen_rank: np.ndarray  # (L, T)
    first_top: np.ndarray  # (T,)
    given: bool  # a given translation (teacher-forced) rather than the model's own

    @property
    def n_layers(self) -> int:
        return int(self.chosen_prob.shape[0])

    ARRAYS = ("top_probs", "chosen_prob", "chosen_rank", "first_top")

    def to_arrays(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """For ``Trace.with_analysis``: the arrays as 'analysis.lens.*', the pieces as JSON-able details."""
        arrays = {analysis_site("lens", name): np.asarray(getattr(self, name)) for name in self.ARRAYS}
        details = {
            "chosen": list(self.chosen),
            "chosen_ids": list(self.chosen_ids),
            "top_pieces": [[list(row) for row in layer] for layer in self.top_pieces],
            "given": self.given,
        }
        return arrays, {"lens": details}

    @classmethod
    def from_trace(cls, trace: Trace) -> LogitLens | None:
        """The lens stored in ``trace`` (``to_arrays``); None when it holds none."""
        details = dict(trace.meta.get("analysis", {})).get("lens")
        if not details or analysis_site("lens", "chosen_prob") not in trace:
            return None
        arrays = {name: np.asarray(trace[analysis_site("lens", name)]) for name in cls.ARRAYS}
        pieces = tuple(tuple(tuple(row) for row in layer) for layer in details["top_pieces"])
        return cls(
            tuple(details["chosen"]),
            tuple(int(i) for i in details["chosen_ids"]),
            pieces,
            arrays["top_probs"],
            arrays["chosen_prob"],
            arrays["chosen_rank"],
            arrays["first_top"],
            bool(details["given"]),
        )

    def to_dict(self) -> dict[str, object]:
        """Per step, per layer: the top pieces with probabilities, and the chosen piece's probability and rank."""
        return {
            "given": self.given,
            "steps": [
                {
                    "piece": self.chosen[t],
                    "first_top_layer": int(self.first_top[t]) + 1 if self.first_top[t] >= 0 else None,
                    "layers": [
                        {
                            "layer": layer + 1,
                            "top": [
                                {"piece": piece, "p": round(float(p), 6)}
                                for piece, p in zip(self.top_pieces[layer][t], self.top_probs[layer, t], strict=True)
                            ],
                            "chosen_p": round(float(self.chosen_prob[layer, t]), 6),
                            "chosen_rank": int(self.chosen_rank[layer, t]),
                        }
                        for layer in range(self.n_layers)
                    ],
                }
                for t in range(len(self.chosen))
            ],
        }


@torch.inference_mode()
def logit_lens(
    bundle: Bundle,
    text: str,
    *,
    options: InferenceOptions | None = None,
    translation: str | None = None,
    top: int = TOP,
    truncate: bool = True,
) -> LogitLens:
    """The logit lens of ``text``'s translation: the model's own greedy one, or ``translation`` teacher-forced."""
    options = bundle.check_options(options)
    options.whole_vocabulary("the logit lens")
    if translation is None:
        own = bundle.translate(text, options, truncate=truncate, record=Record(qkv=False))
        out_ids = [int(i) for i in own.trace[output_site("ids")]]
    else:
        out_ids = bundle.encode_target(translation)
    run = bundle.teacher_forced(
        text, target_ids=out_ids, options=options, truncate=truncate, record=Record(qkv=False, activations=True)
    )
    return lens_of(bundle, run, given=translation is not None, top=top)


@torch.inference_mode()
def lens_of(bundle: Bundle, run: Translation, *, given: bool = False, top: int = TOP) -> LogitLens:
    """The logit lens of a run recorded with ``Record(activations=True)`` (a translation or a teacher-forced pass:
    ``Bundle.translate``, ``Bundle.teacher_forced``), its output ids the pieces chosen; ``given``: they are a given
    translation's, not the model's own."""
    if layer_site("decoder", 0) not in run.trace:
        raise InputError("the logit lens reads each decoder layer's output: record the run with activations=True")
    if not run.options.causal_mask:  # a trace keeps one pass's streams; each step recomputed its own prefix
        raise InputError(
            "the logit lens needs the causal mask on: without it each decoding step saw only the words before it, "
            "and one recorded pass (which sees them all) cannot show what each step's layers held"
        )
    out_ids = list(run.output_ids)
    trace, model, cfg = run.trace, bundle.model, bundle.config
    param = next(model.parameters())
    src = torch.as_tensor(np.array(trace[ids_site("src")]), device=param.device)[None]  # (1, Ts)
    inputs = torch.as_tensor(np.array(trace[ids_site("tgt")]), device=param.device)  # (T,) decoder inputs
    chosen = torch.as_tensor(out_ids, device=param.device)  # (T,)
    blocked = suppressed_columns(cfg, None, param.device)
    n_layers, steps = cfg.n_decoder_layers, len(out_ids)
    streams = [np.array(trace[layer_site("decoder", layer)]) for layer in range(n_layers)]  # L x (T, D)
    stacked = torch.as_tensor(np.concatenate(streams), device=param.device).to(param.dtype)  # (L*T, D)
    fast = Call(fast=bundle.fast)  # the bundle's packed output layer, as decoding projects
    every = model.logits(model.decoder_norm(stacked), fast).float()  # (L*T, V): the output layer read once for all
    # each layer's row at each step scored as decoding scored that step, after its own decoder inputs
    by_layer = every.view(n_layers, steps, -1)  # (L, T, V)
    probs = position_scores(step_probs, cfg, by_layer, inputs.expand(n_layers, -1), None, blocked, src)  # (L, T, V)
    probs = probs.reshape(n_layers * steps, -1)  # (L*T, V)
    p, ids = probs.topk(top, dim=-1)  # (L*T, top)
    picked = probs.gather(-1, chosen.repeat(n_layers)[:, None])[:, 0]  # (L*T,)
    rank = (probs > picked[:, None]).sum(-1) + 1  # (L*T,)
    top_probs = p.cpu().numpy().reshape(n_layers, steps, top)
    chosen_prob = picked.cpu().numpy().reshape(n_layers, steps)
    chosen_rank = rank.cpu().numpy().reshape(n_layers, steps)
    names = [tuple(trace.piece(int(i)) for i in row) for row in ids.tolist()]
    top_pieces = [tuple(names[layer * steps : (layer + 1) * steps]) for layer in range(n_layers)]
    first_top = np.full(steps, -1)
    for t in range(steps):
        tops = chosen_rank[:, t] == 1
        if tops[-1]:
            below = np.flatnonzero(~tops)
            first_top[t] = int(below[-1]) + 1 if below.size else 0  # from here on the top choice
    return LogitLens(
        tuple(trace.piece(i) for i in out_ids),
        tuple(out_ids),
        tuple(top_pieces),
        top_probs,
        chosen_prob,
        chosen_rank,
        first_top,
        given,
    )
