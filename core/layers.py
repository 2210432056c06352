"""Feed-forward, SSRU, encoder layer and decoder layer, with post-norm (paper) or pre-norm."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, NamedTuple, Protocol, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import KV, LinearFn, MultiHeadAttention, tap
from .config import ModelConfig
from .sites import attention_site

if TYPE_CHECKING:
    from .recorder import Recorder

L = TypeVar("L", bound=nn.Module)


def gelu_tanh(x: Tensor) -> Tensor:
    """GELU's tanh approximation (transformers' ``gelu_new``, T5 v1.1's)."""
    return F.gelu(x, approximate="tanh")


# The feed-forward activations ModelConfig.activation names, as transformers names them (swish = silu).
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_new": gelu_tanh,
    "swish": F.silu,
    "silu": F.silu,
}


class Norm(NamedTuple):
    """A norm's parameters as the layers apply them (``normalize``): LayerNorm (weight, bias) or RMSNorm (weight)."""

    weight: Tensor
    bias: Tensor | None  # None with RMSNorm
    eps: float
    rms: bool = False  # x / sqrt(mean(x^2) + eps) * weight: no mean subtracted, no bias (T5LayerNorm)


class Masks(NamedTuple):
    """What a decoder layer's attention blocks add to their scores, made once per call for every layer:
    the masks (broadcastable to (B, T, Tk), True = may attend; None = nothing masked) and the self-attention's
    position bias ((1, H, T, Tk), T5's relative bias; None = none)."""

    self_mask: Tensor | None
    cross_mask: Tensor | None
    self_bias: Tensor | None = None


def make_norm(cfg: ModelConfig) -> nn.Module:
    """The norm module ``cfg`` asks for over d_model features: ``nn.LayerNorm`` or ``nn.RMSNorm`` (``norm_kind``),
    eps ``norm_eps``. Every norm of the model (sub-layers, final norms, embedding norms) is made here."""
    if cfg.norm_kind == "rms":
        return nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)


def norm_of(norm: nn.Module) -> Norm:
    """The ``Norm`` of a module ``make_norm`` built."""
    if isinstance(norm, nn.RMSNorm):
        return Norm(norm.weight, None, float(norm.eps or 0.0), True)
    assert isinstance(norm, nn.LayerNorm)
    return Norm(norm.weight, norm.bias, norm.eps)


def normalize(x: Tensor, norm: Norm) -> Tensor:
    """norm(x) over the last axis: x (..., D) -> (..., D). Calls the C bindings (no module overhead)."""
    if norm.rms:
        return torch.rms_norm(x, (x.shape[-1],), norm.weight, norm.eps)
    return torch.layer_norm(x, (x.shape[-1],), norm.weight, norm.bias, norm.eps)


class LayerCall(Protocol):
    """What a layer reads of its call (a ``core.call.Call`` is one): the linear function and the recorder."""

    @property
    def linear(self) -> LinearFn: ...

    @property
    def recorder(self) -> Recorder | None: ...


class LayerStack(nn.ModuleList, Generic[L]):
    """An ``nn.ModuleList`` of one layer class: the same container (same state-dict keys); it only tells the
    type checker what iterating it yields."""

    if TYPE_CHECKING:

        def __iter__(self) -> Iterator[L]: ...


