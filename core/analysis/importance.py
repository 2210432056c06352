"""Head importance: what each attention head contributes to ONE translation, measured by switching it off.

For a source sentence and its translation, every head of one kind (encoder, decoder or cross) is switched off
alone, each in its own row of ONE batched teacher-forced pass (``ScaleHeads(..., rows=(row,))``): the change in
the translation's log-probability says how much the model relied on that head for this output. A second batched
pass is not needed to say whether the output itself changes: greedy decoding follows the translation for as long
as each position's most likely token is the translation's, so the first position where a row's teacher-forced
argmax differs is where its greedy output would change. Faithful by construction
(it is the model's own output under the intervention), but local: one sentence, one head at a time — heads that
back each other up each look unimportant alone.

For long sentences ``head_importance_estimate`` gives every head's effect from ONE forward and backward pass: the
first-order (Taylor) estimate of switching a head off, -d log p / d g at g = 1 for a gate g on the head's output
(Michel et al. 2019, "Are Sixteen Heads Really Better than One?"; "attribution patching" in TransformerLens'
terms). It is an estimate: it says nothing about whether the output changes, and a head whose removal moves the
model far from where the gradient was taken can be misjudged; ``HeadImportance.exact`` says which one you hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..bundle import Bundle
from ..config import InferenceOptions
from ..decoding.search import suppress
from ..fast.weights import FastWeights
from ..recording.call import Call
from ..recording.interventions import ScaleHeads
from ..recording.recorder import Recorder
from ..recording.trace import ModelShape, Trace
from ..sites import AttentionKind, analysis_site, array_of, attention_site, layer_input_site, parse_attention_site
from ..transformer.model import Transformer

Head = tuple[AttentionKind, int, int]


@dataclass(frozen=True)
class HeadEffect:
    """One head switched off alone (layer and head 0-based)."""

    kind: AttentionKind
    layer: int
    head: int
    delta_logprob: float  # log p(translation | head off) - log p(translation), nats (negative: the head helped)
    output_changed: bool | None  # the greedy translation differs with the head off (None: not measured, estimate)
    first_change: int | None  # the output position where it first differs (None: unchanged or not measured)

    @property
    def label(self) -> str:
        return f"{self.kind} L{self.layer + 1} H{self.head + 1}"


@dataclass(frozen=True)
class HeadImportance:
    """Every head's effect on one translation: measured (``exact``: each head switched off alone) or estimated
    from one gradient pass."""

    base_logprob: float  # log p(translation) with every head on, nats
    n_tokens: int  # tokens of the translation scored (eos included)
    effects: tuple[HeadEffect, ...]
    shape: ModelShape
    exact: bool = True

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

    def to_arrays(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """For ``Trace.with_analysis``: per kind the (layers, heads) Δ log p and first changed position (-1: none)."""
        arrays: dict[str, np.ndarray] = {}
        for kind in sorted({e.kind for e in self.effects}):
            first = np.full((self.shape.n_layers[kind], self.shape.n_heads), -1, dtype=np.int64)
            for e in self.effects:
                if e.kind == kind and e.first_change is not None:
                    first[e.layer, e.head] = e.first_change
            arrays[analysis_site("importance", kind, "delta")] = self.matrix(kind)
            arrays[analysis_site("importance", kind, "first_change")] = first
        meta = {"base_logprob": self.base_logprob, "n_tokens": self.n_tokens, "exact": self.exact}
        return arrays, {"importance": meta}

    @classmethod
    def from_trace(cls, trace: Trace) -> HeadImportance | None:
        """The importance stored in ``trace`` by ``Trace.with_analysis``, or None."""
        info = dict(trace.meta.get("analysis", {})).get("importance")
        if not info:
            return None
        exact = bool(info.get("exact", True))
        effects = []
        for kind in trace.shape.kinds:
            name = analysis_site("importance", kind, "delta")
            if name not in trace:
                continue
            delta, first = trace[name], trace[analysis_site("importance", kind, "first_change")]
            for layer in range(delta.shape[0]):
                for h in range(delta.shape[1]):
                    change = int(first[layer, h])
                    changed = (change >= 0) if exact else None
                    effects.append(
                        HeadEffect(kind, layer, h, float(delta[layer, h]), changed, change if change >= 0 else None)
                    )
        return cls(float(info["base_logprob"]), int(info["n_tokens"]), tuple(effects), trace.shape, exact)

    def to_dict(self) -> dict[str, Any]:
        return {
            "base_logprob": self.base_logprob,
            "n_tokens": self.n_tokens,
            "exact": self.exact,
            "heads": [
                {
                    "kind": e.kind,
                    "layer": e.layer,
                    "head": e.head,
                    "delta_logprob": e.delta_logprob,
                    "output_changed": e.output_changed,
                    "first_change": e.first_change,
                }
                for e in self.ranking()
            ],
        }


def _first_changes(differs: torch.Tensor) -> list[int | None]:
    """Per row of (B, Tt) flags: the first position flagged, or None."""
    return [int(row.nonzero()[0]) if bool(row.any()) else None for row in differs]


POSITIONS_PER_PROJECTION = 256  # decoder states projected onto the vocabulary at a time: (256, V) floats


def _score_states(
    model: Transformer, states: torch.Tensor, out_ids: list[int], fast: FastWeights | None
) -> tuple[torch.Tensor, list[int | None]]:
    """Per row of final decoder states (B, Tt, D): log p(out_ids) (B,) (the softmax over the whole vocabulary, as
    decoding reports it), and the first position whose greedy choice (never a ``suppress_ids`` token) is not the
    translation's (None: greedy decoding would write the translation unchanged). Projected
    POSITIONS_PER_PROJECTION positions at a time: no (B, Tt, V) logits are ever held."""
    B, Tt, D = states.shape
    flat = states.reshape(B * Tt, D)
    target = torch.tensor(out_ids, device=states.device).repeat(B)  # (B * Tt,)
    never = torch.tensor(model.config.suppress_ids, dtype=torch.long, device=states.device)
    logp = torch.empty(B * Tt, device=states.device)
    differs = torch.empty(B * Tt, dtype=torch.bool, device=states.device)
    call = Call(fast=fast)
    for i in range(0, B * Tt, POSITIONS_PER_PROJECTION):
        logits = model.logits(flat[i : i + POSITIONS_PER_PROJECTION], call).float()  # (n, V)
        t = target[i : i + POSITIONS_PER_PROJECTION]
        top, best = logits.max(-1)  # one pass for the largest logit and where it is
        if len(never):
            bad = torch.isin(best, never)  # rare: a suppressed id on top; greedy takes the best of the rest
            if bool(bad.any()):
                best[bad] = suppress(logits[bad], model.config, float("-inf")).argmax(-1)
        chosen = logits.gather(-1, t[:, None])[:, 0]
        logsumexp = top + logits.sub_(top[:, None]).exp_().sum(-1).log()  # (in place: the logits are done with)
        logp[i : i + len(t)] = chosen - logsumexp
        differs[i : i + len(t)] = best != t
    return logp.view(B, Tt).sum(-1), _first_changes(differs.view(B, Tt))


def _kinds(shape: ModelShape, kinds: tuple[AttentionKind, ...] | None) -> tuple[AttentionKind, ...]:
    kinds = shape.kinds if kinds is None else kinds
    for kind in kinds:
        if kind not in shape.kinds:
            raise ValueError(f"this model has no {kind} attention (it has {', '.join(shape.kinds)})")
    return kinds


def _inputs(model: Transformer, src_ids: list[int], out_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """src (1, Ts) and the teacher-forced decoder inputs (1, Tt) on the model's device."""
    if not out_ids:
        raise ValueError("head importance needs a translation of at least one token (eos counts)")
    device = next(model.parameters()).device
    src1 = torch.tensor([src_ids], dtype=torch.long, device=device)  # (1, Ts)
    tgt1 = torch.tensor([[model.config.bos_id] + out_ids[:-1]], dtype=torch.long, device=device)  # (1, Tt)
    return src1, tgt1


