"""The teacher-forced pass that records given output ids, each position as its decoding step records it.

``Bundle._run`` runs it on beam search's winners (the search itself records nothing: one pass traces the winner)
and on ids a call is given (``teacher_forced``, ``record_more``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .decoding.generation_rules import columns_of
from .decoding.search import position_scores, step_logprobs, step_probs, suppressed_columns, vocab_ids
from .recording.call import Call
from .transformer.model import Transformer


def forced_pass(model: Transformer, src: Tensor, keep: Tensor, rows: Sequence[Sequence[int]], call: Call) -> None:
    """A teacher-forced pass over the output ids ``rows`` (one row per source of ``src`` (B, Ts)), recorded by
    ``call``'s recorder, each position's output as a decoding step records it (``search.step_probs``, or
    ``search.step_logprobs`` for beam search's winner: the same functions, with the ids the model's generation rules
    ban after that position's inputs). A row shorter than the longest goes on with eos, as a greedy batch's
    finished item does (an empty row is eos)."""
    cfg, recorder, vocab = model.config, call.recorder, call.vocab
    assert recorder is not None
    width = max(1, *(len(row) for row in rows))
    outputs = [[*row, *[cfg.eos_id] * (width - len(row))] for row in rows]
    ids = torch.tensor(outputs, dtype=torch.long, device=src.device)  # (B, Tt)
    tgt = torch.tensor([[cfg.bos_id, *row[:-1]] for row in outputs], dtype=torch.long, device=src.device)
    logits = model(src, tgt, call, src_keep=keep)  # (B, Tt, V|S)
    # each position's distribution as its decoding step made it: greedy's, or beam search's log-probabilities
    step = step_logprobs if call.beam_size > 1 else step_probs
    scores = position_scores(step, cfg, logits, tgt, vocab, suppressed_columns(cfg, vocab, src.device), src)
    probs = scores.exp() if step is step_logprobs else scores  # (B, Tt, V|S)
    top_p, top_i = probs.topk(min(call.top_k, probs.shape[-1]), dim=-1)  # (B, Tt, k)
    columns, listed = columns_of(ids, vocab)
    chosen = probs.gather(-1, columns[..., None])[..., 0] * listed  # (B, Tt); 0 outside the shortlist
    top_i = vocab_ids(top_i, vocab)
    for t in range(ids.shape[1]):
        recorder.output(ids[:, t], chosen[:, t], top_i[:, t], top_p[:, t])
