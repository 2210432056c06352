"""The arithmetic of this model's attention and feed-forward sub-layers, read from its config (no Streamlit): whether
the scores are divided by √d_k, whether self-attention adds a relative position bias (T5), LayerNorm or RMSNorm,
biases on the projections or none, a plain or a gated feed-forward, how the first layer's input is made — and the
formulas the Learn page writes for each, so that it never shows a step the model does not take."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import core

ACTIVATIONS = {  # ModelConfig.activation -> its name in a formula
    "relu": r"\mathrm{ReLU}",
    "gelu": r"\mathrm{GELU}",
    "gelu_new": r"\mathrm{GELU}_{\tanh}",
    "swish": r"\mathrm{SiLU}",
    "silu": r"\mathrm{SiLU}",
}


@dataclass(frozen=True)
class Arithmetic:
    """What one model computes, from its config."""

    d_model: int
    d_k: int
    n_heads: int
    scaled: bool  # scores = q·k / √d_k (False: q·k itself, T5)
    relative_bias: bool  # self-attention adds a learned bias by distance (T5); cross-attention never does
    rms: bool  # RMSNorm (x / rms(x) · g, no mean, no bias) instead of LayerNorm
    biases: bool  # the attention and feed-forward projections have biases
    pre: bool  # pre-norm: a sub-layer reads norm(h); post-norm: norm(h + y)
    gated: bool  # FFN(x) = (act(x W1) ⊙ x W_up) W2
    activation: str
    scale_embedding: bool  # embeddings times √d_model
    embed_norm: bool  # a norm on embedding + position before layer 1 (BART's layernorm_embedding)
    absolute_positions: bool  # a position vector is added to each embedding (False: T5)

    @classmethod
    def of(cls, cfg: core.ModelConfig) -> Arithmetic:
        return cls(
            d_model=cfg.d_model,
            d_k=cfg.d_head,
            n_heads=cfg.n_heads,
            scaled=cfg.attention_scale,
            relative_bias=cfg.positional == "relative",
            rms=cfg.norm_kind == "rms",
            biases=cfg.linear_bias,
            pre=cfg.norm == "pre",
            gated=cfg.gated_ffn,
            activation=cfg.activation,
            scale_embedding=cfg.scale_embedding,
            embed_norm=cfg.embed_norm,
            absolute_positions=cfg.positional != "relative",
        )

    # ------------------------------------------------------------------ words
    @property
    def norm(self) -> str:
        return "RMSNorm" if self.rms else "LayerNorm"

    def has_bias(self, kind: str) -> bool:
        """Whether attention ``kind`` adds a position bias to its scores."""
        return self.relative_bias and kind != "cross"

    # ------------------------------------------------------------------ formulas (LaTeX)
    def attention(self, kind: str | None = None) -> str:
        """Attention(Q, K, V) as this model computes it (``kind`` None: its self-attention)."""
        return attention_formula(self.scaled, self.relative_bias and kind != "cross")

    def score(self, kind: str) -> str:
        """One key's score s_j and weight w_j."""
        return score_formula(self.scaled, self.has_bias(kind), self.d_k)

    def projection(self, name: str, *, matrix: bool = False) -> str:
        """'q = x W_Q^{(h)} + b_Q^{(h)}' (no bias term when the model has none); ``matrix``: every token's at once,
        'K = X W_K^{(h)} + b_K^{(h)}'."""
        upper = name.upper()
        lhs, rows = (upper, "X") if matrix else (name, "x")
        return rf"{lhs} = {rows}\, W_{upper}^{{(h)}}" + (rf" + b_{upper}^{{(h)}}" if self.biases else "")

    @property
    def plus_bias(self) -> str:
        """' + b' in a plain-text formula, or '' when the projections have no bias."""
        return " + b" if self.biases else ""

    def norm_formula(self) -> str:
        if self.rms:
            return r"\mathrm{RMSNorm}(x) = \frac{x}{\sqrt{\frac{1}{d}\sum_i x_i^2 + \epsilon}} \odot g"
        return r"\mathrm{LayerNorm}(x) = \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} \odot g + b"

    def ffn(self) -> str:
        act = ACTIVATIONS.get(self.activation, rf"\mathrm{{{self.activation}}}")
        b1, b2 = (" + b_1", " + b_2") if self.biases else ("", "")
        if self.gated:
            return rf"\mathrm{{FFN}}(x) = \big({act}(x W_1{b1}) \odot x W_{{up}}\big) W_2{b2}"
        return rf"\mathrm{{FFN}}(x) = {act}(x W_1{b1})\, W_2{b2}"

    def embedding(self) -> str:
        """Layer 1's stream h_i from the token (and its position)."""
        token = r"E[\text{token}_i]" + (r" \cdot \sqrt{d_{model}}" if self.scale_embedding else "")
        total = f"{token} + PE_i" if self.absolute_positions else token
        return rf"h_i = \mathrm{{{self.norm}}}\big({total}\big)" if self.embed_norm else f"h_i = {total}"

    def residual(self) -> str:
        """How a sub-layer's output y goes back into the stream h."""
        return r"h + y" if self.pre else rf"\mathrm{{{self.norm}}}(h + y)"


def header_note(a: Arithmetic) -> str:
    """The sentence under the page's formula: what of it this model does differently from the paper ('' when
    nothing)."""
    parts = []
    if not a.scaled:
        parts.append("No division by √d_k: this model's scores are Q·Kᵀ itself.")
    if a.relative_bias:
        parts.append("B: the relative position bias it adds to self-attention scores (none in cross-attention).")
    return " ".join(parts)


def attention_formula(scaled: bool, biased: bool) -> str:
    """softmax(QKᵀ/√d_k [+ B] + M) V, without the division when ``scaled`` is False (T5)."""
    scores = r"\frac{Q K^{\top}}{\sqrt{d_k}}" if scaled else r"Q K^{\top}"
    bias = " + B" if biased else ""
    return (
        rf"\mathrm{{Attention}}(Q, K, V) = \mathrm{{softmax}}\!\left({scores}{bias} + M\right) V"
        r"\qquad M_{ij} = \begin{cases} 0 & \text{may attend} \\ -\infty & \text{blocked} \end{cases}"
    )


def score_formula(scaled: bool, biased: bool, d_k: int) -> str:
    """s_j = q·k_j [/ √d_k] [+ B_h(j − i)] and the softmax weight w_j."""
    dots = rf"\frac{{q \cdot k_j}}{{\sqrt{{{d_k}}}}}" if scaled else r"q \cdot k_j"
    bias = r" + B_{h}(j - i)" if biased else ""
    return rf"s_j = {dots}{bias} \qquad w_j = \frac{{e^{{s_j + M_j}}}}{{\sum_l e^{{s_l + M_l}}}}"


def scale_of_recorded(
    dots: np.ndarray, scores: np.ndarray, bias: np.ndarray | float, mask: np.ndarray, d_k: int
) -> bool | None:
    """For a saved trace (no config at hand): whether its recorded scores are q·k / √d_k (True) or q·k (False),
    read from the numbers; None when neither matches."""
    if not mask.any():
        return None
    for scaled in (True, False):
        by_hand = dots / np.sqrt(d_k) if scaled else dots
        if np.allclose((by_hand + bias)[mask], scores[mask], atol=1e-3, rtol=1e-3):
            return scaled
    return None
