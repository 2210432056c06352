"""Value zeroing (Mohebbi et al., EACL 2023, "Quantifying Context Mixing in Transformers"): how much each token's
layer output depends on each other token.

For one layer and one attention block, token j's value vector is zeroed in every head of the block (its attention
weights untouched) and the whole layer is run again from its recorded input; token i's score is the cosine distance
between its changed and its original layer output. This follows the authors' code exactly where it says something:

* hmohebbi/ValueZeroing, ``scoring/value_zeroing.py`` and ``modeling/customized_modeling_bert.py`` (the encoder,
  BERT): ``value_layer[:, :, t] = 0`` after the value projection (its bias included), the layer run from the
  previous layer's original output, ``cosine_distances(changed, original).diagonal()`` (1 - cos, clipped to [0, 2]),
  each row divided by its sum over every j, **j = i included**; the layers composed by ``compute_joint_attention(...,
  res=False)``: rollout with no residual added, joint_l = A_l @ joint_(l-1);
* hmohebbi/ContextMixingASR, ``scoring/valueZeroing.py`` (their encoder-decoder extension, Whisper, EMNLP 2023):
  decoder self-attention keeps only j <= i ("tokens < t have not seen t yet"; here: the applied mask, so the
  causal mask switched off keeps every j); cross-attention zeroes source token j's value in that layer's
  cross-attention and measures the decoder layer's output, from the recorded decoder input and the encoder's final
  output; each kind's rows normalised alone (a row of zeros stays zeros); the last layer of a stack compared
  after the stack's final norm.

Ours, not theirs: (1) one batched run of a layer per block — row 0 unchanged (the baseline, so both sides of each
distance come from the same arithmetic), row r zeroes one token (``core.ScaleValues(rows=...)``) — instead of a
loop; (2) the whole-model composition of the decoder, which neither repository has: per decoder layer the raw
distances of its cross- and self-attention are normalised together (one row over [source | target], both measured
on the same output), then state_l = C_l [R_enc | 0] + D_l state_(l-1), from state_0 = [0 | I] (each decoder input
is itself) and R_enc the encoder's composition. An SSRU decoder (Marian's) has no self-attention values to zero:
its self block is skipped, the prefix gets no share, and the composed rows are the last layer's cross rows
through R_enc.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..bundle import Bundle
from ..config import InferenceOptions, Record
from ..recording.call import Call
from ..recording.interventions import ScaleValues
from ..recording.recorder import Recorder
from ..recording.trace import Trace
from ..sites import AttentionKind, analysis_site, attention_site, layer_input_site, memory_site, output_site
from ..transformer.blocks import Masks
from .alignment import normalised
from .alti import compose_encoder as compose_alti
from .attribution import spearman

BATCH_ROWS = 64  # the most rows one run of a layer takes (a baseline row and up to 63 zeroed tokens)
Run = Callable[[Tensor, Call], Tensor]  # one layer run on its input x (B, T, D) with a call -> its output (B, T, D)


@dataclass(frozen=True)
class ValueZeroing:
    """Value zeroing of one translation.

    layers: kind ('encoder' | 'decoder' | 'cross') -> (L, Tq, Tk) per-layer scores, each row summing to 1 (0 where
        nothing changed); distances: the same before normalising (cosine distances). No 'decoder' kind for an SSRU.
    encoder: (Ts, Ts) the encoder composed; source (Tt, Ts) and target (Tt, Tt): each decoder position's last layer
        output over the source tokens and the decoder inputs (rows of [source | target] sum to 1).
    attention: kind -> (L, Tq, Tk) the heads' mean attention weights, and keys: kind -> (Tq, Tk) the keys each query
        may attend (the applied mask), for ``attention_agreement``.
    """

    source_pieces: tuple[str, ...]
    target_pieces: tuple[str, ...]  # the output pieces
    prefix_pieces: tuple[str, ...]  # the decoder inputs: the start piece, then the outputs before the last
    layers: Mapping[AttentionKind, np.ndarray]
    distances: Mapping[AttentionKind, np.ndarray]
    encoder: np.ndarray
    source: np.ndarray
    target: np.ndarray
    attention: Mapping[AttentionKind, np.ndarray]
    keys: Mapping[AttentionKind, np.ndarray]
    options: InferenceOptions
    notes: tuple[str, ...] = field(default=())

    PER_KIND = ("layers", "distances", "attention", "keys")
    WHOLE = ("encoder", "source", "target")

    def to_arrays(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """For ``Trace.with_analysis``: 'analysis.zeroing.<what>[.<kind>]' arrays and the pieces as details."""
        arrays = {analysis_site("zeroing", what): np.asarray(getattr(self, what)) for what in self.WHOLE}
        for what in self.PER_KIND:
            arrays |= {analysis_site("zeroing", what, k): np.asarray(v) for k, v in getattr(self, what).items()}
        details = {
            "source_pieces": list(self.source_pieces),
            "target_pieces": list(self.target_pieces),
            "prefix_pieces": list(self.prefix_pieces),
            "kinds": list(self.layers),
            "options": self.options.to_dict(),
            "notes": list(self.notes),
        }
        return arrays, {"zeroing": details}

    @classmethod
    def from_trace(cls, trace: Trace) -> ValueZeroing | None:
        """The value zeroing stored in ``trace`` (``to_arrays``); None when it holds none."""
        details = dict(trace.meta.get("analysis", {})).get("zeroing")
        if not details or analysis_site("zeroing", "source") not in trace:
            return None
        kinds: list[AttentionKind] = list(details["kinds"])

        def per_kind(what: str) -> dict[AttentionKind, np.ndarray]:
            return {k: np.asarray(trace[analysis_site("zeroing", what, k)]) for k in kinds}

        def whole(what: str) -> np.ndarray:
            return np.asarray(trace[analysis_site("zeroing", what)])

        return cls(
            tuple(details["source_pieces"]),
            tuple(details["target_pieces"]),
            tuple(details["prefix_pieces"]),
            layers=per_kind("layers"),
            distances=per_kind("distances"),
            encoder=whole("encoder"),
            source=whole("source"),
            target=whole("target"),
            attention=per_kind("attention"),
            keys=per_kind("keys"),
            options=InferenceOptions.from_dict(dict(details["options"])),
            notes=tuple(details["notes"]),
        )

    def attention_agreement(self, kind: AttentionKind) -> np.ndarray:
        """(L, Tq) Spearman rho between each value-zeroing row of ``kind`` and the same row of the heads' mean
        attention, over the keys the query may attend (NaN with fewer than two, or a constant row)."""
        return rank_agreement(self.layers[kind], self.attention[kind], self.keys[kind])


def mean_agreement(rho: np.ndarray) -> float | None:
    """The mean of ``rank_agreement``'s rows that have a value (None when none has)."""
    return float(np.nanmean(rho)) if np.isfinite(rho).any() else None


