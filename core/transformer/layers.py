"""The layers' modules: feed-forward, SSRU, encoder layer and decoder layer (post-norm, the paper's, or pre-norm).

A module holds parameters and resolves them (``weights``) into ``core.transformer.blocks``' weights objects; its
``forward`` runs the one implementation of its math there (``encoder_layer``, ``decoder_layer``, ...), which the
decoding plan (``core.fast.plan``) runs too on its own resolved copies."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig
from ..sites import AttentionKind, attention_array, attention_site, layer_site, ssru_array, ssru_site
from .attention import Bind, LinearFn, MultiHeadAttention, Projections, binder
from .blocks import (
    DecoderWeights,
    EncoderWeights,
    FFNWeights,
    Masks,
    Norm,
    Sites,
    decoder_layer,
    encoder_layer,
    feed_forward,
    ssru,
)
from .state import LayerState

if TYPE_CHECKING:
    from ..recording.recorder import Recorder

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


class LayerCall(Protocol):
    """What a layer reads of its call (a ``core.recording.call.Call`` is one): the linear function and the recorder."""

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

    def weights(self, bind: Bind) -> FFNWeights:
        up = self.linear_up
        return FFNWeights(
            bind(self.linear1.weight, self.linear1.bias),
            None if up is None else bind(up.weight, up.bias),
            bind(self.linear2.weight, self.linear2.bias),
            self.activation,
        )

    def forward(self, x: Tensor, lin: LinearFn = F.linear) -> Tensor:
        """x (B, T, D) -> (B, T, D) (``core.transformer.blocks.feed_forward``)."""
        return feed_forward(self.weights(binder(lin)), x, self.dropout.p if self.training else 0.0)


class SSRU(nn.Module):
    """Simpler Simple Recurrent Unit (Marian's decoder cell, used instead of self-attention).

    f_t = sigmoid(x_t W_f + b_f);  c_t = f_t * c_{t-1} + (1 - f_t) * (x_t W);  h_t = ReLU(c_t)
    """

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.W = nn.Linear(d_model, d_model, bias=False)
        self.W_f = nn.Linear(d_model, d_model)

    def weights(self, bind: Bind, fused: tuple[Tensor, Tensor | None] | None = None) -> Projections:
        """(x W, x W_f + b_f) of an input: the two matrices, or one fused [W; W_f] (``FastWeights.fused_ssru``)."""
        D = self.W.weight.shape[0]
        parts = (
            (bind(*fused),) if fused is not None else (bind(self.W.weight, None), bind(self.W_f.weight, self.W_f.bias))
        )
        return Projections(parts, (D, D))

    def forward(self, x: Tensor, state: Tensor | None, lin: LinearFn = F.linear) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, T, D), the previous cell (B, 1, D) or None -> h (B, T, D), last cell (B, 1, D), forget gates (B, T, D)
        (``core.transformer.blocks.ssru``)."""
        return ssru(self.weights(binder(lin)), x, state)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int = 0) -> None:
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.index = index
        self.self_attn = MultiHeadAttention.of(cfg)
        self.self_attn_norm = make_norm(cfg)
        self.ffn = FeedForward(cfg)
        self.ffn_norm = make_norm(cfg)
        self.dropout = nn.Dropout(cfg.dropout)

    def weights(self, bind: Bind) -> EncoderWeights:
        """This layer's weights resolved by ``bind``, and where it records."""
        i = self.index
        return EncoderWeights(
            self.self_attn.weights(bind),
            self.ffn.weights(bind),
            norm_of(self.self_attn_norm),
            norm_of(self.ffn_norm),
            self.pre,
            attention_sites("encoder", i),
            layer_site("encoder", i),
        )

    def forward(self, x: Tensor, mask: Tensor | None, call: LayerCall, bias: Tensor | None = None) -> Tensor:
        """x (B, Ts, D); mask broadcastable to (B, Ts, Ts), True = may attend -> (B, Ts, D). bias: (1, H, Ts, Ts)
        added to the scores (T5's relative position bias, made once for the stack), None = none. Records its output
        'encoder.{index}.out' (``core.transformer.blocks.encoder_layer``)."""
        dropout = self.dropout.p if self.training else 0.0
        return encoder_layer(
            self.weights(binder(call.linear)), x, mask, bias=bias, recorder=call.recorder, dropout=dropout
        )


def attention_sites(kind: AttentionKind, layer: int) -> Sites:
    """Where attention block (kind, layer) records: its site, its input x and the stream after it."""
    return Sites(attention_site(kind, layer), attention_array(kind, layer, "x"), attention_array(kind, layer, "out"))


class DecoderLayer(nn.Module):
    """Masked self-attention (or SSRU) -> cross-attention -> FFN, each a residual sub-layer (``decoder_layer``)."""

    def __init__(self, cfg: ModelConfig, index: int = 0) -> None:
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.index = index
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

    def weights(
        self,
        bind: Bind,
        *,
        memory: Bind | None = None,
        fused: tuple[Tensor, Tensor | None] | None = None,
        zeros: Tensor | None = None,
    ) -> DecoderWeights:
        """This layer's weights resolved by ``bind`` (``memory``: how the memory's keys and values are projected, once
        per call; None = ``bind``), and where it records. fused: the self-attention's Q/K/V, or the SSRU's W / W_f,
        as one matrix and bias (``FastWeights.fused_qkv`` / ``fused_ssru``); zeros: see ``DecoderWeights``."""
        i, attn = self.index, self.self_attn
        if attn is not None:
            self_sites = attention_sites("decoder", i)
        else:
            self_sites = Sites(ssru_site(i), ssru_array(i, "x"), ssru_array(i, "out"))
        return DecoderWeights(
            None if attn is None else attn.weights(bind, fused=fused),
            None if self.ssru is None else self.ssru.weights(bind, fused),
            self.cross_attn.weights(bind, memory=memory),
            self.ffn.weights(bind),
            norm_of(self.self_attn_norm),
            norm_of(self.cross_attn_norm),
            norm_of(self.ffn_norm),
            self.pre,
            i,
            self_sites,
            attention_sites("cross", i),
            layer_site("decoder", i),
            zeros,
        )

    def forward(
        self, x: Tensor, memory: Tensor, masks: Masks, call: LayerCall, state: LayerState | None = None, offset: int = 0
    ) -> Tensor:
        """x (B, T, D) target positions [offset, offset + T); memory (B, Ts, D). With ``state`` keys and values
        are cached (incremental decoding). masks: the self- and cross-attention masks and the self-attention's
        position bias (``Masks``). Records its output 'decoder.{index}.out'
        (``core.transformer.blocks.decoder_layer``)."""
        return decoder_layer(
            self.weights(binder(call.linear)),
            x,
            masks,
            memory=memory,
            state=state,
            recorder=call.recorder,
            offset=offset,
            dropout=self.dropout.p if self.training else 0.0,
        )