class FeedForward(nn.Module):
    """FFN(x) = act(x W1 + b1) W2 + b2; gated (``cfg.gated_ffn``, T5 v1.1): (act(x W1) * x W_up) W2."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        bias = cfg.linear_bias
        self.linear1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=bias)
        # the gated FFN's linear branch (T5's wi_1; linear1 is wi_0); None: a plain FFN
        self.linear_up = nn.Linear(cfg.d_model, cfg.d_ff, bias=bias) if cfg.gated_ffn else None
        self.linear2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=bias)
        self.dropout = nn.Dropout(cfg.dropout)
        self.activation = ACTIVATIONS[cfg.activation]

    def forward(self, x: Tensor, lin: LinearFn = F.linear) -> Tensor:
        h = self.activation(lin(x, self.linear1.weight, self.linear1.bias))  # (B, T, d_ff)
        if self.linear_up is not None:
            h = h * lin(x, self.linear_up.weight, self.linear_up.bias)  # (B, T, d_ff)
        if self.training:
            h = self.dropout(h)
        return lin(h, self.linear2.weight, self.linear2.bias)  # (B, T, D)


class SSRU(nn.Module):
    """Simpler Simple Recurrent Unit (Marian's decoder cell, used instead of self-attention).

    f_t = sigmoid(x_t W_f + b_f);  c_t = f_t * c_{t-1} + (1 - f_t) * (x_t W);  h_t = ReLU(c_t)
    """

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.W = nn.Linear(d_model, d_model, bias=False)
        self.W_f = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor, state: Tensor | None, lin: LinearFn = F.linear) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, T, D), state (B, D) or None -> h (B, T, D), last cell (B, D), forget gates (B, T, D)."""
        xw = lin(x, self.W.weight, None)  # (B, T, D)
        f = torch.sigmoid(lin(x, self.W_f.weight, self.W_f.bias))  # (B, T, D)
        c = torch.zeros_like(xw[:, 0]) if state is None else state  # (B, D)
        cells = []
        for t in range(x.shape[1]):
            c = f[:, t] * c + (1.0 - f[:, t]) * xw[:, t]
            cells.append(c)
        return F.relu(torch.stack(cells, dim=1)), c, f


def sublayer_input(x: Tensor, norm: Norm, pre: bool) -> Tensor:
    """What a sub-layer reads: norm(x) with pre-norm, x itself with post-norm (the paper's)."""
    return normalize(x, norm) if pre else x


def sublayer_output(x: Tensor, y: Tensor, norm: Norm, pre: bool) -> Tensor:
    """The residual connection around a sub-layer's output y: x + y with pre-norm, norm(x + y) with post-norm."""
    return x + y if pre else normalize(x + y, norm)


def residual(
    x: Tensor, norm: Norm, fn: Callable[[Tensor], Tensor], pre: bool, dropout: nn.Dropout | None = None
) -> Tensor:
    """Post-norm: norm(x + drop(fn(x))); pre-norm: x + drop(fn(norm(x))). One sub-layer, built from the two
    halves every path uses (the decoding plan calls them around its own sub-layers).

    Calls the norm's C binding directly (``normalize``) and skips dropout outside training: this runs three times
    per layer at every decoding step, where module call overhead costs as much as the one-token matmuls."""
    y = fn(sublayer_input(x, norm, pre))
    if dropout is not None and dropout.training:
        y = dropout(y)
    return sublayer_output(x, y, norm, pre)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int = 0) -> None:
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.site = attention_site("encoder", index)  # where its attention is recorded
        self.self_attn = MultiHeadAttention.of(cfg)
        self.self_attn_norm = make_norm(cfg)
        self.ffn = FeedForward(cfg)
        self.ffn_norm = make_norm(cfg)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, mask: Tensor | None, call: LayerCall, bias: Tensor | None = None) -> Tensor:
        """x (B, Ts, D); mask broadcastable to (B, Ts, Ts), True = may attend -> (B, Ts, D). bias: (1, H, Ts, Ts)
        added to the scores (T5's relative position bias, made once for the stack), None = none."""
        lin, at = call.linear, tap(call.recorder, self.site)

        def attend(h: Tensor) -> Tensor:
            return self.self_attn(h, self.self_attn.project_kv(h, lin), mask, at, lin, bias)

        x = residual(x, norm_of(self.self_attn_norm), attend, self.pre, self.dropout)
        return residual(x, norm_of(self.ffn_norm), lambda h: self.ffn(h, lin), self.pre, self.dropout)


@dataclass
class LayerState:
    """One decoder layer's incremental state for one call (never stored on a module).

    Self-attention keys/values live in buffers that grow by doubling, so a decoding step writes its
    one new position instead of copying the whole cache (``torch.cat`` per step is quadratic in the length).
    Inference only: the in-place writes would invalidate what autograd saved for earlier steps (training
    uses the teacher-forced path, which keeps no state).
    """

    self_k: Tensor | None = None  # (B, H, capacity, dh); positions [0, self_len) are filled
    self_v: Tensor | None = None
    self_len: int = 0
    ssru_cell: Tensor | None = None  # (B, D)
    cross_kv: KV | None = None  # (B, H, Ts, dh) each
    cross_flat: KV | None = None  # the same as bmm operands, keys (B*H, dh, Ts) and values (B*H, Ts, dh) (core.plan)

    @property
    def self_kv(self) -> KV | None:
        """The cached keys and values so far: two (B, H, self_len, dh) views, or None before the first step."""
        if self.self_k is None or self.self_v is None:
            return None
        return self.self_k[:, :, : self.self_len], self.self_v[:, :, : self.self_len]

    def append_kv(self, k: Tensor, v: Tensor) -> KV:
        """Append new positions' keys and values (B, H, T, dh); returns every cached position's."""
        end = self.self_len + k.shape[2]
        if self.self_k is None or self.self_v is None or end > self.self_k.shape[2]:
            B, H, _, dh = k.shape
            capacity = max(16, 2 * end)
            grown_k, grown_v = k.new_empty(B, H, capacity, dh), v.new_empty(B, H, capacity, v.shape[-1])
            if self.self_k is not None and self.self_v is not None:
                grown_k[:, :, : self.self_len] = self.self_k[:, :, : self.self_len]
                grown_v[:, :, : self.self_len] = self.self_v[:, :, : self.self_len]
            self.self_k, self.self_v = grown_k, grown_v
        self.self_k[:, :, self.self_len : end] = k
        self.self_v[:, :, self.self_len : end] = v
        self.self_len = end
        kv = self.self_kv
        assert kv is not None
        return kv

    def _take(self, buffer: Tensor, index: Tensor) -> Tensor:
        """Rows ``index`` of a KV buffer, same capacity, copying only the filled positions."""
        out = buffer.new_empty((index.shape[0],) + buffer.shape[1:])
        out[:, :, : self.self_len] = buffer[index, :, : self.self_len]
        return out

    def reorder(self, index: Tensor, same_source: bool = False) -> None:
        """Keep batch rows ``index`` (beam search). ``same_source``: every row attends to the same source (the
        beams of one sentence), so the cross-attention keys/values only change when the number of rows does."""
        if self.self_k is not None and self.self_v is not None:
            self.self_k, self.self_v = self._take(self.self_k, index), self._take(self.self_v, index)
        if self.ssru_cell is not None:
            self.ssru_cell = self.ssru_cell[index]
        if self.cross_kv is not None and not (same_source and self.cross_kv[0].shape[0] == index.shape[0]):
            self.cross_kv = (self.cross_kv[0][index], self.cross_kv[1][index])
            self.cross_flat = None  # made again from the reordered keys and values