@torch.no_grad()
def head_importance(
    bundle: Bundle,
    src_ids: list[int],
    out_ids: list[int],
    *,
    options: InferenceOptions = InferenceOptions(),
    kinds: tuple[AttentionKind, ...] | None = None,
) -> HeadImportance:
    """Switch off each head alone and measure the greedy translation ``out_ids`` (eos included) of ``src_ids``.

    One batched teacher-forced pass per kind, a row per head, scored from the decoder's final states a few
    positions at a time (no (rows, Tt, V) logits). The encoder runs once for the decoder and cross-attention
    kinds (their switches leave it unchanged), and an encoder head's rows resume at its own layer. ``options``
    are the other switches in effect (heads they switch off stay off in every row). kinds: which kinds
    (default: all the model has). Runs through ``bundle``'s model and fast weights (as its runs).
    """
    options.whole_vocabulary("head importance")
    model, fast = bundle.model, bundle.fast
    shape = ModelShape.of(model.config)
    kinds = _kinds(shape, kinds)
    src1, tgt1 = _inputs(model, src_ids, out_ids)
    keep1 = torch.ones_like(src1, dtype=torch.bool)  # one unpadded sentence per row
    streams = Recorder(model, activations=True) if "encoder" in kinds else None  # encoder layers' inputs
    memory1 = model.encode(src1, keep1, call=Call(options=options, recorder=streams, fast=fast))  # (1, Ts, D)
    base_logp, _ = _score_states(
        model, model.decoder_states(tgt1, memory1, None, call=Call(options=options, fast=fast)), out_ids, fast
    )
    base = float(base_logp[0])
    layer_inputs = streams.freeze() if streams is not None else None
    n_heads = shape.n_heads
    effects: list[HeadEffect] = []
    for kind in kinds:
        heads = [(layer, h) for layer in range(shape.n_layers[kind]) for h in range(n_heads)]
        rows = len(heads)
        rec: Recorder | None
        if kind == "encoder":  # a head of layer l leaves the layers below it alone: layer l's rows start there
            assert layer_inputs is not None  # recorded above whenever the encoder's heads are asked for
            parts = []
            for layer in range(shape.n_layers[kind]):
                x = torch.from_numpy(np.array(layer_inputs[layer_input_site("encoder", layer)]))[None]  # (1, Ts, D)
                x = x.to(src1.device)
                switches = [ScaleHeads(attention_site(kind, layer), (h,), 0.0, rows=(h,)) for h in range(n_heads)]
                parts.append(
                    model.encode(
                        src1.expand(n_heads, -1),
                        keep1.expand(n_heads, -1),
                        call=Call(
                            options=options, recorder=Recorder(model, record=False, interventions=switches), fast=fast
                        ),
                        start=(layer, x.expand(n_heads, -1, -1)),
                    )
                )
            memory = torch.cat(parts)  # (rows, Ts, D), row = layer * n_heads + head
            rec = None  # the decoder runs unswitched on each row's memory (the options' own switches still apply)
        else:
            memory = memory1.expand(rows, -1, -1)
            rec = Recorder(
                model,
                record=False,
                interventions=[
                    ScaleHeads(attention_site(kind, layer), (h,), 0.0, rows=(row,))
                    for row, (layer, h) in enumerate(heads)
                ],
            )
        states = model.decoder_states(
            tgt1.expand(rows, -1), memory, None, call=Call(options=options, recorder=rec, fast=fast)
        )
        scores, changes = _score_states(model, states, out_ids, fast)
        for row, (layer, h) in enumerate(heads):
            change = changes[row]
            effects.append(HeadEffect(kind, layer, h, float(scores[row]) - base, change is not None, change))
    return HeadImportance(base, len(out_ids), tuple(effects), shape)


