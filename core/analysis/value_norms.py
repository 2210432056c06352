"""Value-weighted norms (Kobayashi et al., 2020): how big a vector each key sends each query, per head and layer.

Attention weights say where a head looks; ``||alpha^h_ij f_h(x_j)||`` (f_h(x_j) = (x_j W_v^h + b_v^h) W_o^h, the key's
value through the head's part of the output projection) says how much it moves. A head switched off by the options
moves nothing: its norms are 0 (its weights are still shown). ``combined`` is the norm of the heads' sum,
``||sum_h alpha^h_ij f_h(x_j)||``, the vector ALTI starts from (``core.analysis.alti``).

Computed from the same recorded pass as ``contributions`` (``recorded_pass``), so it works under every switch; an
SSRU decoder has no self-attention, so only its cross-attention (and the encoder) have norms.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from ..bundle import Bundle
from ..config import InferenceOptions
from ..recording.trace import Trace
from ..transformer.model import Transformer
from .alti import head_vectors, value_vectors
from .decomposition import BlockKey, as_float64, attention_of, head_scale, recorded_pass, scored_ids


@dataclass(frozen=True)
class ValueNorms:
    """Per attention block (key ('encoder' | 'decoder' | 'cross', layer)): per-head norms (H, Tq, Tk), the heads'
    combined norm (Tq, Tk) and the attention weights (H, Tq, Tk) for comparison."""

    source_pieces: tuple[str, ...]
    target_pieces: tuple[str, ...]
    prefix_pieces: tuple[str, ...]
    heads: Mapping[BlockKey, np.ndarray]
    combined: Mapping[BlockKey, np.ndarray]
    weights: Mapping[BlockKey, np.ndarray]
    options: InferenceOptions


@torch.no_grad()
def trace_value_norms(
    model: Transformer, trace: Trace
) -> tuple[dict[BlockKey, np.ndarray], dict[BlockKey, np.ndarray]]:
    """Per-head (H, Tq, Tk) and combined (Tq, Tk) value-weighted norms of every attention block of ``trace`` (a
    pass recorded with q/k/v, ``recorded_pass``)."""
    heads: dict[BlockKey, np.ndarray] = {}
    combined: dict[BlockKey, np.ndarray] = {}
    for kind in trace.kinds:
        for layer in range(trace.n_layers[kind]):
            weights = as_float64(trace.attention(kind, layer))  # (H, Tq, Tk)
            values = as_float64(trace.qkv(kind, layer)[2])  # (H, Tk, dv)
            scale = head_scale(trace.options, kind, layer, weights.shape[0])
            w_o = attention_of(model, kind, layer).out_proj.weight.detach().cpu().double()
            sizes = value_vectors(values, w_o).norm(dim=-1)  # (H, Tk): ||f_h(x_j)||
            heads[(kind, layer)] = (weights * scale[:, None, None] * sizes[:, None, :]).numpy()
            combined[(kind, layer)] = head_vectors(weights, values, w_o, scale).norm(dim=-1).numpy()
    return heads, combined


def value_norms(
    bundle: Bundle,
    text: str,
    *,
    translation: str | None = None,
    options: InferenceOptions | None = None,
    truncate: bool = False,
) -> ValueNorms:
    """Value-weighted norms of every head for ``text``'s translation, scored as ``contributions`` scores it (the
    greedy translation, or ``translation`` teacher-forced; with the causal mask off, a greedy translation's
    decoder rows come from a pass over each token's own prefix)."""
    options = bundle.check_options(options)
    src_ids, out_ids, per_step = scored_ids(bundle, text, translation, options, truncate)
    steps = range(len(out_ids)) if per_step else [len(out_ids) - 1]
    runs = []
    for t in steps:
        trace, _ = recorded_pass(bundle, src_ids, out_ids[: t + 1], options)
        runs.append((trace, *trace_value_norms(bundle.model, trace)))
    trace, heads, combined = runs[-1]
    weights = {key: np.asarray(trace.attention(*key)) for key in heads}
    if per_step:  # decoder rows: row t of pass t, keys padded with 0
        T = len(out_ids)
        for key in [k for k in heads if k[0] != "encoder"]:
            heads[key] = _row_per_step([r[1][key] for r in runs], T)
            combined[key] = _row_per_step([r[2][key][None] for r in runs], T)[0]
            weights[key] = _row_per_step([np.asarray(r[0].attention(*key)) for r in runs], T)
    return ValueNorms(
        source_pieces=tuple(trace.src_tokens),
        target_pieces=tuple(bundle.tokenizer.piece(i) for i in out_ids),
        prefix_pieces=tuple(trace.tgt_tokens),
        heads=heads,
        combined=combined,
        weights=weights,
        options=options,
    )


def _row_per_step(arrays: list[np.ndarray], n: int) -> np.ndarray:
    """(H, n, Tk) from per-step (H, t + 1, Tk_t) arrays: row t of array t, keys right-padded with 0 to the widest."""
    width = max(a.shape[-1] for a in arrays)
    out = np.zeros((arrays[0].shape[0], n, width))
    for t, a in enumerate(arrays):
        out[:, t, : a.shape[-1]] = a[:, t]
    return out
