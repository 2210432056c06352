"""What each decoding step costs, with the key/value cache and without it (every step recomputing the prefix).

    cost = decoding_cost(config, src_len=7, out_len=5)          # or translation_cost(translation, config)
    cost.self_kv_bytes[t], cost.cross_kv_bytes                  # per decoder layer
    cost.macs_cached[t], cost.macs_uncached[t]                   # multiply-adds of step t, each way

Step t (0-based) reads decoder inputs 0..t (T = t + 1 of them) and predicts output t. Counted per decoder layer,
for one sentence, in multiply-adds (one multiply and one add; FLOPs are twice as many), matrix products only
(norms, softmax, activations and the residual additions are a few d_model-long vector operations per position):

    with the cache (only the new position)          without it (the whole prefix again)
    self-attention   4·d² + 2·T·d                   4·T·d² + 2·T²·d
    SSRU             2·d²                           2·T·d²
    cross-attention  2·d² + 2·Ts·d                  2·T·d² + 2·Ts·d² + 2·T·Ts·d
                     (+ 2·Ts·d² at step 0: the source's K and V, then kept)
    feed-forward     2·d·d_ff                       2·T·d·d_ff
    output           d·V                            T·d·V (core's decode projects every position; one is used)

where d = d_model, Ts the source length, and the attention products (Q·Kᵀ, then weights·V) are the 2·T·d and
2·Ts·d terms. The cache holds, per layer, the self-attention K and V of every position so far (2·T·d values, a
row more each step) and the cross-attention K and V of the source (2·Ts·d, made once). An SSRU decoder keeps no
growing cache: per layer one cell vector c (d values), overwritten each step, beside the source's K and V.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..config import ModelConfig
from ..results import Translation
from ..sites import ids_site, keep_site, output_site


def _frozen(a: np.ndarray | int, n: int) -> np.ndarray:
    """A read-only (n,) int64 array of ``a`` (a number: the same at every step)."""
    out = np.array(np.broadcast_to(a, (n,)), dtype=np.int64)
    out.flags.writeable = False
    return out


@dataclass(frozen=True)
class DecodingCost:
    """Per-step cost of decoding one sentence, each way. Arrays are (out_len,) int64, indexed by step t; byte counts
    are per decoder layer (``cache_bytes`` adds up all layers)."""

    src_len: int
    out_len: int
    n_layers: int
    decoder_self: str  # 'attention' or 'ssru'
    bytes_per_value: int  # the model's dtype: 4 for float32, 2 for float16
    keeps: str  # what the decoder keeps between steps, in words
    self_kv_bytes: np.ndarray  # after step t: K and V of the t + 1 positions so far (0 for an SSRU decoder)
    cross_kv_bytes: int  # K and V of the source, projected at step 0 and kept
    state_bytes: int  # an SSRU decoder's cell (d_model values); 0 for self-attention
    encoder_macs: int  # once per sentence, either way
    linear_cached: np.ndarray  # the decoder's weight products (Q, K, V, O, SSRU, feed-forward) at step t
    attention_cached: np.ndarray  # the attention products (Q·Kᵀ, weights·V) at step t
    output_cached: np.ndarray  # the vocabulary projection at step t
    linear_uncached: np.ndarray
    attention_uncached: np.ndarray
    output_uncached: np.ndarray

    @property
    def steps(self) -> np.ndarray:
        return np.arange(self.out_len)

    @property
    def cache_bytes(self) -> np.ndarray:
        """(out_len,) everything kept after step t, all layers."""
        return self.n_layers * (self.self_kv_bytes + self.cross_kv_bytes + self.state_bytes)

    @property
    def macs_cached(self) -> np.ndarray:
        return self.linear_cached + self.attention_cached + self.output_cached

    @property
    def macs_uncached(self) -> np.ndarray:
        return self.linear_uncached + self.attention_uncached + self.output_uncached

    @property
    def saving(self) -> float:
        """How many times more work the whole sentence's decoding does without the cache."""
        return float(self.macs_uncached.sum() / self.macs_cached.sum())


def dtype_bytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def decoding_cost(
    config: ModelConfig, *, src_len: int, out_len: int, dtype: torch.dtype = torch.float32
) -> DecodingCost:
    """The cost of ``out_len`` greedy steps over a source of ``src_len`` pieces (eos included), for one sentence."""
    if src_len < 1 or out_len < 1:
        raise ValueError(f"src_len and out_len must be at least 1, got {src_len} and {out_len}")
    d, ff, V, L, Ts = config.d_model, config.d_ff, config.tgt_vocab_size, config.n_decoder_layers, src_len
    T = np.arange(1, out_len + 1, dtype=np.int64)  # decoder inputs read at each step
    first = (T == 1).astype(np.int64)
    ssru = config.decoder_self == "ssru"
    b = dtype_bytes(dtype)

    self_linear = 2 * d * d if ssru else 4 * d * d  # SSRU: W and W_f; attention: Q, K, V, O
    linear_cached = L * (self_linear + 2 * d * d + 2 * Ts * d * d * first + 2 * d * ff)
    attention_cached = L * ((0 if ssru else 2 * T * d) + 2 * Ts * d)
    linear_uncached = L * (self_linear * T + 2 * T * d * d + 2 * Ts * d * d + 2 * T * d * ff)
    attention_uncached = L * ((0 if ssru else 2 * T * T * d) + 2 * T * Ts * d)
    encoder = config.n_encoder_layers * (4 * Ts * d * d + 2 * Ts * Ts * d + 2 * Ts * d * ff)
    if ssru:
        keeps = (
            f"per layer: the SSRU's cell c ({d} values, overwritten each step: no growing cache) and the "
            f"cross-attention K and V of the {Ts} source positions (2·{Ts}·{d}, made at the first step)"
        )
    else:
        keeps = (
            f"per layer: the self-attention K and V of every position so far (2·T·{d} values, one row more each "
            f"step) and the cross-attention K and V of the {Ts} source positions (2·{Ts}·{d}, made at the first step)"
        )
    return DecodingCost(
        src_len=Ts,
        out_len=out_len,
        n_layers=L,
        decoder_self=config.decoder_self,
        bytes_per_value=b,
        keeps=keeps,
        self_kv_bytes=_frozen(0 if ssru else 2 * T * d * b, out_len),
        cross_kv_bytes=2 * Ts * d * b,
        state_bytes=d * b if ssru else 0,
        encoder_macs=int(encoder),
        linear_cached=_frozen(linear_cached, out_len),
        attention_cached=_frozen(attention_cached, out_len),
        output_cached=_frozen(d * V, out_len),
        linear_uncached=_frozen(linear_uncached, out_len),
        attention_uncached=_frozen(attention_uncached, out_len),
        output_uncached=_frozen(T * d * V, out_len),
    )


def translation_cost(
    translation: Translation, config: ModelConfig, *, dtype: torch.dtype = torch.float32
) -> DecodingCost:
    """``decoding_cost`` for the sentence a greedy translation decoded: its source pieces and its output steps."""
    trace = translation.trace
    keep = trace[keep_site("src")] if keep_site("src") in trace else np.ones(len(trace[ids_site("src")]), dtype=bool)
    return decoding_cost(config, src_len=int(keep.sum()), out_len=len(trace[output_site("ids")]), dtype=dtype)
