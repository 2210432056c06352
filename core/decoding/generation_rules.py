"""The generation rules a Hugging Face folder sets, applied as transformers' ``generate`` applies them.

Five of transformers 5.23's logits processors change which token is chosen on the folders this lab imports
(bart-large-cnn: min_length 56, no_repeat_ngram_size 3, forced_eos_token_id 2; mBART-50 and Opus-MT: a forced eos;
fine-tunes: repetition_penalty, encoder_no_repeat_ngram_size).
``ModelConfig`` carries their settings (0 / None: off, every checkpoint trained here), and greedy decoding, beam
search and the teacher-forced pass that records a beam's winner all go through this module:

``banned`` (``MinLengthLogitsProcessor``, ``NoRepeatNGramLogitsProcessor``): after the decoder inputs ``tokens``
    (N, t), the start token included (transformers' ``input_ids`` of an encoder-decoder model), eos is banned while
    t < ``min_length`` (so at the first ``min_length - 1`` output steps), and every id that would complete an n-gram
    of ``no_repeat_ngram_size`` tokens already in ``tokens`` is banned. ``core.decoding.search.apply_bans`` gives a
    banned id probability 0 (greedy, the recorded probabilities) or log-probability -inf (beam search), after the
    softmax: the other ids keep the model's own probabilities, as transformers' beam search applies its processors to
    the log-softmax (greedy picks the same id either way).

``banned`` also bans, with ``encoder_no_repeat_ngram_size`` (``EncoderNoRepeatNGramLogitsProcessor``), every id that
    would complete an n-gram of that size of the SOURCE ids (the encoder's input, framing included) whose first
    n - 1 ids are the decoder inputs' last n - 1.

``penalise`` (``RepetitionPenaltyLogitsProcessor``): the score of every id already among the decoder inputs (start
    token included) is divided by ``repetition_penalty`` where it is positive and multiplied where negative. It
    changes scores rather than banning: greedy decoding penalises the logits (the recorded probabilities are the
    softmax of what it chose among), beam search the log-probabilities, as transformers' two loops do.

``forced_id`` (``ForcedBOSTokenLogitsProcessor``, ``ForcedEOSTokenLogitsProcessor``): the id a step is forced to:
    the call's forced first ids (a prefix, or the model's ``forced_bos_id``), and ``forced_eos_id`` at the last step
    a call allows (``max_len``, counted in output ids; transformers' ``max_length`` counts the start token too, so
    its ``max_length - 1`` is our ``max_len``). Where both fall on one step eos wins, as in transformers' processor
    list. A forced step records the forced id, its probability and the model's own top-k (after the bans); in beam
    search it adds log-probability 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ..config import ModelConfig


def is_penalty(value: Any) -> bool:
    """Whether ``value`` can be a repetition_penalty: a finite number above 0 (1: off)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")


def bans_on(config: ModelConfig) -> bool:
    """Whether some rule of ``banned`` is on (else decoding skips it)."""
    return bool(config.min_length or config.no_repeat_ngram_size or config.encoder_no_repeat_ngram_size)


