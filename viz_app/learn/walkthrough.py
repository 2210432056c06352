"""One attention sub-layer followed by hand: the values core recorded (``Bundle.record_more``: each block's input x,
its q, k, v, each head's output and the stream after the sub-layer) and the model's weights as the one layer
function reads them (``Transformer.layer_weights``). The page does the arithmetic between two recorded values —
q = x·W_Q + b, the softmax, the heads joined by W_O, the residual — in float64 numpy and checks each result against
the next recorded value; nothing of the layer is run again here. No Streamlit."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

import core
from core.anatomy.positions import relative_bias
from core.sites import AttentionKind, Side, Stack, attention_array, ids_site, layer_input_site, memory_site, stack_of
from core.transformer.blocks import DecoderWeights, Norm
from core.transformer.layers import norm_of
from viz_app.figures import learn


def as_numpy(t: torch.Tensor | None, n: int) -> np.ndarray:
    """A parameter as float64 numpy (zeros of length n for a missing bias)."""
    return np.zeros(n) if t is None else t.detach().float().cpu().numpy().astype(np.float64)


def normalize(h: np.ndarray, norm: Norm) -> np.ndarray:
    """A norm of the model (``core.transformer.blocks.Norm``: LayerNorm or RMSNorm) applied by hand to h (..., D)."""
    d = int(norm.weight.shape[0])
    if norm.rms:
        return learn.rms_norm(h, as_numpy(norm.weight, d), norm.eps)
    return learn.layer_norm(h, as_numpy(norm.weight, d), as_numpy(norm.bias, d), norm.eps)


@dataclass(frozen=True)
class Softmax:
    """One query's attention by hand: q·k (Tk,), divided by √d_k when the model does, plus the position bias
    (zeros without one), masked (−inf where blocked), the weights and the weighted sum of the values (d_k,)."""

    dots: np.ndarray
    bias: np.ndarray  # (Tk,) the relative position bias added (T5); zeros without one
    scaled: np.ndarray  # the scores s: q·k (÷ √d_k) + bias, before the mask
    masked: np.ndarray
    weights: np.ndarray
    output: np.ndarray


def softmax_by_hand(
    q: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    mask: np.ndarray,
    *,
    scale: bool = True,
    bias: np.ndarray | None = None,
) -> Softmax:
    """``q`` (d_k,), ``keys`` and ``values`` (Tk, d_k), ``mask`` (Tk,) True = may attend; ``scale``: divide by √d_k
    (T5 does not); ``bias`` (Tk,): the position bias added to the scores (T5's; None = none). A fully masked row
    gets all-zero weights, as the engine records it (softmax would give NaN)."""
    dots = keys @ q  # (Tk,)
    bias = np.zeros_like(dots) if bias is None else np.asarray(bias, dtype=np.float64)
    scaled = (dots / math.sqrt(q.shape[0]) if scale else dots) + bias
    masked = np.where(mask, scaled, -np.inf)
    if np.isfinite(masked).any():
        e = np.exp(masked - masked[np.isfinite(masked)].max())
        weights = e / e.sum()
    else:
        weights = np.zeros_like(masked)
    return Softmax(dots, bias, scaled, masked, weights, weights @ values)


class Walkthrough:
    """Attention block (kind, layer) of one recorded run: what core recorded around it and the weights it ran on."""

    def __init__(self, bundle: core.Bundle, trace: core.Trace, kind: AttentionKind, layer: int) -> None:
        self.cfg, self.trace, self._model = bundle.config, trace, bundle.model
        self.kind, self.layer, self.pre = kind, layer, bundle.config.norm == "pre"
        self.stack: Stack = stack_of(kind)
        weights = bundle.model.layer_weights(self.stack, layer)
        if kind == "cross":
            assert isinstance(weights, DecoderWeights)
            self.attn, self.norm, self.sites = weights.cross, weights.cross_norm, weights.cross_sites
            self._before = weights.self_sites.out  # the stream this sub-layer adds to: after the self sub-layer's
        else:
            attn = weights.self_attn
            assert attn is not None
            self.attn, self.norm, self.sites = attn, weights.self_norm, weights.self_sites
            self._before = layer_input_site(self.stack, layer)
        self.d_head, self.d_value = self.cfg.d_head, self.cfg.d_value

    def recorded(self, site: str) -> np.ndarray:
        """The array core recorded at ``site`` in float64; the decoder's last pass when each step recomputed the
        prefix (no KV cache)."""
        x = np.asarray(self.trace[site], dtype=np.float64)
        n = self.trace[attention_array(self.kind, self.layer, "q")].shape[1]  # (H, Tq, dh): the queries recorded
        return x[-n:] if self.stack == "decoder" and site != memory_site() else x

    def stream(self, stack: Stack, layer: int) -> np.ndarray:
        """The residual stream entering ``stack`` layer ``layer`` (T, D) as recorded: the embedding + PE for the
        first."""
        x = np.asarray(self.trace[layer_input_site(stack, layer)], dtype=np.float64)
        if stack == "decoder":
            x = x[-self.trace[ids_site("tgt")].shape[-1] :]  # each recomputing step re-embeds the prefix: the last
        return x

    def stream_in(self) -> np.ndarray:
        """The stream h this sub-layer reads and adds its output to (Tq, D)."""
        return self.recorded(self._before)

    def inputs(self) -> tuple[np.ndarray, np.ndarray]:
        """What the queries read (Tq, D) and what the keys and values read (Tk, D), as recorded: the block's input x
        (the stream, normed first with pre-norm), and for cross-attention the encoder's output."""
        x = self.recorded(self.sites.x)
        return x, (self.recorded(memory_site()) if self.kind == "cross" else x)

    def input_by_hand(self) -> np.ndarray:
        """x from the recorded stream h by hand: the sub-layer's norm of h with pre-norm, h itself with post-norm."""
        h = self.stream_in()
        return normalize(h, self.norm) if self.pre else h

    def projection(self, name: Literal["q", "k", "v"], head: int) -> tuple[np.ndarray, np.ndarray]:
        """This head's slice of W_Q / W_K / W_V as the paper writes it, (D, d), and of its bias (d,)."""
        k, v = self.attn.kv.linears  # the reference path's weights: one matrix each
        _, weight, bias = {"q": self.attn.q, "k": k, "v": v}[name]
        size = self.d_value if name == "v" else self.d_head
        rows = slice(head * size, (head + 1) * size)
        return as_numpy(weight[rows], 0).T, as_numpy(None if bias is None else bias[rows], size)

    def output_projection(self) -> tuple[np.ndarray, np.ndarray]:
        """W_O as the paper writes it, (H·d_v, D), and b_O (D,) (zeros without a bias)."""
        _, weight, bias = self.attn.out
        return as_numpy(weight, 0).T, as_numpy(bias, int(weight.shape[0]))

    def project_heads(self, heads: np.ndarray) -> np.ndarray:
        """Heads' outputs (H, T, d_v) joined (T, H·d_v) and projected: · W_O + b_O -> (T, D)."""
        w, b = self.output_projection()
        return np.concatenate(list(heads), axis=-1) @ w + b

    def after(self, y: np.ndarray) -> tuple[str, np.ndarray, np.ndarray]:
        """The stream after this sub-layer by hand from its output y (Tq, D) — h + y with pre-norm, norm(h + y) with
        post-norm — and as recorded: (description, by hand, recorded)."""
        h = self.stream_in()
        by_hand = h + y if self.pre else normalize(h + y, self.norm)
        block = {"encoder": "self-attention", "decoder": "masked self-attention", "cross": "cross-attention"}[self.kind]
        return (
            f"the stream after the {block} sub-layer of {self.stack} layer {self.layer + 1}",
            by_hand,
            self.recorded(self.sites.out),
        )

    def position_bias(self, head: int, query: int, n_keys: int) -> np.ndarray | None:
        """(Tk,) the relative position bias ``head`` adds to ``query``'s scores, looked up in the model's learned
        table by each key's distance (None for cross-attention, or a model without one)."""
        if self.kind == "cross":
            return None
        found = relative_bias(self._model, self.stack, 1)
        if found is None:
            return None
        buckets = found.bucket_map(max(n_keys, query + 1))[query, :n_keys]  # (Tk,)
        return found.table[head, buckets]

    def embedding(self, side: Side, position: int) -> np.ndarray:
        """The token embedding at ``position`` of ``side``, times √d_model when the model scales it (D,); zeros for
        a decoder that starts from a zero vector."""
        table = self._model.src_embed if side == "src" else self._model.tgt_embed
        row = as_numpy(table.weight[int(self.trace[ids_site(side)][position])], 0) * self._model.embed_scale
        return np.zeros_like(row) if side == "tgt" and position == 0 and self.cfg.start == "zeros" else row

    def embedding_norm(self, side: Side, h: np.ndarray) -> np.ndarray:
        """The side's embedding norm (BART's layernorm_embedding) applied by hand to h (..., D)."""
        return normalize(h, norm_of(self._model.src_embed_norm if side == "src" else self._model.tgt_embed_norm))