def head_importance_estimate(
    bundle: Bundle,
    src_ids: list[int],
    out_ids: list[int],
    *,
    options: InferenceOptions = InferenceOptions(),
    kinds: tuple[AttentionKind, ...] | None = None,
) -> HeadImportance:
    """Every head's effect on log p(``out_ids`` | ``src_ids``) estimated from ONE forward and backward pass: a gate g
    of ones multiplies each head's output, and switching the head off (g: 1 -> 0) is estimated to first order as
    -d log p / d g. ``exact`` is False on the result; ``output_changed`` is None (not measured). Costs about three
    teacher-forced passes, against one row per head for ``head_importance``. Runs through ``bundle``'s model and fast
    weights (with gradients on, every matrix takes the reference ``F.linear``)."""
    options.whole_vocabulary("head importance")
    model = bundle.model
    shape = ModelShape.of(model.config)
    kinds = _kinds(shape, kinds)
    src1, tgt1 = _inputs(model, src_ids, out_ids)
    sites = [attention_site(kind, layer) for kind in kinds for layer in range(shape.n_layers[kind])]
    rec = Recorder(model, record=False, keep_grad=[array_of(site, "heads") for site in sites])
    with torch.enable_grad():
        logits = model(
            src1,
            tgt1,
            call=Call(options=options, recorder=rec, fast=bundle.fast),
            src_keep=torch.ones_like(src1, dtype=torch.bool),
        )
        target = torch.tensor(out_ids, device=logits.device)
        logp = torch.log_softmax(logits[0].float(), -1).gather(-1, target[:, None]).sum()  # log p(translation)
        grads = torch.autograd.grad(logp, [rec.leaf(array_of(site, "heads")) for site in sites])
    effects: list[HeadEffect] = []
    for site, grad in zip(sites, grads, strict=True):
        kind, layer = parse_attention_site(site)
        for h in range(shape.n_heads):
            effects.append(HeadEffect(kind, layer, h, -float(grad[0, h]), None, None))
    return HeadImportance(float(logp.detach()), len(out_ids), tuple(effects), shape, exact=False)


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