def rank_agreement(scores: np.ndarray, reference: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    """Spearman rho (ties get their mean rank) between each row of ``scores`` and of ``reference`` (..., Tq, Tk),
    over the keys ``keep`` (broadcastable to them, True = compared; None = all): (..., Tq), NaN where fewer than two
    keys are kept or a row is constant. E.g. value zeroing against ALTI+'s per-layer rows."""
    a, b = np.broadcast_arrays(np.asarray(scores, np.float64), np.asarray(reference, np.float64))
    kept = np.ones(a.shape, bool) if keep is None else np.broadcast_to(np.asarray(keep, bool), a.shape)
    out = np.full(a.shape[:-1], np.nan)
    for index in np.ndindex(*a.shape[:-1]):
        k = kept[index]
        if k.sum() >= 2:
            out[index] = spearman(a[index][k], b[index][k])  # the lab's one Spearman (attribution's)
    return out


def compose_encoder(layers: np.ndarray) -> np.ndarray:
    """(L, S, S) per-layer rows -> (S, S): A_(L-1) ... A_0 (the authors' ``compute_joint_attention(res=False)``,
    ALTI+'s ``alti.compose_encoder``)."""
    return compose_alti(list(torch.from_numpy(np.asarray(layers, np.float64)))).numpy()


def compose_decoder(
    cross: np.ndarray, self_attn: np.ndarray | None, encoder: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The decoder composed (our extension, see the module): raw distances cross (L, T, S) and self (L, T, T) (None:
    an SSRU decoder), the encoder composed (S, S) -> (source (T, S), target (T, T))."""
    L, T, S = cross.shape
    state = np.hstack([np.zeros((T, S)), np.eye(T)])  # (T, S + T): each decoder input is itself
    through_encoder = np.hstack([encoder, np.zeros((S, T))])  # (S, S + T): the memory over the inputs
    for layer in range(L):
        own = np.zeros((T, T)) if self_attn is None else self_attn[layer]
        mixed = normalised(np.concatenate([cross[layer], own], axis=-1))  # (T, S + T), rows sum to 1
        state = mixed[:, :S] @ through_encoder + mixed[:, S:] @ state
    return state[:, :S], state[:, S:]


def cosine_distance(changed: Tensor, original: Tensor) -> Tensor:
    """1 - cos between (..., D) rows, clipped to [0, 2] (sklearn's ``cosine_distances``), in float64."""
    cos = F.cosine_similarity(changed.double(), original.double(), dim=-1)
    return (1.0 - cos).clamp(0.0, 2.0)


def forced_trace(
    bundle: Bundle, text: str, translation: str | None, options: InferenceOptions, output_ids: Sequence[int] | None
) -> Trace:
    """One teacher-forced pass recorded with the activations: on ``output_ids`` (a run's own, eos included: its
    text need not tokenize back to them), on ``translation``, or on the model's own greedy translation."""
    record = Record(qkv=False, activations=True)
    if output_ids is None and translation is not None:
        return bundle.teacher_forced(text, translation, options, record=record).trace
    if output_ids is None:
        output_ids = bundle.translate(text, options, record=Record(qkv=False)).output_ids
    return bundle.teacher_forced(text, options=options, target_ids=output_ids, record=record).trace


def value_zeroing(
    bundle: Bundle,
    text: str,
    *,
    options: InferenceOptions | None = None,
    translation: str | None = None,
    output_ids: Sequence[int] | None = None,
) -> ValueZeroing:
    """Value zeroing of every attention block for ``text``'s translation (the model's own greedy one,
    ``translation``, or a run's own ``output_ids``: a page's translation, not decoded again), teacher-forced in one
    recorded pass; each layer is then run once per ``BATCH_ROWS`` zeroed tokens through the bundle's fast weights,
    with ``options`` (heads switched off stay off)."""
    options = bundle.check_options(options)
    trace = forced_trace(bundle, text, translation, options, output_ids)
    model, device, kinds = bundle.model, bundle.device, trace.kinds
    keys = {kind: np.asarray(trace.mask(kind), bool) for kind in kinds}  # (Tq, Tk), True = may attend
    masks = {kind: None if k.all() else torch.tensor(k, device=device)[None] for kind, k in keys.items()}
    T, S = keys["cross"].shape
    n_enc, n_dec = len(model.encoder_layers), len(model.decoder_layers)
    distances: dict[AttentionKind, list[np.ndarray]] = {kind: [] for kind in kinds}
    with torch.inference_mode():
        plain = Call(options, Recorder(model, record=False), bundle.fast).begin(model)
        enc_bias = model.position_bias("src", (S, S), plain)  # (1, H, S, S) or None (T5's relative bias)
        dec_masks = Masks(masks.get("decoder"), masks["cross"], model.position_bias("tgt", (T, T), plain))
        memory = _tensor(trace, memory_site(), device)[None]  # (1, S, D): the encoder's output as the decoder reads it

        def encoder(layer: int) -> Run:
            module = model.encoder_layers[layer]
            norm = model.encoder_norm if layer == n_enc - 1 else nn.Identity()  # the stack's last output is normed
            return lambda x, call: norm(module(x, masks["encoder"], call, enc_bias))

        def decoder(layer: int) -> Run:
            module = model.decoder_layers[layer]
            norm = model.decoder_norm if layer == n_dec - 1 else nn.Identity()
            return lambda x, call: norm(module(x, memory.expand(x.shape[0], -1, -1), dec_masks, call))

        for layer in range(n_enc):
            x = _tensor(trace, layer_input_site("encoder", layer), device)
            distances["encoder"].append(_zeroed(bundle, options, x, layer, encoder(layer), {"encoder": S})["encoder"])
        widths: dict[AttentionKind, int] = {"cross": S, "decoder": T} if "decoder" in kinds else {"cross": S}
        for layer in range(n_dec):
            x = _tensor(trace, layer_input_site("decoder", layer), device)
            for kind, d in _zeroed(bundle, options, x, layer, decoder(layer), widths).items():
                distances[kind].append(d)
    raw = {kind: np.stack(d) * keys[kind] for kind, d in distances.items()}  # a key the query cannot see: 0
    encoder_composed = compose_encoder(normalised(raw["encoder"]))
    source, target = compose_decoder(raw["cross"], raw.get("decoder"), encoder_composed)
    notes = () if "decoder" in kinds else (SSRU_NOTE,)
    return ValueZeroing(
        source_pieces=tuple(trace.src_tokens),
        target_pieces=tuple(bundle.tokenizer.piece(int(i)) for i in trace[output_site("ids")]),
        prefix_pieces=tuple(trace.tgt_tokens),
        layers={kind: normalised(d) for kind, d in raw.items()},
        distances=raw,
        encoder=encoder_composed,
        source=source,
        target=target,
        attention={k: np.stack([trace.attention(k, i).mean(0) for i in range(trace.n_layers[k])]) for k in kinds},
        keys=keys,
        options=options,
        notes=notes,
    )


SSRU_NOTE = (
    "An SSRU decoder has no self-attention values to zero: the decoder inputs get no share, and the composed rows "
    "are the last layer's cross-attention rows through the encoder."
)


def _tensor(trace: Trace, name: str, device: torch.device) -> Tensor:
    return torch.tensor(np.asarray(trace[name]), device=device)


def _zeroed(
    bundle: Bundle, options: InferenceOptions, x: Tensor, layer: int, run: Run, widths: Mapping[AttentionKind, int]
) -> dict[AttentionKind, np.ndarray]:
    """Run one layer (``run(x, call)``: (B, T, D) -> (B, T, D)) from its recorded input x (T, D) with each key j of
    each block (kind -> its number of keys, ``widths``) zeroed alone, ``BATCH_ROWS`` rows at a time, row 0 of each
    run unchanged: kind -> (T, Tk) cosine distances, [i, j] the change of query i's output when key j is zeroed."""
    rows = [(kind, j) for kind, n in widths.items() for j in range(n)]
    out = {kind: np.zeros((x.shape[0], n)) for kind, n in widths.items()}
    for start in range(0, len(rows), BATCH_ROWS - 1):
        chunk = rows[start : start + BATCH_ROWS - 1]
        zero = [ScaleValues(attention_site(kind, layer), (j,), rows=(r,)) for r, (kind, j) in enumerate(chunk, 1)]
        call = Call(options, Recorder(bundle.model, record=False, interventions=zero), bundle.fast).begin(bundle.model)
        y = run(x[None].expand(len(chunk) + 1, -1, -1), call)  # (1 + rows, T, D)
        changed = cosine_distance(y[1:], y[:1]).cpu().numpy()  # (rows, T): [r, i]
        for (kind, j), column in zip(chunk, changed, strict=True):
            out[kind][:, j] = column
    return out