class DecoderLayer(nn.Module):
    """Masked self-attention (or SSRU) -> cross-attention -> FFN, each with residual + LayerNorm."""

    def __init__(self, cfg: ModelConfig, index: int = 0) -> None:
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.index = index
        self.self_site, self.cross_site = attention_site("decoder", index), attention_site("cross", index)
        if cfg.decoder_self == "attention":
            self.self_attn: MultiHeadAttention | None = MultiHeadAttention.of(cfg)
            self.ssru: SSRU | None = None
        else:
            self.self_attn, self.ssru = None, SSRU(cfg.d_model)
        self.self_attn_norm = make_norm(cfg)
        self.cross_attn = MultiHeadAttention.of(cfg)
        self.cross_attn_norm = make_norm(cfg)
        self.ffn = FeedForward(cfg)
        self.ffn_norm = make_norm(cfg)
        self.dropout = nn.Dropout(cfg.dropout)

    def cross_kv(self, memory: Tensor, state: LayerState | None, lin: LinearFn = F.linear) -> KV:
        """Cross-attention keys and values of ``memory`` (B, Ts, D): two (B, H, Ts, dh) tensors, projected once per
        call and kept in ``state`` when decoding."""
        if state is not None and state.cross_kv is not None:
            return state.cross_kv
        kv = self.cross_attn.project_kv(memory, lin)
        if state is not None:
            state.cross_kv = kv
        return kv

    def forward(
        self, x: Tensor, memory: Tensor, masks: Masks, call: LayerCall, state: LayerState | None = None, offset: int = 0
    ) -> Tensor:
        """x (B, T, D) target positions [offset, offset + T); memory (B, Ts, D). With ``state`` keys and values
        are cached (incremental decoding). masks: the self- and cross-attention masks and the self-attention's
        position bias (``Masks``)."""
        self_mask, cross_mask, self_bias = masks
        lin, recorder = call.linear, call.recorder

        def self_block(h: Tensor) -> Tensor:
            if self.ssru is not None:
                out, cell, gates = self.ssru(h, state.ssru_cell if state is not None else None, lin)
                if state is not None:
                    state.ssru_cell = cell
                if recorder is not None:
                    recorder.gate(self.index, gates)
                return out
            attn = self.self_attn
            assert attn is not None
            kv = attn.project_kv(h, lin)  # (B, H, T, dh) each
            if state is not None:
                kv = state.append_kv(*kv)  # (B, H, offset + T, dh) each
            return attn(h, kv, self_mask, tap(recorder, self.self_site, offset), lin, self_bias)

        def cross_block(h: Tensor) -> Tensor:
            kv = self.cross_kv(memory, state, lin)
            return self.cross_attn(h, kv, cross_mask, tap(recorder, self.cross_site, offset), lin)

        x = residual(x, norm_of(self.self_attn_norm), self_block, self.pre, self.dropout)
        x = residual(x, norm_of(self.cross_attn_norm), cross_block, self.pre, self.dropout)
        return residual(x, norm_of(self.ffn_norm), lambda h: self.ffn(h, lin), self.pre, self.dropout)