def banned(config: ModelConfig, tokens: Tensor, source: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(rows, ids), each (n,): hypothesis ``rows[i]`` may not choose ``ids[i]`` next (module docstring).
    tokens: (N, t) the decoder inputs so far, the start token first; source: (N | 1, Ts) the source ids each row
    translates (needed when ``encoder_no_repeat_ngram_size`` is on)."""
    rows, ids = _ngram_bans(tokens, tokens, config.no_repeat_ngram_size)
    if config.encoder_no_repeat_ngram_size:
        if source is None:
            raise ValueError("banned: the model's encoder_no_repeat_ngram_size needs the source ids (source=)")
        more = _ngram_bans(source.expand(tokens.shape[0], -1), tokens, config.encoder_no_repeat_ngram_size)
        rows, ids = torch.cat([rows, more[0]]), torch.cat([ids, more[1]])
    if tokens.shape[1] < config.min_length:
        every = torch.arange(tokens.shape[0], device=tokens.device)
        rows, ids = torch.cat([rows, every]), torch.cat([ids, torch.full_like(every, config.eos_id)])
    return rows, ids


def _ngram_bans(history: Tensor, tokens: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """(rows, ids): the last id of every n-gram in a row of ``history`` (N, T) whose first n - 1 ids are the last
    n - 1 of the same row of ``tokens`` (N, t) (what the next id would repeat); empty when ``n`` is 0, the history
    is shorter than ``n`` or the tokens shorter than ``n`` - 1 (for no_repeat_ngram_size the history is the tokens
    themselves, whose own tail window is one id short and never matched)."""
    T, t = history.shape[1], tokens.shape[1]
    if n == 0 or T < n or t < n - 1:
        empty = torch.zeros(0, dtype=torch.long, device=tokens.device)
        return empty, empty
    windows = history.unfold(1, n, 1)  # (N, T - n + 1, n)
    tail = tokens[:, t + 1 - n :]  # (N, n - 1)
    rows, at = (windows[..., :-1] == tail[:, None]).all(-1).nonzero(as_tuple=True)  # (m,) each
    return rows, windows[rows, at, -1]


def penalise(config: ModelConfig, scores: Tensor, tokens: Tensor, vocab: Tensor | None = None) -> Tensor:
    """``scores`` (N, V|S) of the next id after the decoder inputs ``tokens`` (N, t), with ``repetition_penalty``
    applied to the ids among the tokens (module docstring); ``scores`` itself when it is off. vocab: the ids of the
    last axis (S,) for a shortlist (an id outside it is not scored)."""
    penalty = config.repetition_penalty
    if penalty == 1.0:
        return scores
    columns, listed = columns_of(tokens, vocab)  # (N, t) each
    rows = torch.arange(tokens.shape[0], device=tokens.device)[:, None].expand_as(tokens)[listed]
    columns = columns[listed]
    picked = scores[rows, columns]
    out = scores.clone()
    out[rows, columns] = torch.where(picked < 0, picked * penalty, picked / penalty)
    return out


def columns_of(ids: Tensor, vocab: Tensor | None) -> tuple[Tensor, Tensor]:
    """Where ``ids`` (any shape) sit on the scores' last axis, and whether they are there at all: the ids
    themselves (all there), or their places in the sorted shortlist ``vocab`` (an id outside it: a valid column,
    False; the engine gives it probability 0)."""
    if vocab is None:
        return ids, torch.ones_like(ids, dtype=torch.bool)
    columns = torch.searchsorted(vocab, ids).clamp_(max=vocab.shape[0] - 1)
    return columns, vocab[columns] == ids


def repeating_ids(tokens: Sequence[int], n: int) -> list[int]:
    """The ids one hypothesis may not choose next under ``no_repeat_ngram_size`` = ``n`` (the rule ``banned``
    applies), after its decoder inputs ``tokens`` (start token first), each once, in the order their n-grams
    first occur: what a page says a step banned, read from a trace's ids."""
    row = torch.tensor([list(tokens)], dtype=torch.long)
    _, ids = _ngram_bans(row, row, n)
    return list(dict.fromkeys(int(i) for i in ids))


def forced_id(config: ModelConfig, forced: Sequence[int], step: int, max_len: int) -> int | None:
    """The id output step ``step`` (0-based) is forced to, or None: ``forced_eos_id`` at the last of ``max_len``
    steps, else ``forced[step]`` (the call's forced first ids)."""
    if config.forced_eos_id is not None and step + 1 == max_len:
        return config.forced_eos_id
    return forced[step] if step < len(forced) else None


def rules_in_force(config: ModelConfig) -> dict[str, Any]:
    """The rules that are on, for a trace's meta (``meta['generation_rules']``; empty when none is): min_length and
    ``eos_banned_steps`` (eos is banned at output steps 0 .. eos_banned_steps - 1), no_repeat_ngram_size,
    encoder_no_repeat_ngram_size, repetition_penalty, and forced_eos_id (forced at the last step a call allows)."""
    rules: dict[str, Any] = {}
    if config.min_length > 1:
        rules |= {"min_length": config.min_length, "eos_banned_steps": config.min_length - 1}
    if config.no_repeat_ngram_size:
        rules["no_repeat_ngram_size"] = config.no_repeat_ngram_size
    if config.encoder_no_repeat_ngram_size:
        rules["encoder_no_repeat_ngram_size"] = config.encoder_no_repeat_ngram_size
    if config.repetition_penalty != 1.0:
        rules["repetition_penalty"] = config.repetition_penalty
    if config.forced_eos_id is not None:
        rules["forced_eos_id"] = config.forced_eos_id
    return rules


def hf_settings(config: ModelConfig) -> dict[str, Any]:
    """The rules as transformers' generation_config.json names them: what the exporters write (off written as
    off, so the folder's model config cannot put one back) and the importers read back
    (``core.importers.hf_common.generation_rules``)."""
    return {
        "min_length": config.min_length,
        "no_repeat_ngram_size": config.no_repeat_ngram_size,
        "encoder_no_repeat_ngram_size": config.encoder_no_repeat_ngram_size,
        "repetition_penalty": config.repetition_penalty,
        "forced_eos_token_id": config.forced_eos_id,
    }
