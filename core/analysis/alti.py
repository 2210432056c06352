"""ALTI (Ferrando et al., 2022): an attention block's output as a sum of one transformed vector per input token.

The decomposition follows the authors' code (mt-upc/transformer-contributions-nmt, ``transformer_wrapper.py``,
``__get_contributions_module`` and ``get_contribution_rollout``). With its attention weights held fixed, an
attention block is linear in its inputs:

    y_i = N( sum_j T_i(x_j) + b_o ),   T_i(x_j) = sum_h alpha^h_ij (x_j W_v^h + b_v^h) W_o^h  (+ x_i when j = i)

The residual is token i's own vector (self-attention: added to its own T_i(x_i); cross-attention: one more
vector beside the source tokens'). N is the block's norm: after the sum with post-norm, folded in linearly with
the token's own scale held fixed (LayerNorm centres each vector, divides by the token's standard deviation and
multiplies by its weight; its bias, like the output projection's, belongs to no token); with pre-norm the norm
sits inside the value path and the block's output is the sum itself.

Contributions come from L1 distances (the authors' ``l1`` with ``min_sum``):
c_ij = max(0, ||y_i||_1 - ||y_i - T_i(x_j)||_1), each row divided by its sum. Layers compose as the authors' rollout.

One deviation, said here: the authors scale by ``1 / (x + eps).std(-1)`` (the unbiased standard deviation, eps
added to the values); we use the norm's own scale ``1 / sqrt(var + eps)``, so the vectors add up to the block's
actual output (their code asserts it only within 1e-3 per element).

An SSRU (Marian's decoder cell, used instead of self-attention) is decomposed the same way, with its forget
gates and ReLU pattern held fixed as ALTI holds attention weights fixed: c_t = sum_{j<=t} (1-f_j) prod_{j<k<=t} f_k
(x_j W), so h_t = relu(c_t) = sum_j [c_t > 0] (1-f_j) prod f_k (x_j W) exactly. That is our extension (the paper has
no SSRU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class Block:
    """One block's output as vectors: ``vectors.sum(-2) + constant`` is the output (Tq, D); every function here also
    takes leading batch axes (B, ...) on all its tensors.

    vectors: (Tq, K, D) the transformed vector of each input (self-attention: K = Tk tokens, the residual inside
        token i's own; cross-attention: K = Ts + 1, the sources then the residual). constant: (Tq, D), what no token
        brings (the output projection's bias, the norm's bias)."""

    vectors: Tensor
    constant: Tensor

    @cached_property
    def output(self) -> Tensor:
        return self.vectors.sum(-2) + self.constant  # (Tq, D), summed once (``alti`` and the checks read it)


def head_vectors(weights: Tensor, values: Tensor, out_weight: Tensor, scale: Tensor) -> Tensor:
    """Each key's vector through every head and the output projection, weighted by attention.

    weights (H, Tq, Tk); values (H, Tk, dv) (bias included); out_weight (D, H*dv), the output projection's weight;
    scale (H,) each head's multiplier (0 for a head switched off) -> (Tq, Tk, D)."""
    per_head = value_vectors(values, out_weight)  # (H, Tk, D)
    return torch.einsum("...hqk,...hkd->...qkd", weights * scale[:, None, None], per_head)


def value_vectors(values: Tensor, out_weight: Tensor) -> Tensor:
    """f_h(x_j) = v^h_j W_o^h: values (H, Tk, dv), out_weight (D, H*dv) -> (H, Tk, D)."""
    H, _, dv = values.shape[-3:]
    w_o = out_weight.T.reshape(H, dv, -1)  # (H, dv, D): head h's rows of the output projection
    return torch.einsum("...hke,hed->...hkd", values, w_o)


def with_residual(vectors: Tensor, residual: Tensor) -> Tensor:
    """Self-attention's vectors (Tq, Tk, D) with the residual stream (Tq, D) added to token i's own vector
    (Tq == Tk), in ``vectors`` itself (the callers pass a tensor they just made); cross-attention's residual is one
    more vector instead (``attention_block``)."""
    if vectors.shape[-3] != vectors.shape[-2]:
        raise ValueError(f"self-attention needs as many queries as keys, got {tuple(vectors.shape[-3:-1])}")
    vectors.diagonal(dim1=-3, dim2=-2).add_(residual.transpose(-1, -2))  # (..., D, Tq): token i's own vector
    return vectors


def norm_parts(norm: nn.Module) -> tuple[bool, Tensor | None, Tensor | None, float]:
    """(centres, weight, bias, eps) of a LayerNorm or an RMSNorm (any module named *RMS*Norm with a weight and eps);
    ValueError naming any other module."""
    if isinstance(norm, nn.LayerNorm):
        return True, norm.weight, norm.bias, float(norm.eps)
    if "rms" in type(norm).__name__.lower():
        eps = getattr(norm, "eps", None)
        weight = getattr(norm, "weight", None)
        return False, weight, getattr(norm, "bias", None), float(eps) if eps is not None else 1e-6
    raise ValueError(f"ALTI folds a LayerNorm or an RMSNorm in, not a {type(norm).__name__}")


def fold_norm(norm: nn.Module, vectors: Tensor, constant: Tensor) -> Block:
    """``norm(vectors.sum(1) + constant)`` as a Block: the norm applied to each vector linearly, with each token's
    scale (1 / sqrt(var + eps), of the whole sum) held fixed. vectors (Tq, K, D), constant (Tq, D)."""
    centre, scale, w, bias = _folding(norm, vectors.sum(-2) + constant)
    return Block(centre(vectors) * scale.unsqueeze(-2) * w, centre(constant) * scale * w + bias)


def _folding(norm: nn.Module, total: Tensor) -> tuple[Callable[[Tensor], Tensor], Tensor, Tensor, Tensor | float]:
    """What ``norm`` does to each vector of a sum ``total`` (Tq, D), with each token's scale held fixed:
    v -> centre(v) * scale * w (+ bias, once, in the constant). (centre, scale (Tq, 1), w (D,), bias)."""
    centres, weight, bias, eps = norm_parts(norm)

    def centre(t: Tensor) -> Tensor:
        return t - t.mean(-1, keepdim=True) if centres else t

    scale = centre(total).pow(2).mean(-1, keepdim=True).add(eps).rsqrt()  # (Tq, 1)
    w = torch.ones_like(total[..., 0, :]) if weight is None else weight.to(total)
    return centre, scale, w, 0.0 if bias is None else bias.to(total)


def attention_block(
    weights: Tensor,
    values: Tensor,
    out_proj: nn.Linear,
    residual: Tensor,
    scale: Tensor,
    *,
    cross: bool,
    norm: nn.Module | None,
    total: Tensor,
) -> Block:
    """One attention block decomposed: weights (H, Tq, Tk), values (H, Tk, dv), the block's output projection,
    the residual stream entering it (Tq, D), each head's scale (H,); ``norm`` the post-norm to fold in (None with
    pre-norm); ``total`` (Tq, D) what the norm reads, residual + attention output, as the run computed it.
    Computed in ``residual``'s dtype, on its device. The norm is folded into the output projection (centred and
    weighted once, (D, H*dv)) and each query's scale into the weights before the (Tq, Tk, D) vectors are made:
    ``fold_norm``'s result, in one pass."""
    like = residual  # every operand in the residual's dtype and on its device
    mix = weights.to(like) * scale.to(like)[:, None, None]  # (H, Tq, Tk)
    values, w_o = values.to(like), out_proj.weight.to(like)  # (H, Tk, dv), (D, H*dv)
    bias = out_proj.bias
    constant = (torch.zeros_like(residual) if bias is None else bias.to(like).expand_as(residual)).clone()
    if norm is not None:
        centre, token_scale, w, norm_bias = _folding(norm, total.to(like))
        mix = mix * token_scale.unsqueeze(-3)  # query i's scale on its row of every head
        w_o = (centre(w_o.T) * w).T  # each value's vector centred and weighted, as the norm treats the sum
        residual = centre(residual) * token_scale * w
        constant = centre(constant) * token_scale * w + norm_bias
    per_head = value_vectors(values, w_o)  # (H, Tk, D)
    # vectors[i, j] = sum_h mix[h, i, j] per_head[h, j]: one (Tq, H) @ (H, D) product per key j, written key by key
    # into one buffer (K, ..., Tq, D) that cross-attention's residual, one more key, ends
    Tk = per_head.shape[-2]
    keys = torch.empty((Tk + cross, *residual.shape), dtype=like.dtype, device=like.device)
    torch.matmul(mix.movedim(-1, 0).transpose(-1, -2), per_head.movedim(-2, 0), out=keys[:Tk])
    vectors = keys.movedim(0, -2)  # (Tq, K, D)
    if cross:
        keys[Tk] = residual  # one more key
    else:
        with_residual(vectors, residual)
    return Block(vectors, constant)


def ssru_block(inputs: Tensor, gates: Tensor, w: Tensor, residual: Tensor, norm: nn.Module | None) -> Block:
    """An SSRU block decomposed with its forget gates and ReLU pattern held fixed (module docstring).

    inputs (T, D) what the cell reads (the residual stream, or its norm with pre-norm); gates (T, D) the forget
    gates the run used; w (D, D) the cell's W; residual (T, D); norm: the post-norm, or None."""
    xw = inputs.to(residual) @ w.to(residual).T  # (T, D)
    f = gates.to(residual)
    T = xw.shape[0]
    carry = xw.new_zeros(T, T, xw.shape[1])  # carry[t, j] = (1 - f_j) prod_{j<k<=t} f_k
    for t in range(T):
        if t:
            carry[t, :t] = carry[t - 1, :t] * f[t]
        carry[t, t] = 1.0 - f[t]
    parts = carry * xw[None]  # (T, T, D): c_t = parts[t].sum(0)
    active = (parts.sum(1) > 0).to(parts)  # (T, D): the ReLU's pattern
    vectors = with_residual(parts * active[:, None], residual)
    constant = torch.zeros_like(residual)
    return Block(vectors, constant) if norm is None else fold_norm(norm, vectors, constant)


def alti(block: Block, keep: Tensor | None = None, *, inplace: bool = False) -> Tensor:
    """(Tq, K) contributions: max(0, ||y_i||_1 - ||y_i - v_ij||_1), rows divided by their sum. A row where no vector
    is nearer the output than the output's own L1 norm (the authors' code divides by 0 there) gives all of it to
    the nearest vector. ``keep`` (K,) or (B, 1, K) bool: the vectors that count (a padded batch's padding gets 0).

    The difference of the two norms is summed element by element, with no cancellation: with a = sign(y) v,
    |y| - |y - v| = a - 2 max(0, a - |y|) (a <= |y|: the element moves y towards 0 by a; beyond, it overshoots), so a
    vector small beside the output keeps its own precision instead of the output's (float32 is enough).
    ``inplace``: the block's vectors are overwritten (its output, summed first, stays; the caller's last use)."""
    output = block.output.unsqueeze(-2)  # (Tq, 1, D)
    along = block.vectors.mul_(output.sign()) if inplace else block.vectors * output.sign()  # (Tq, K, D): a
    nearer = along.sum(-1) - 2 * along.sub_(output.abs()).clamp_(min=0).sum(-1)  # (Tq, K): ||y||_1 - ||y - v||_1
    if keep is not None:
        nearer = nearer.masked_fill(~keep, -torch.inf)
    score = nearer.clamp(min=0)
    total = score.sum(-1, keepdim=True)
    nearest = F.one_hot(nearer.argmax(-1), nearer.shape[-1]).to(score)
    return torch.where(total > 0, score / total.clamp(min=torch.finfo(score.dtype).tiny), nearest)


def compose_encoder(layers: list[Tensor]) -> Tensor:
    """The encoder's contributions through its layers: C_L ... C_1 (each (Ts, Ts), first layer first)."""
    if not layers:
        raise ValueError("compose_encoder needs at least one layer")
    out = layers[0]
    for layer in layers[1:]:
        out = layer @ out
    return out


def compose_decoder(self_layers: list[Tensor], cross_layers: list[Tensor], encoder: Tensor | None) -> list[Tensor]:
    """ALTI+'s rollout through the decoder: for each layer, each position's contributions from the source tokens
    then the decoder inputs (T, Ts + T), composed up to that layer (the last is the model's). Leading batch axes
    (B, ...) on every matrix are composed row by row.

    self_layers: (T, T) each layer's self-attention (or SSRU) contributions; cross_layers: (T, Ts + 1), sources then
    the residual; encoder: (Ts, Ts) composed through the encoder (None: the identity, the encoder's outputs
    themselves). A layer's own matrix is [cross[:, :Ts] @ encoder | cross[:, Ts] * self]: the residual's share is
    spread over the prefix by self-attention; composed: [S_l + P_l @ R_{l-1}[:, :Ts] | P_l @ R_{l-1}[:, Ts:]], rows
    renormalised (a row of zeros stays zeros)."""
    Ts = cross_layers[0].shape[-1] - 1
    out: list[Tensor] = []
    for self_c, cross_c in zip(self_layers, cross_layers, strict=True):
        source = cross_c[..., :Ts] if encoder is None else cross_c[..., :Ts] @ encoder  # (T, Ts)
        prefix = cross_c[..., Ts:] * self_c  # (T, T)
        if out:
            source = source + prefix @ out[-1][..., :Ts]
            prefix = prefix @ out[-1][..., Ts:]
        layer = torch.cat([source, prefix], dim=-1)
        out.append(layer / layer.sum(-1, keepdim=True).clamp(min=torch.finfo(layer.dtype).tiny))
    return out
