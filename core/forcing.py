"""The teacher-forced pass that records given output ids, each position as its decoding step records it.

``Bundle._run`` runs it on beam search's winners (the search itself records nothing: one pass traces the winner)
and on ids a call is given (``teacher_forced``, ``record_more``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .decoding.generation_rules import bans_on, columns_of, penalise
from .decoding.search import apply_bans, suppress, vocab_ids
from .recording.call import Call
from .transformer.model import Transformer


def forced_pass(model: Transformer, src: Tensor, keep: Tensor, rows: Sequence[Sequence[int]], call: Call) -> None:
    """A teacher-forced pass over the output ids ``rows`` (one row per source of ``src`` (B, Ts)), recorded by
    ``call``'s recorder, each position's output as a decoding step records it (with the ids the model's
    generation rules ban after that position's inputs, ``apply_bans``). A row shorter than the longest goes on
    with eos, as a greedy batch's finished item does (an empty row is eos)."""
    cfg, recorder, vocab = model.config, call.recorder, call.vocab
    assert recorder is not None
    width = max(1, *(len(row) for row in rows))
    outputs = [[*row, *[cfg.eos_id] * (width - len(row))] for row in rows]
    ids = torch.tensor(outputs, dtype=torch.long, device=src.device)  # (B, Tt)
    tgt = torch.tensor([[cfg.bos_id, *row[:-1]] for row in outputs], dtype=torch.long, device=src.device)
    logits = model(src, tgt, call, src_keep=keep).float()  # (B, Tt, V|S)
    if cfg.repetition_penalty == 1.0:
        probs = torch.softmax(logits, dim=-1)
    else:  # each position penalised as its decoding step was: greedy's logits, beam search's log-probabilities
        beam = call.beam_size > 1
        scores = torch.log_softmax(logits, dim=-1) if beam else logits
        for t in range(ids.shape[1]):
            scores[:, t] = penalise(cfg, scores[:, t], tgt[:, : t + 1], vocab)
        probs = scores.exp() if beam else torch.softmax(scores, dim=-1)
    probs = suppress(probs, cfg, 0.0, vocab)  # (B, Tt, V|S)
    if bans_on(cfg):  # each position's bans, as its decoding step had them
        for t in range(ids.shape[1]):
            probs[:, t] = apply_bans(probs[:, t], cfg, tgt[:, : t + 1], 0.0, vocab, src)
    top_p, top_i = probs.topk(min(call.top_k, probs.shape[-1]), dim=-1)  # (B, Tt, k)
    columns, listed = columns_of(ids, vocab)
    chosen = probs.gather(-1, columns[..., None])[..., 0] * listed  # (B, Tt); 0 outside the shortlist
    top_i = vocab_ids(top_i, vocab)
    for t in range(ids.shape[1]):
        recorder.output(ids[:, t], chosen[:, t], top_i[:, t], top_p[:, t])
