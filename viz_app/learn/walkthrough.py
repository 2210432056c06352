"""One attention sub-layer recomputed by hand: where its inputs come from (the recorded residual stream and the
model's weights), the scores, mask and softmax of one query, and what the model does next with its output. Plain
numpy in float64, no Streamlit; every value is compared with what the model recorded."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

import core
from core.anatomy.positions import relative_bias
from core.sites import Stack, attention_array, gate_site, layer_input_site
from viz_app.figures import learn


def as_numpy(t: torch.Tensor | None, n: int) -> np.ndarray:
    """A parameter as float64 numpy (zeros of length n for a missing bias)."""
    return np.zeros(n) if t is None else t.detach().float().cpu().numpy().astype(np.float64)


def normalize(h: np.ndarray, module: torch.nn.Module) -> np.ndarray:
    """``module`` (a LayerNorm or an RMSNorm of the model) applied by hand to h (..., D)."""
    d = int(module.weight.shape[0])
    if isinstance(module, torch.nn.RMSNorm):
        return learn.rms_norm(h, as_numpy(module.weight, d), float(module.eps or 0.0))
    return learn.layer_norm(h, as_numpy(module.weight, d), as_numpy(module.bias, d), float(module.eps))


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
    """Where one attention sub-layer's inputs come from, recomputed with the model's weights from the recorded
    residual stream (pre-norm: the sub-layer reads norm(stream); post-norm: the stream itself; the norm is the
    model's LayerNorm or RMSNorm)."""

    def __init__(self, bundle: core.Bundle, trace: core.Trace, kind: str, layer: int) -> None:
        self.model, self.cfg, self.trace = bundle.model, bundle.config, trace
        self.kind, self.layer, self.pre = kind, layer, bundle.config.norm == "pre"
        self.n_tgt = len(trace["ids.tgt"]) if "ids.tgt" in trace else 0
        if kind == "encoder":
            block = self.model.encoder_layers[layer]
            self.attn, self.norm = block.self_attn, block.self_attn_norm
        else:
            dec = self.model.decoder_layers[layer]
            attn = dec.self_attn if kind == "decoder" else dec.cross_attn
            assert attn is not None
            self.attn, self.norm = attn, (dec.self_attn_norm if kind == "decoder" else dec.cross_attn_norm)
        self.d_head = self.cfg.d_head

    # ------------------------------------------------------------------ the residual stream
    def stream(self, stack: Stack, layer: int) -> np.ndarray:
        """The residual stream entering ``stack`` layer ``layer`` (T, D): the embedding + PE for the first."""
        x = self.trace[layer_input_site(stack, layer)]
        if layer == 0 and stack == "decoder":  # without the KV cache each step re-embeds the prefix: the last pass
            x = x[-self.n_tgt :]
        return np.asarray(x, dtype=np.float64)

    def sub_in(self, h: np.ndarray, norm: torch.nn.Module) -> np.ndarray:
        return normalize(h, norm) if self.pre else h

    def sub_out(self, h: np.ndarray, y: np.ndarray, norm: torch.nn.Module) -> np.ndarray:
        return h + y if self.pre else normalize(h + y, norm)

    def project_heads(self, attn: torch.nn.Module, heads: np.ndarray) -> np.ndarray:
        """Heads' outputs (H, T, dh) joined (T, H·dh) and projected: · W_O + b_O -> (T, D)."""
        joined = np.concatenate(list(heads), axis=-1)  # (T, H·dh)
        weight = attn.out_proj.weight  # (D, H·dh)
        return joined @ as_numpy(weight, 0).T + as_numpy(attn.out_proj.bias, int(weight.shape[0]))

    def decoder_after_self(self) -> np.ndarray:
        """The decoder stream after this layer's self-attention (or SSRU) sub-layer (Tt, D)."""
        dec = self.model.decoder_layers[self.layer]
        h = self.stream("decoder", self.layer)
        if dec.ssru is not None:  # c_t = f_t c_{t-1} + (1 - f_t) x_t W;  y_t = ReLU(c_t), with the recorded gates f
            xw = self.sub_in(h, dec.self_attn_norm) @ as_numpy(dec.ssru.W.weight, h.shape[-1]).T
            gates = np.asarray(self.trace[gate_site(self.layer)], dtype=np.float64)
            c, cells = np.zeros(h.shape[-1]), []
            for t in range(h.shape[0]):
                c = gates[t] * c + (1.0 - gates[t]) * xw[t]
                cells.append(c)
            y = np.maximum(np.stack(cells), 0.0)
        else:
            assert dec.self_attn is not None
            y = self.project_heads(
                dec.self_attn, np.asarray(self.trace[attention_array("decoder", self.layer, "heads")])
            )
        return self.sub_out(h, y, dec.self_attn_norm)

    def memory(self) -> np.ndarray:
        """The encoder's output the cross-attention reads (Ts, D): the last layer's, normed for pre-norm."""
        h = self.stream("encoder", self.cfg.n_encoder_layers)
        return normalize(h, self.model.encoder_norm) if self.pre else h

    def residual(self) -> np.ndarray:
        """The stream this sub-layer adds its output to (Tq, D)."""
        if self.kind == "encoder":
            return self.stream("encoder", self.layer)
        return self.stream("decoder", self.layer) if self.kind == "decoder" else self.decoder_after_self()

    def inputs(self) -> tuple[np.ndarray, np.ndarray]:
        """What the queries read (Tq, D) and what the keys and values read (Tk, D)."""
        if self.kind == "cross":
            return self.sub_in(self.residual(), self.norm), self.memory()
        x = self.sub_in(self.residual(), self.norm)
        return x, x

    def projection(self, name: str, head: int) -> tuple[np.ndarray, np.ndarray]:
        """This head's slice of W_Q / W_K / W_V as the paper writes it, (D, dh), and of its bias (dh,)."""
        linear = getattr(self.attn, f"{name}_proj")
        rows = slice(head * self.d_head, (head + 1) * self.d_head)
        d = int(linear.weight.shape[1])
        bias = None if linear.bias is None else linear.bias[rows]
        return as_numpy(linear.weight[rows], d).T, as_numpy(bias, self.d_head)

    def position_bias(self, head: int, query: int, n_keys: int) -> np.ndarray | None:
        """(Tk,) the relative position bias ``head`` adds to ``query``'s scores, looked up in the model's learned
        table by each key's distance (None for cross-attention, or a model without one)."""
        if self.kind == "cross":
            return None
        found = relative_bias(self.model, "encoder" if self.kind == "encoder" else "decoder", 1)
        if found is None:
            return None
        buckets = found.bucket_map(max(n_keys, query + 1))[query, :n_keys]  # (Tk,)
        return found.table[head, buckets]

    def after(self, y: np.ndarray) -> tuple[str, np.ndarray, np.ndarray]:
        """What the model does next with the sub-layer's output y (Tq, D), computed by hand, and the recorded
        value it must equal: (description, by hand, recorded)."""
        s = self.sub_out(self.residual(), y, self.norm)
        if self.kind == "decoder":  # the next sub-layer, cross-attention, reads this: its queries must match
            dec = self.model.decoder_layers[self.layer]
            x = self.sub_in(s, dec.cross_attn_norm)
            weight = dec.cross_attn.q_proj.weight  # (H·dh, D)
            q = x @ as_numpy(weight, 0).T + as_numpy(dec.cross_attn.q_proj.bias, int(weight.shape[0]))  # (Tq, H·dh)
            recorded = np.concatenate(
                list(np.asarray(self.trace[attention_array("cross", self.layer, "q")])), axis=-1
            )  # (Tq, H·dh)
            return "the queries of the cross-attention that reads this stream next", q, recorded
        block = (
            self.model.encoder_layers[self.layer] if self.kind == "encoder" else self.model.decoder_layers[self.layer]
        )
        h = torch.from_numpy(self.sub_in(s, block.ffn_norm)).to(block.ffn.linear1.weight)
        with torch.inference_mode():
            ffn = block.ffn(h).double().cpu().numpy()  # the model's own feed-forward module
        out = self.sub_out(s, ffn, block.ffn_norm)
        stack = "encoder" if self.kind == "encoder" else "decoder"
        return (
            f"the output of {stack} layer {self.layer + 1} (after the feed-forward sub-layer)",
            out,
            np.asarray(self.trace[f"{stack}.{self.layer}.out"], dtype=np.float64),
        )
