"""The fast path's weights: ``FastWeights``, made once from a model and passed with each call.

Decoding multiplies a few rows (one per sentence or beam) by every decoder matrix and the vocabulary
projection, so its time is spent streaming weights from memory. Every committed checkpoint stores its
weights as float16 numbers; fbgemm's float16-weight kernel (``torch.fbgemm_linear_fp16_weight``) reads
them at half the bytes and sums in float32 — the same values, within float32 rounding of the sums.

``FastWeights(model)`` packs, once, each matrix whose every value is a float16 number, and keeps a
column-major copy of the others that decoding reads (MKL streams an (in, out)-contiguous matrix faster).
It is a snapshot: the packed copies are what the weights were when it was made. ``Bundle`` makes one when it
loads a checkpoint (its model is never changed afterwards); code that trains a model makes a new one after
changing weights (``is_current`` tells whether any weight was written through autograd-visible ops since).
Nothing is stored on the model, nothing runs at import, no global switch: pass ``fast=None`` to run plain
``F.linear`` everywhere (the reference path).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

if TYPE_CHECKING:
    from .attention import MultiHeadAttention
    from .model import Transformer

Linear = tuple[Callable[..., Tensor], Tensor, Tensor | None]  # (fn, weight, bias): fn(x, weight, bias) = x W^T + b

# The kernel runs on one thread. Measured on the benchmark's matrices (256x256, 1024x256, 256x1024) on a 2-core
# machine: as fast as MKL or faster up to 32 rows (mixed at 64) with torch on 1 thread AND on 2 threads (e.g.
# 1024x256, 16 rows: 94 vs 142 us on 1 thread, 125 vs 147 us on 2). More threads are unmeasured here and let MKL
# spread the rows, so they keep the kernel to a few rows.
ROWS_MAX = 32  # rows that take the kernel when torch runs on 1 or 2 threads
ROWS_MAX_THREADED = 8  # ... and on more
LARGE = 1 << 20  # weight elements from which the kernel wins at more rows (8000 x 256 here) ...
LARGE_ROWS_MAX = 256  # ... up to this many: 32000 x 256 on 1 thread, 256 rows 63 vs 74 ms, 1008 rows 392 vs 299 ms


def kernel_available() -> bool:
    """True when this build of torch has the fbgemm float16-weight kernel."""
    return hasattr(torch, "fbgemm_linear_fp16_weight") and "fbgemm" in torch.backends.quantized.supported_engines


def _pack(weight: Tensor) -> Tensor | None:
    """A packed float16 copy of ``weight`` (out, in) if it is a float32 CPU matrix of float16 numbers, else None."""
    if weight.dtype != torch.float32 or not weight.is_cpu or weight.dim() != 2:
        return None
    w = weight.detach()
    if not (bool(torch.isfinite(w).all()) and bool((w.half().float() == w).all())):
        return None
    with warnings.catch_warnings():  # torch 2.13 marks the (still present) fbgemm ops deprecated, once per process
        warnings.filterwarnings("ignore", message="fbgemm_.* is deprecated", category=UserWarning)
        # packing may write into its input (fbgemm clamps to the float16 range): give it a copy
        return torch.fbgemm_pack_gemm_matrix_fp16(w.clone(memory_format=torch.contiguous_format))


def _fused_qkv(attn: MultiHeadAttention) -> tuple[Tensor, Tensor | None]:
    """Q, K and V projections as ONE (3D, D) matrix and (3D,) bias, column-major: one matmul per step."""
    projections = (attn.q_proj, attn.k_proj, attn.v_proj)
    weight = torch.cat([p.weight.detach().t() for p in projections], dim=1).t()  # (3D, D), strides (1, 3D)
    bias = None if attn.q_proj.bias is None else torch.cat([p.bias.detach() for p in projections])
    return weight, bias


class FastWeights:
    """Packed / re-laid-out copies of ``model``'s matrices, keyed by the weight tensors they copy."""

    def __init__(self, model: Transformer, *, kernel: bool = True) -> None:
        self.kernel = kernel and kernel_available()
        self._packed: dict[int, tuple[Tensor, Tensor]] = {}  # id(weight) -> (packed, zero bias)
        self._column_major: dict[int, Tensor] = {}  # id(weight) -> the same values, strides (1, out)
        # (weight, its version when copied; None for copies made here and inference tensors, which cannot be
        # written in place): holding them keeps the ids above theirs
        self._weights: list[tuple[Tensor, int | None]] = []
        self.fused_qkv: dict[int, tuple[Tensor, Tensor | None]] = {}  # decoder layer -> fused Q/K/V
        per_step = {id(m) for part in (model.decoder_layers, model.output) for m in part.modules()}
        with torch.inference_mode(False), torch.no_grad():  # ordinary tensors, even when made inside inference mode
            for module in model.modules():
                if isinstance(module, nn.Linear):
                    self._add(module.weight, id(module) in per_step)
            for i, layer in enumerate(model.decoder_layers):
                if layer.self_attn is not None:
                    self.fused_qkv[i] = fused = _fused_qkv(layer.self_attn)
                    self._add(fused[0], True, derived=True)
        if self._packed:  # the deprecation note comes once per process, at the first call: take it here
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="fbgemm_.* is deprecated", category=UserWarning)
                tiny = torch.fbgemm_pack_gemm_matrix_fp16(torch.zeros(1, 1))
                torch.fbgemm_linear_fp16_weight(torch.zeros(1, 1), tiny, torch.zeros(1))

    def _add(self, weight: Tensor, per_step: bool, derived: bool = False) -> None:
        """per_step: read at every decoding step (a column-major copy helps when it cannot be packed);
        derived: a copy made here (the fused Q/K/V), not a weight of the model."""
        if id(weight) in self._packed or id(weight) in self._column_major:
            return
        self._weights.append((weight, None if derived or weight.is_inference() else weight._version))
        packed = _pack(weight) if self.kernel else None
        if packed is not None:
            self._packed[id(weight)] = (packed, weight.new_zeros(weight.shape[0]))
        elif per_step and weight.dim() == 2 and weight.is_contiguous():
            self._column_major[id(weight)] = weight.detach().t().contiguous().t()

    def is_current(self) -> bool:
        """False when a weight was written in place since (an optimizer step, ``load_state_dict``). Writes
        through ``.data`` bypass the version counter and are not seen: make a new FastWeights after them."""
        return all(version is None or w._version == version for w, version in self._weights)

    def _rows_ok(self, rows: int, weight: Tensor) -> bool:
        if torch.is_grad_enabled() and weight.requires_grad:
            return False  # the kernel has no backward
        few = ROWS_MAX if torch.get_num_threads() <= 2 else ROWS_MAX_THREADED
        return rows <= few or (weight.numel() >= LARGE and rows <= LARGE_ROWS_MAX)

    def bind(self, weight: Tensor, bias: Tensor | None, rows: int) -> Linear:
        """What ``linear(x, weight, bias)`` runs for inputs of ``rows`` rows, resolved once: ``(fn, w, b)`` with
        ``fn(x, w, b)`` equal to it. For a loop that calls the same matrices many times (``core.plan``)."""
        packed = self._packed.get(id(weight))
        if packed is not None and self._rows_ok(rows, weight):
            return torch.fbgemm_linear_fp16_weight, packed[0], packed[1] if bias is None else bias
        if torch.is_grad_enabled() and weight.requires_grad:
            return F.linear, weight, bias
        return F.linear, self._column_major.get(id(weight), weight), bias

    def linear(self, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """``F.linear(x, weight, bias)`` through the fast copies: x (..., in), weight (out, in) -> (..., out)."""
        fn, w, b = self.bind(weight, bias, x.numel() // max(x.shape[-1], 1))
        if fn is not F.linear and not x.is_contiguous():
            x = x.contiguous()
        return fn(x, w, b)
