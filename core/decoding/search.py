"""Greedy and beam-search decoding with an incremental key/value cache.

``iter_greedy`` yields one ``StepOutput`` per generated position, so callers (the app, a CLI)
can show the translation being built. With the causal mask switched off the cache is not
valid (earlier positions would see later ones), so each step recomputes the whole prefix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from ..config import ModelConfig
from ..fast.plan import DecoderState
from ..recording.call import Call
from ..recording.recorder import Recorder
from ..sites import attention_array
from ..text.tokenizer import Tokenizer
from ..transformer.model import Transformer
from .beam_finish import finishing
from .generation_rules import banned, bans_on, columns_of, forced_id, penalise
from .sampling import draw


@dataclass(frozen=True)
class StepOutput:
    """One decoding step for a batch: chosen ids (B,), their probabilities (B,), top-k ids/probs (B, k)."""

    index: int
    token_ids: Tensor
    probs: Tensor
    top_ids: Tensor
    top_probs: Tensor


@dataclass(frozen=True)
class DecodeResult:
    """Decoder inputs and outputs of a finished decode.

    ``tokens`` (B, 1 + n_steps): the start token then the generated ids (eos, then padding with eos).
    ``lengths``: per item, generated tokens up to and including eos.
    """

    tokens: Tensor
    lengths: list[int]
    steps: list[StepOutput]


@dataclass(frozen=True)
class BeamStep:
    """What beam search weighed at one output position (recorded only when ``beam_search`` gets a ``history``).

    step: the 0-based output position.
    tokens: (n, step) the generated ids of the n live hypotheses extended at this step (start token left out).
    scores: (n,) their cumulative log-probabilities (natural log).
    candidate_ids, candidate_parents, candidate_logp, candidate_scores: (c,) the best extensions, best first:
        the token, the row of ``tokens`` it extends, its log-probability given that hypothesis, and
        ``scores[parent] + logp``. The first ``n_kept`` were kept, the rest (the next best, up to as many again)
        were pruned.
    finished: (c,) True for a kept candidate that ends in eos (a finished hypothesis, not extended further).
    cross_attention: (n, L, H, Ts) each live hypothesis's cross-attention row at this step (weights after softmax).
    """

    step: int
    tokens: np.ndarray
    scores: np.ndarray
    candidate_ids: np.ndarray
    candidate_parents: np.ndarray
    candidate_logp: np.ndarray
    candidate_scores: np.ndarray
    n_kept: int
    finished: np.ndarray
    cross_attention: np.ndarray

    @property
    def alive(self) -> list[int]:
        """Candidates kept and not finished, in order: row r of the next step's ``tokens`` is ``alive[r]``."""
        return [j for j in range(self.n_kept) if not self.finished[j]]

    def path(self, candidate: int) -> list[int]:
        """The generated ids of hypothesis ``candidate``: its parent's tokens, then its own token."""
        parent = int(self.candidate_parents[candidate])
        return [int(i) for i in self.tokens[parent]] + [int(self.candidate_ids[candidate])]


