"""Score a checkpoint on the held-out Ding test split: sacreBLEU BLEU and chrF, greedy and beam 4."""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence

import sacrebleu
import torch
from torch import nn

from ..config import InferenceOptions
from ..decoding.search import beam_search, default_max_len, greedy, output_text, padded
from ..errors import InputError
from ..fast.weights import FastWeights
from ..recording.call import Call
from ..text.tokenizer import Tokenizer
from ..transformer.model import Transformer

# model -> (its matrices' (id, data_ptr) when copied, the copies): packing a model's weights costs about a second
# at d_model 512, paid once per model instead of once per call (training and distillation call again and again)
_FAST: weakref.WeakKeyDictionary[nn.Module, tuple[tuple[tuple[int, int], ...], FastWeights]] = (
    weakref.WeakKeyDictionary()
)


def fast_weights(model: Transformer) -> FastWeights:
    """``model``'s FastWeights, made again only when its matrices changed since the last call: written in place
    (an optimizer step, ``load_state_dict``: ``FastWeights.is_current``), replaced, or moved (``.to``, ``.half``)."""
    key = tuple((id(m.weight), m.weight.data_ptr()) for m in model.modules() if isinstance(m, nn.Linear))
    cached = _FAST.get(model)
    if cached is not None and cached[0] == key and cached[1].is_current():
        return cached[1]
    fast = FastWeights(model)  # packed copies of the weights as they are now; they hold the weights (ids stay theirs)
    _FAST[model] = (key, fast)
    return fast


def score(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Corpus BLEU and chrF (sacreBLEU defaults) of hypotheses against one reference each."""
    if not hypotheses or len(hypotheses) != len(references):
        raise InputError(f"nothing to score: {len(hypotheses)} outputs for {len(references)} references")
    bleu = sacrebleu.corpus_bleu(list(hypotheses), [list(references)])
    chrf = sacrebleu.corpus_chrf(list(hypotheses), [list(references)])
    return {"bleu": round(bleu.score, 2), "chrf": round(chrf.score, 2)}


@torch.inference_mode()
def translate_many(
    model: Transformer,
    tokenizer: Tokenizer,
    sentences: Sequence[str],
    *,
    beam_size: int = 1,
    max_tokens: int = 3000,
    max_source_tokens: int = 255,
    options: InferenceOptions = InferenceOptions(),
    counts: dict[str, int] | None = None,
) -> list[str]:
    """Translate many sentences (texts in input order): greedy with core's KV-cached decoder in batches sorted by
    length, each holding at most ``max_tokens`` padded source tokens, or beam search one sentence at a time.

    Sources are cut to ``max_source_tokens`` pieces (plus eos, and language codes where the tokenizer frames them).
    ``counts``, when given, receives {"source_tokens", "output_tokens"} (output counted up to and including eos),
    e.g. for throughput.
    """
    cfg = model.config
    device = next(model.parameters()).device
    fast = fast_weights(model)  # packed copies of the weights as they are now (made once while they stay so)
    encoded = [
        tokenizer.frame_source(ids[:max_source_tokens], cfg.eos_id) for ids in tokenizer.encode_batch(list(sentences))
    ]
    outputs: list[str] = [""] * len(sentences)
    n_out = 0

    def finish(i: int, ids: list[int]) -> None:
        nonlocal n_out
        n_out += len(ids)
        outputs[i] = output_text(tokenizer, ids, cfg.eos_id)

    if beam_size > 1:
        for i, ids in enumerate(encoded):
            src = torch.tensor([ids], device=device)
            finish(
                i,
                beam_search(
                    model,
                    src,
                    torch.ones_like(src, dtype=torch.bool),
                    call=Call(options=options, fast=fast, max_len=default_max_len(len(ids)), beam_size=beam_size),
                ),
            )
    else:
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and len(encoded[order[end]]) * (end - start + 1) <= max_tokens:
                end += 1
            idx = order[start:end]
            src, keep = padded([encoded[i] for i in idx], cfg.pad_id, device)  # (B, width) each
            width = src.shape[1]
            result = greedy(
                model, src, keep, call=Call(options=options, fast=fast, max_len=default_max_len(width), top_k=1)
            )  # tokens (B, 1 + n)
            for row, i in enumerate(idx):
                finish(i, result.tokens[row, 1 : 1 + result.lengths[row]].tolist())
            start = end
    if counts is not None:
        counts.update(source_tokens=sum(map(len, encoded)), output_tokens=n_out)
    return outputs


def evaluate_split(
    model: Transformer,
    tokenizer: Tokenizer,
    sources: Sequence[str],
    references: Sequence[str],
    beams: Sequence[int] = (1, 4),
) -> dict[str, dict[str, float]]:
    """{"greedy": {...}, "beam4": {...}} with bleu, chrf, seconds and the number of sentences."""
    results = {}
    for beam in beams:
        start = time.perf_counter()
        hyps = translate_many(model, tokenizer, sources, beam_size=beam)
        name = "greedy" if beam == 1 else f"beam{beam}"
        results[name] = {**score(hyps, references), "seconds": round(time.perf_counter() - start, 1), "n": len(hyps)}
    return results
