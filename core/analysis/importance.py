"""Head importance: what each attention head contributes to ONE translation, measured by switching it off.

For a source sentence and its translation, every head of one kind (encoder, decoder or cross) is switched off
alone, each in its own row of ONE batched teacher-forced pass (``ScaleHeads(..., rows=(row,))``): the change in
the translation's log-probability says how much the model relied on that head for this output. A second batched
pass decodes greedily with each head off, to say whether the output itself changes. Faithful by construction
(it is the model's own output under the intervention), but local: one sentence, one head at a time — heads that
back each other up each look unimportant alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..config import InferenceOptions
from ..decoding import greedy
from ..fast import FastWeights
from ..interventions import ScaleHeads
from ..model import Transformer
from ..recorder import Recorder
from ..sites import AttentionKind, attention_site
from ..trace import ModelShape

Head = tuple[AttentionKind, int, int]


@dataclass(frozen=True)
class HeadEffect:
    """One head switched off alone (layer and head 0-based)."""

    kind: AttentionKind
    layer: int
    head: int
    delta_logprob: float  # log p(translation | head off) - log p(translation), nats (negative: the head helped)
    output_changed: bool | None  # the greedy translation differs with the head off (None: not checked)
    output_ids: tuple[int, ...] | None  # that greedy translation's ids (eos included), when checked

    @property
    def label(self) -> str:
        return f"{self.kind} L{self.layer + 1} H{self.head + 1}"


@dataclass(frozen=True)
class HeadImportance:
    """Every head's effect on one translation."""

    base_logprob: float  # log p(translation) with every head on, nats
    n_tokens: int  # tokens of the translation scored (eos included)
    effects: tuple[HeadEffect, ...]
    shape: ModelShape

    def matrix(self, kind: AttentionKind) -> np.ndarray:
        """(layers, heads) change in log-probability for ``kind`` (NaN where the model has no such head)."""
        out = np.full((self.shape.n_layers[kind], self.shape.n_heads), np.nan)
        for e in self.effects:
            if e.kind == kind:
                out[e.layer, e.head] = e.delta_logprob
        return out

    def ranking(self) -> list[HeadEffect]:
        """Most important first: the heads whose removal lowers the translation's log-probability most."""
        return sorted(self.effects, key=lambda e: (e.delta_logprob, e.label))

    def top(self, k: int) -> list[Head]:
        return [(e.kind, e.layer, e.head) for e in self.ranking()[:k]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "base_logprob": self.base_logprob,
            "n_tokens": self.n_tokens,
            "heads": [
                {
                    "kind": e.kind,
                    "layer": e.layer,
                    "head": e.head,
                    "delta_logprob": e.delta_logprob,
                    "output_changed": e.output_changed,
                }
                for e in self.ranking()
            ],
        }


def _score_rows(
    model: Transformer,
    src: torch.Tensor,
    out_ids: list[int],
    options: InferenceOptions,
    recorder: Recorder | None,
    fast: FastWeights | None,
) -> torch.Tensor:
    """Log-probability of ``out_ids`` (eos included) given ``src`` (B, Ts), teacher-forced, per batch row: (B,)."""
    cfg = model.config
    B = src.shape[0]
    dec_inputs = [cfg.bos_id] + out_ids[:-1]
    tgt = torch.tensor([dec_inputs], dtype=torch.long, device=src.device).expand(B, -1)  # (B, Tt)
    keep = torch.ones_like(src, dtype=torch.bool)  # one unpadded sentence per row
    logits = model(src, tgt, options=options, recorder=recorder, src_keep=keep, fast=fast)  # (B, Tt, V)
    logp = torch.log_softmax(logits.float(), dim=-1)
    target = torch.tensor(out_ids, device=src.device)[None, :, None].expand(B, -1, 1)
    return logp.gather(-1, target)[..., 0].sum(-1)  # (B,)


@torch.no_grad()
def head_importance(
    model: Transformer,
    src_ids: list[int],
    out_ids: list[int],
    *,
    options: InferenceOptions = InferenceOptions(),
    kinds: tuple[AttentionKind, ...] | None = None,
    check_output: bool = True,
    max_len: int | None = None,
    fast: FastWeights | None = None,
) -> HeadImportance:
    """Switch off each head alone and measure the translation ``out_ids`` (eos included) of ``src_ids``.

    One batched teacher-forced pass per kind (a row per head); with ``check_output`` one batched greedy decode
    per kind too, which says whether the output changes. ``options`` are the other switches in effect (heads it
    already switches off stay off in every row). kinds: which kinds (default: all the model has).
    """
    if not out_ids:
        raise ValueError("head_importance needs a translation of at least one token (eos counts)")
    shape = ModelShape.of(model.config)
    kinds = shape.kinds if kinds is None else kinds
    for kind in kinds:
        if kind not in shape.kinds:
            raise ValueError(f"this model has no {kind} attention (it has {', '.join(shape.kinds)})")
    device = next(model.parameters()).device
    src1 = torch.tensor([src_ids], dtype=torch.long, device=device)  # (1, Ts)
    base = float(_score_rows(model, src1, out_ids, options, None, fast)[0])
    max_len = max_len or len(out_ids) + 10
    effects: list[HeadEffect] = []
    for kind in kinds:
        heads = [(layer, h) for layer in range(shape.n_layers[kind]) for h in range(shape.n_heads)]
        switches = [
            ScaleHeads(attention_site(kind, layer), (h,), 0.0, rows=(row,)) for row, (layer, h) in enumerate(heads)
        ]
        src = src1.expand(len(heads), -1)  # (rows, Ts)
        scores = _score_rows(model, src, out_ids, options, Recorder(model, record=False, interventions=switches), fast)
        outputs: list[tuple[int, ...] | None] = [None] * len(heads)
        if check_output:
            rec = Recorder(model, record=False, interventions=switches)
            keep = torch.ones_like(src, dtype=torch.bool)
            result = greedy(model, src, keep, options=options, max_len=max_len, recorder=rec, top_k=1, fast=fast)
            outputs = [tuple(result.tokens[row, 1 : 1 + n].tolist()) for row, n in enumerate(result.lengths)]
        for row, (layer, h) in enumerate(heads):
            out = outputs[row]
            effects.append(
                HeadEffect(
                    kind, layer, h, float(scores[row]) - base, None if out is None else out != tuple(out_ids), out
                )
            )
    return HeadImportance(base, len(out_ids), tuple(effects), shape)


def all_heads_but(shape: ModelShape, keep: list[Head]) -> frozenset[Head]:
    """Every head of the model except ``keep``: the ``ablate`` set that keeps only those heads on."""
    kept = set(keep)
    return frozenset(
        (kind, layer, h)
        for kind in shape.kinds
        for layer in range(shape.n_layers[kind])
        for h in range(shape.n_heads)
        if (kind, layer, h) not in kept
    )
