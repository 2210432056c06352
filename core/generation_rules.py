"""The generation rules a Hugging Face folder sets, applied as transformers' ``generate`` applies them.

Three of transformers 5.23's logits processors change which token is chosen on the folders this lab imports
(bart-large-cnn: min_length 56, no_repeat_ngram_size 3, forced_eos_token_id 2; mBART-50 and Opus-MT: a forced eos).
``ModelConfig`` carries their settings (0 / None: off, every checkpoint trained here), and greedy decoding, beam
search and the teacher-forced pass that records a beam's winner all go through this module:

``banned`` (``MinLengthLogitsProcessor``, ``NoRepeatNGramLogitsProcessor``): after the decoder inputs ``tokens``
    (N, t), the start token included (transformers' ``input_ids`` of an encoder-decoder model), eos is banned while
    t < ``min_length`` (so at the first ``min_length - 1`` output steps), and every id that would complete an n-gram
    of ``no_repeat_ngram_size`` tokens already in ``tokens`` is banned. ``core.decoding.apply_bans`` gives a banned
    id probability 0 (greedy, the recorded probabilities) or log-probability -inf (beam search), after the softmax:
    the other ids keep the model's own probabilities, as transformers' beam search applies its processors to the
    log-softmax (greedy picks the same id either way).

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

from .config import ModelConfig


def banned(config: ModelConfig, tokens: Tensor) -> tuple[Tensor, Tensor]:
    """(rows, ids), each (n,): hypothesis ``rows[i]`` may not choose ``ids[i]`` next (module docstring).
    tokens: (N, t) the decoder inputs so far, the start token first."""
    rows, ids = _repeated_ngrams(tokens, config.no_repeat_ngram_size)
    if tokens.shape[1] < config.min_length:
        every = torch.arange(tokens.shape[0], device=tokens.device)
        rows, ids = torch.cat([rows, every]), torch.cat([ids, torch.full_like(every, config.eos_id)])
    return rows, ids


def _repeated_ngrams(tokens: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """(rows, ids): the last id of every n-gram in a row of ``tokens`` (N, t) whose first n - 1 ids are the row's
    last n - 1 (what the next id would repeat); empty when ``n`` is 0 or longer than the rows."""
    N, t = tokens.shape
    if n == 0 or t < n:
        empty = torch.zeros(0, dtype=torch.long, device=tokens.device)
        return empty, empty
    windows = tokens.unfold(1, n, 1)  # (N, t - n + 1, n)
    tail = tokens[:, t + 1 - n :]  # (N, n - 1); the window at the tail itself is one id short, never matched
    rows, at = (windows[..., :-1] == tail[:, None]).all(-1).nonzero(as_tuple=True)  # (m,) each
    return rows, windows[rows, at, -1]


def repeating_ids(tokens: Sequence[int], n: int) -> list[int]:
    """The ids one hypothesis may not choose next under ``no_repeat_ngram_size`` = ``n`` (the rule ``banned``
    applies), after its decoder inputs ``tokens`` (start token first), each once, in the order their n-grams
    first occur: what a page says a step banned, read from a trace's ids."""
    _, ids = _repeated_ngrams(torch.tensor([list(tokens)], dtype=torch.long), n)
    return list(dict.fromkeys(int(i) for i in ids))


def forced_id(config: ModelConfig, forced: Sequence[int], step: int, max_len: int) -> int | None:
    """The id output step ``step`` (0-based) is forced to, or None: ``forced_eos_id`` at the last of ``max_len``
    steps, else ``forced[step]`` (the call's forced first ids)."""
    if config.forced_eos_id is not None and step + 1 == max_len:
        return config.forced_eos_id
    return forced[step] if step < len(forced) else None


def rules_in_force(config: ModelConfig) -> dict[str, Any]:
    """The rules that are on, for a trace's meta (``meta['generation_rules']``; empty when none is): min_length and
    ``eos_banned_steps`` (eos is banned at output steps 0 .. eos_banned_steps - 1), no_repeat_ngram_size, and
    forced_eos_id (forced at the last step a call allows)."""
    rules: dict[str, Any] = {}
    if config.min_length > 1:
        rules |= {"min_length": config.min_length, "eos_banned_steps": config.min_length - 1}
    if config.no_repeat_ngram_size:
        rules["no_repeat_ngram_size"] = config.no_repeat_ngram_size
    if config.forced_eos_id is not None:
        rules["forced_eos_id"] = config.forced_eos_id
    return rules


def hf_settings(config: ModelConfig) -> dict[str, Any]:
    """The rules as transformers' generation_config.json names them: what the exporters write (off written as
    off, so the folder's model config cannot put one back) and the importers read back
    (``core.importers.hf_config.generation_rules``)."""
    return {
        "min_length": config.min_length,
        "no_repeat_ngram_size": config.no_repeat_ngram_size,
        "forced_eos_token_id": config.forced_eos_id,
    }
