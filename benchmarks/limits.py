"""The floor: what one translation must compute (FLOPs) and read (weight bytes), counted analytically.

Only the matrix products are counted (2 FLOPs per multiply-add); layer norms, softmax, ReLU and
embedding look-ups are O(T·D) and below 1% here. The decoder uses the KV cache: each new position
projects only itself, and attends to every earlier position and to the whole source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from core.config import ModelConfig

from .contenders import Sizes


@dataclass(frozen=True)
class Shape:
    """What the floors need to know of a model: widths, layer counts, vocabulary, the decoder's self sub-layer."""

    d_model: int
    ffn: int
    encoder_layers: int
    decoder_layers: int
    vocab: int
    ssru: bool = False  # SSRU decoder (Marian's): W and W_f per step instead of Q, K, V, O and attention

    @classmethod
    def of_sizes(cls, s: Sizes) -> Shape:
        return cls(s.d_model, s.ffn, s.layers, s.layers, s.vocab)

    @classmethod
    def of_config(cls, cfg: ModelConfig) -> Shape:
        return cls(
            cfg.d_model,
            cfg.d_ff,
            cfg.n_encoder_layers,
            cfg.n_decoder_layers,
            cfg.tgt_vocab_size,
            cfg.decoder_self == "ssru",
        )


def shape_flops(m: Shape, src_len: int, new_tokens: int) -> dict[str, float]:
    """FLOPs of a greedy translation of ``src_len`` tokens into ``new_tokens`` tokens (decoding steps), by part."""
    d, f, V = m.d_model, m.ffn, m.vocab
    mm = 2.0  # FLOPs per multiply-add
    encoder_proj = src_len * m.encoder_layers * mm * (4 * d * d + 2 * d * f)  # Q, K, V, O + FFN, per source token
    encoder_attn = m.encoder_layers * mm * 2 * src_len * src_len * d  # Q·K^T and weights·V, all heads
    cross_kv = m.decoder_layers * mm * src_len * 2 * d * d  # K, V of the memory, once per translation
    self_proj = 2 * d * d if m.ssru else 4 * d * d  # SSRU: W, W_f; attention: Q, K, V, O
    decoder_proj = new_tokens * m.decoder_layers * mm * (self_proj + 2 * d * d + 2 * d * f)  # + cross Q, O; FFN
    keys_seen = 0 if m.ssru else sum(range(1, new_tokens + 1))  # step t attends to t target positions
    decoder_attn = m.decoder_layers * mm * 2 * d * (keys_seen + new_tokens * src_len)  # self + cross
    output = new_tokens * mm * d * V
    parts = {
        "encoder projections + FFN": encoder_proj,
        "encoder attention": encoder_attn,
        "cross-attention K/V (once)": cross_kv,
        "decoder projections + FFN": decoder_proj,
        "decoder attention (self + cross)": decoder_attn,
        "output projection": output,
    }
    parts["total"] = sum(parts.values())
    return parts


def translation_flops(s: Sizes, src_len: int, new_tokens: int) -> dict[str, float]:
    """FLOPs of a greedy translation of ``src_len`` tokens into ``new_tokens`` tokens, by part."""
    return shape_flops(Shape.of_sizes(s), src_len, new_tokens)


def shape_weight_bytes(m: Shape, new_tokens: int, bytes_per_value: int = 4) -> float:
    """Weights that must be read: the encoder and cross K/V once, the rest of the decoder and the output
    projection at every step."""
    d, f, V = m.d_model, m.ffn, m.vocab
    encoder = m.encoder_layers * (4 * d * d + 2 * d * f)
    cross_kv = m.decoder_layers * 2 * d * d
    self_proj = 2 * d * d if m.ssru else 4 * d * d
    per_step = m.decoder_layers * (self_proj + 2 * d * d + 2 * d * f) + d * V
    return bytes_per_value * (encoder + cross_kv + new_tokens * per_step)


def weight_bytes_per_translation(s: Sizes, new_tokens: int, bytes_per_value: int = 4) -> float:
    """float32 weights that must be read: the encoder and cross K/V once, the rest of the decoder and
    the output projection at every step (15 MB + 8 MB here: far more than a core's L2 cache)."""
    return shape_weight_bytes(Shape.of_sizes(s), new_tokens, bytes_per_value)


def matmul_work(n: int = 1024) -> tuple[Callable[[], object], float]:
    """A large float32 ``torch.matmul`` (n×n by n×n) and its FLOPs: timing it gives this machine's matmul rate."""
    a, b, out = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    return (lambda: torch.matmul(a, b, out=out)), 2.0 * n**3


def last_level_cache(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int | None:
    """Bytes of the largest cache the kernel reports for CPU 0 (a virtual machine may report its host's), or None."""
    sizes = []
    for index in sorted(root.glob("index*")):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        if text[-1:] in units and text[:-1].isdigit():
            sizes.append(int(text[:-1]) * units[text[-1]])
        elif text.isdigit():
            sizes.append(int(text))
    return max(sizes, default=None)


def stream_work(n_bytes: int = 256 << 20) -> tuple[Callable[[], object], float]:
    """``torch.sum`` over a buffer far larger than the caches (read-bound) and its bytes: the streaming rate."""
    x = torch.ones(n_bytes // 4)
    return (lambda: x.sum()), float(n_bytes)