def padded(
    rows: Sequence[Sequence[int]], pad_id: int, device: torch.device | str | None = None
) -> tuple[Tensor, Tensor]:
    """Id rows as ONE batch: ids (B, T) padded on the right with ``pad_id``, and keep flags (B, T), True = a real
    token (pass them on: Marian models' pad id is also eos, ids cannot tell)."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([[*r, *[pad_id] * (width - len(r))] for r in rows], dtype=torch.long, device=device)
    keep = torch.tensor([[True] * len(r) + [False] * (width - len(r)) for r in rows], device=device)
    return ids, keep


def output_text(tokenizer: Tokenizer, out_ids: Sequence[int], eos_id: int) -> str:
    """Output ids (eos included if produced) as text: eos dropped, the rest through the tokenizer."""
    return tokenizer.decode([i for i in out_ids if i != eos_id])


def forced_ids(config: ModelConfig, prefix: Sequence[int]) -> tuple[int, ...]:
    """The output ids a decoding call forces at its first steps: the call's ``prefix``, else the model's own forced
    first id (``config.forced_bos_id``: mBART-50's, M2M100's and NLLB's target language), else none."""
    if prefix or config.forced_bos_id is None:
        return tuple(prefix)
    return (config.forced_bos_id,)


def default_max_len(src_len: int, cap: int = 256) -> int:
    return min(cap, 2 * src_len + 10)


def max_steps(config: ModelConfig, max_len: int | None, src_len: int) -> int:
    """How many output ids a decoding call makes at most: ``max_len`` (None: ``default_max_len`` of the source),
    and no more than a learned position table has rows for (BART's, mBART's: the decoder reads position step)."""
    steps = max_len or default_max_len(src_len)
    return steps if config.position_rows is None else min(steps, config.position_rows)


def suppress(scores: Tensor, config: ModelConfig, fill: float, vocab: Tensor | None = None) -> Tensor:
    """Probabilities or log-probabilities (..., V) with the ids decoding never chooses (``config.suppress_ids``, e.g.
    Marian's <pad>) set to ``fill`` (0 or -inf); ``scores`` itself when there are none. Applied after the softmax,
    as transformers' ``bad_words_ids`` is: the other ids keep the model's own probabilities (not renormalised), so
    beam scores are the same as transformers'. vocab: the ids of the last axis (S,) when it is a shortlist."""
    return fill_columns(scores, suppressed_columns(config, vocab, scores.device), fill)


def fill_columns(scores: Tensor, columns: Tensor | None, fill: float) -> Tensor:
    """``scores`` with ``columns`` of the last axis set to ``fill``; itself when there are none (``suppress``, with
    the columns a decoding loop found once)."""
    return scores if columns is None else scores.index_fill(-1, columns, fill)


def suppressed_columns(config: ModelConfig, vocab: Tensor | None, device: torch.device) -> Tensor | None:
    """The columns of the scores' last axis that ``suppress`` fills: the suppressed ids, or their places among the
    shortlist ``vocab``; None when there are none. A decoding loop finds them once per call."""
    if not config.suppress_ids:
        return None
    ids = torch.tensor(config.suppress_ids, device=device)
    return ids if vocab is None else torch.isin(vocab, ids).nonzero()[:, 0]


def step_probs(
    cfg: ModelConfig, logits: Tensor, tokens: Tensor, vocab: Tensor | None, blocked: Tensor | None, src: Tensor
) -> Tensor:
    """Greedy decoding's distribution over the next id (B, V|S) from one step's logits (B, V|S), ``tokens`` (B, t)
    the decoder inputs so far: the repetition penalty on the logits, the softmax, the suppressed columns
    (``suppressed_columns``) at 0 without renormalising, then the bans (no-repeat n-grams, a bad word's start)."""
    logits = penalise(cfg, logits.float(), tokens, vocab)
    probs = fill_columns(torch.softmax(logits, dim=-1), blocked, 0.0)
    return apply_bans(probs, cfg, tokens, 0.0, vocab, src)


def step_logprobs(
    cfg: ModelConfig, logits: Tensor, tokens: Tensor, vocab: Tensor | None, blocked: Tensor | None, src: Tensor
) -> Tensor:
    """Beam search's scores of the next id (N, V|S) from one step's logits (N, V|S), ``tokens`` (N, t) the decoder
    inputs so far: the log-softmax, the suppressed columns at -inf, the repetition penalty on the log-probabilities
    (as transformers' beam search), then the bans at -inf."""
    token_logp = fill_columns(torch.log_softmax(logits.float(), dim=-1), blocked, float("-inf"))
    token_logp = penalise(cfg, token_logp, tokens, vocab)
    return apply_bans(token_logp, cfg, tokens, float("-inf"), vocab, src)


def position_scores(
    step: Callable[..., Tensor],
    cfg: ModelConfig,
    logits: Tensor,
    tokens: Tensor,
    vocab: Tensor | None,
    blocked: Tensor | None,
    src: Tensor,
) -> Tensor:
    """``step`` (``step_probs`` or ``step_logprobs``) at every position of a pass at once: logits (N, T, V|S),
    ``tokens`` (N, T) the decoder inputs; position t as its decoding step scored it, after inputs 0..t. When no rule
    reads the prefix (no repetition penalty, no bans) every position is scored in one call. (N, T, V|S)."""
    if cfg.repetition_penalty == 1.0 and not bans_on(cfg):
        return step(cfg, logits, tokens, vocab, blocked, src)
    T = tokens.shape[1]
    return torch.stack([step(cfg, logits[:, t], tokens[:, : t + 1], vocab, blocked, src) for t in range(T)], dim=1)


def apply_bans(
    scores: Tensor, config: ModelConfig, tokens: Tensor, fill: float, vocab: Tensor | None, source: Tensor | None
) -> Tensor:
    """``scores`` (N, V|S), probabilities or log-probabilities of the next id after the decoder inputs ``tokens``
    (N, t), start token first, with the ids the model's generation rules ban there
    (``core.decoding.generation_rules.banned``:
    eos before ``min_length``, a repeated n-gram's last id, a source n-gram's last id) set to ``fill`` (0 or -inf),
    after the softmax as ``suppress`` does; ``scores`` itself when no rule is on. vocab: the ids of the last axis
    (S,) for a shortlist; source: (N | 1, Ts) the source ids each row translates."""
    if not bans_on(config):
        return scores
    rows, ids = banned(config, tokens, source)
    if rows.numel() == 0:  # the rules are on but ban nothing at this step: no copy of the scores
        return scores
    columns, listed = columns_of(ids, vocab)
    out = scores.clone()
    out[rows[listed], columns[listed]] = fill
    return out


def vocab_ids(columns: Tensor, vocab: Tensor | None) -> Tensor:
    """Columns of the scores' last axis as vocabulary ids: themselves, or ``vocab[columns]`` for a shortlist."""
    return columns if vocab is None else vocab[columns]


@torch.no_grad()
def iter_greedy(
    model: Transformer, src: Tensor, src_keep: Tensor, call: Call, memory: Tensor | None = None
) -> Iterator[StepOutput]:
    """Greedy decoding of src (B, Ts), one step at a time. Stops when every item has produced eos.

    call: the per-call context (``core.recording.call``): options, recorder, fast weights, shortlist ids and the
    decoding settings: at most ``call.max_len`` steps (None: ``default_max_len`` of the source), ``call.top_k``
    alternatives per step, ``call.prefix`` output ids forced at the first steps (every item; greedy after them: a
    forced step records the forced id and its probability, and the model's own top-k; without a prefix the model's
    ``forced_bos_id``, when it has one, is forced at the first step: ``forced_ids``; its ``forced_eos_id`` at the
    last step: ``core.decoding.generation_rules``), ``call.cache``. The model's generation rules ban ids per step
    (``apply_bans``): the recorded probabilities and top-k are what the model chose among.
    What each step chose is recorded too (``output.*`` sites), so the Trace alone can replay the steps.
    memory: the encoder's output for ``src`` (B, Ts, D) when the caller has it already (e.g. one source shared by
    many rows); None = encode here.
    ``call.vocab``: (S,) sorted ids, the only ones scored (a lexical shortlist: the softmax is over them, as in the
    engine that ships it; a forced id outside it gets probability 0); None = every id. Recorded ids are vocabulary
    ids."""
    cfg = model.config
    call = call.begin(model)  # once: every step runs with the same (ablation makes its recorder here)
    recorder, vocab, prefix, use_cache = call.recorder, call.vocab, forced_ids(cfg, call.prefix), call.cache
    B = src.shape[0]
    if memory is None:
        memory = model.encode(src, src_keep, call)  # (B, Ts, D)
    cross_keep = _padded_or_none(src_keep)
    tokens = torch.full((B, 1), cfg.bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)
    state = DecoderState.empty(cfg.n_decoder_layers) if use_cache else None
    k = min(call.top_k, cfg.tgt_vocab_size if vocab is None else vocab.shape[0])
    blocked = suppressed_columns(cfg, vocab, src.device)
    n_steps = max_steps(cfg, call.max_len, src.shape[1])
    generator: torch.Generator | None = None  # made at the first step (``call.sampling``'s seed)
    for step in range(n_steps):
        if use_cache:
            logits = model.decode(tokens[:, -1:], memory, cross_keep, call, state=state)[:, -1]  # (B, V|S)
        else:
            if recorder is not None:
                recorder.restart_decoder()  # keeps the previous pass's last rows as its step rows
            logits = model.decode(tokens, memory, cross_keep, call)[:, -1]  # (B, V|S)
        probs = step_probs(cfg, logits, tokens, vocab, blocked, src)  # (B, V|S)
        top_probs, top_columns = probs.topk(k, dim=-1)  # (B, k)
        top_ids = vocab_ids(top_columns, vocab)
        next_ids, chosen, taken = top_ids[:, 0], top_probs[:, 0], top_columns[:, 0]  # (B,)
        drawn = None
        if call.sampling is not None:  # drawn, not taken: its recorded probability is still the model's own
            if generator is None:
                generator = call.sampling.generator(probs.device)
            drawn = draw(probs, call.sampling, generator)
            taken = drawn.columns
            next_ids, chosen = vocab_ids(taken, vocab), probs.gather(-1, taken[:, None])[:, 0]
        forced = forced_id(cfg, prefix, step, n_steps)
        if forced is not None:  # a forced step
            next_ids = torch.full_like(next_ids, forced)
            column, listed = columns_of(next_ids[:1], vocab)
            chosen = probs[:, column[0]] * listed[0]  # 0 for an id outside the shortlist
            taken = torch.full_like(taken, int(column[0]))
        next_ids = next_ids.masked_fill(finished, cfg.eos_id)
        if recorder is not None:
            recorder.output(next_ids, chosen, top_ids, top_probs)
            if drawn is not None:  # what the draw did, beside it (a forced step: the forced id's column)
                recorder.draw(drawn.arrays(probs, top_columns, taken, chosen))
        yield StepOutput(step, next_ids, chosen, top_ids, top_probs)
        tokens = torch.cat([tokens, next_ids[:, None]], dim=1)  # (B, t + 1)
        finished |= next_ids == cfg.eos_id
        if bool(finished.all()):
            break
    # Without the cache the recorder keeps the last full pass, i.e. the final sequence's decoder inputs.


def greedy(model: Transformer, src: Tensor, src_keep: Tensor, call: Call, memory: Tensor | None = None) -> DecodeResult:
    """Run ``iter_greedy`` to the end."""
    steps = list(iter_greedy(model, src, src_keep, call, memory))
    B = src.shape[0]
    start = torch.full((B, 1), model.config.bos_id, dtype=torch.long, device=src.device)
    generated = torch.stack([s.token_ids for s in steps], dim=1) if steps else start[:, :0]  # (B, n)
    return DecodeResult(torch.cat([start, generated], dim=1), _lengths(generated, model.config.eos_id), steps)


def _padded_or_none(keep: Tensor) -> Tensor | None:
    """``keep`` if some source position is padding, else None: checked once per call, not once per step."""
    return None if bool(keep.all()) else keep


def _lengths(generated: Tensor, eos_id: int) -> list[int]:
    out = []
    for row in generated.tolist():
        out.append(row.index(eos_id) + 1 if eos_id in row else len(row))
    return out


@torch.no_grad()
def beam_search(
    model: Transformer, src: Tensor, src_keep: Tensor, call: Call, history: list[BeamStep] | None = None
) -> list[int]:
    """Beam search for one sentence (src (1, Ts)). Returns the generated ids (eos included if produced).

    One loop for every checkpoint; how hypotheses finish, when the search stops and which finished one wins is
    the model's finishing policy (``ModelConfig.beam``, ``core.decoding.beam_finish``): "lab" keeps the
    ``call.beam_size`` best extensions at every step and finishes those ending in eos (they are not extended);
    "transformers" reproduces ``generate(num_beams=...)`` (``beam_size`` hypotheses always live, a pool of the best
    finished ones, ``early_stopping``). Finished hypotheses rank by log-prob / length**``call.alpha`` (None: the
    model's ``length_penalty``). With beam_size=1 the lab policy is exactly greedy decoding. At most ``max_steps``
    steps (``call.max_len``, None: ``default_max_len`` of the source; within a learned position table). The ids
    ``forced_ids`` names are forced at the first steps and the model's ``forced_eos_id`` at the last, adding
    log-probability 0 (as transformers' ``ForcedBOSTokenLogitsProcessor`` / ``ForcedEOSTokenLogitsProcessor`` do);
    the model's generation rules ban ids per hypothesis (``apply_bans``, -inf); candidates of log-probability -inf
    are never kept.

    history: a list that receives one ``BeamStep`` per step (every hypothesis, its score, the pruned next best,
    each live beam's cross-attention); None (the default) records nothing and runs the fast path (the call's
    recorder is not used: the winner is traced by one teacher-forced pass).
    ``call.vocab``: (S,) sorted ids, the only ones scored (a lexical shortlist), as in ``iter_greedy``.
    """
    if src.shape[0] != 1:
        raise ValueError("beam_search decodes one sentence at a time (src batch of 1)")
    cfg = model.config
    call = call.with_recorder(None).begin(model)  # the beams' own recorders come per step, below
    vocab, max_len = call.vocab, max_steps(cfg, call.max_len, src.shape[1])  # within a learned table
    finish = finishing(cfg, call.beam_size, call.alpha, max_len)
    memory = model.encode(src, src_keep, call)  # (1, Ts, D)
    cross_keep = _padded_or_none(src_keep)
    state = DecoderState.empty(cfg.n_decoder_layers) if call.cache else None
    blocked = suppressed_columns(cfg, vocab, src.device)
    first = forced_ids(cfg, call.prefix)
    tokens = torch.full((1, 1), cfg.bos_id, dtype=torch.long, device=src.device)  # (beams, t)
    scores = torch.zeros(1, device=src.device)  # (beams,)
    for step in range(max_len):
        n = tokens.shape[0]
        mem, keep = memory.expand(n, -1, -1), None if cross_keep is None else cross_keep.expand(n, -1)
        recorder = None if history is None else Recorder(model)  # this step's attention, per beam
        step_call = call if recorder is None else call.with_recorder(recorder)
        if state is not None:
            logits = model.decode(tokens[:, -1:], mem, keep, step_call, state=state)[:, -1]
        else:
            logits = model.decode(tokens, mem, keep, step_call)[:, -1]  # (beams, V|S)
        token_logp = step_logprobs(cfg, logits, tokens, vocab, blocked, src)  # (beams, V|S)
        forced = forced_id(cfg, first, step, max_len)
        if forced is not None:  # only the forced id, at log-probability 0
            column, _ = columns_of(torch.tensor([forced], device=src.device), vocab)
            token_logp = torch.full_like(token_logp, float("-inf")).index_fill_(-1, column, 0.0)
        logp = token_logp + scores[:, None]  # (beams, V|S)
        V = logp.shape[-1]
        top_scores, flat = logp.view(-1).topk(min(finish.width, logp.numel()))  # (c,) best first
        possible = torch.isfinite(top_scores)  # -inf: a banned id, or not the forced one
        top_scores, flat = top_scores[possible], flat[possible]
        origin, ids = flat // V, vocab_ids(flat % V, vocab)
        ended, alive = finish.select((ids == cfg.eos_id).tolist(), last=step + 1 == max_len)
        if history is not None and recorder is not None:
            kept = flat[sorted({*ended, *alive})]
            scored = _Scored(tokens, scores, token_logp, logp)
            history.append(_beam_step(step, scored, kept, recorder, cfg.eos_id, vocab))
        for j in ended:
            finish.add(top_scores[j], tokens[origin[j], 1:].tolist() + [int(ids[j])])
        if finish.done(step, top_scores[alive]):
            break
        index = origin[alive]
        tokens = torch.cat([tokens[index], ids[alive][:, None]], dim=1)
        scores = top_scores[alive]
        if state is not None:
            state.reorder(index, same_source=True)  # the beams of one sentence
    return finish.best(tokens[:, 1:], scores)


class _Scored(NamedTuple):
    """One beam-search step's hypotheses and what they scored: the n live hypotheses ``tokens`` (n, t) (start token
    first), their cumulative log-probabilities ``scores`` (n,), each next id's log-probability ``token_logp``
    (n, V|S) and the extended hypotheses' scores ``logp`` = scores + token_logp (n, V|S)."""

    tokens: Tensor
    scores: Tensor
    token_logp: Tensor
    logp: Tensor


def _beam_step(
    step: int, scored: _Scored, kept: Tensor, recorder: Recorder, eos_id: int, vocab: Tensor | None
) -> BeamStep:
    """The record of one beam-search step: the kept candidates ``kept`` (flat indices into logp (n, V)), then the
    next best ones that were pruned (up to as many again), and each live beam's cross-attention rows."""
    tokens, scores, token_logp, logp = scored
    n, V = logp.shape
    best = logp.view(-1).topk(min(2 * kept.shape[0], n * V)).indices  # (c,)
    seen = set(kept.tolist())
    pruned = [int(i) for i in best.tolist() if int(i) not in seen and bool(torch.isfinite(logp.view(-1)[i]))]
    flat = torch.cat([kept, torch.tensor(pruned, dtype=kept.dtype, device=kept.device)])  # (c,)
    parents, columns = flat // V, flat % V
    ids = vocab_ids(columns, vocab)
    trace = recorder.freeze()
    n_layers = trace.shape.n_decoder_layers
    cross = np.stack(
        [trace.arrays[attention_array("cross", layer, "weights")][:, :, -1] for layer in range(n_layers)], axis=1
    )
    finished = np.zeros(flat.shape[0], dtype=np.bool_)
    finished[: kept.shape[0]] = (ids[: kept.shape[0]] == eos_id).cpu().numpy()
    return BeamStep(
        step=step,
        tokens=tokens[:, 1:].cpu().numpy(),
        scores=scores.float().cpu().numpy(),
        candidate_ids=ids.cpu().numpy(),
        candidate_parents=parents.cpu().numpy(),
        candidate_logp=token_logp[parents, columns].cpu().numpy(),
        candidate_scores=logp[parents, columns].cpu().numpy(),
        n_kept=int(kept.shape[0]),
        finished=finished,
        cross_attention=cross,  # (n, L, H, Ts)
    )
