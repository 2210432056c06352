"""The fast path's weights: ``FastWeights``, made once from a model and passed with each call.

Decoding multiplies a few rows (one per sentence or beam) by every decoder matrix and the vocabulary
projection, so its time is spent streaming weights from memory. fbgemm's float16-weight kernel
(``torch.fbgemm_linear_fp16_weight``) reads a matrix at half the bytes and sums in float32. It is used only where
it changes no weight: a matrix whose values are float16 numbers (every checkpoint made here stores float16), or
float16 numbers times ONE float32 scale — Marian's int8 models (the imported Bergamot ones) store integers
-127..127 times a scale per matrix, and the integers are float16 numbers: the kernel multiplies by the integers,
then the result by the scale (``x W^T = (x Q^T) s``; the same values within float32 rounding of the sums).

``FastWeights(model)`` packs, once, each such matrix, and keeps a column-major copy of the others that decoding
reads (MKL streams an (in, out)-contiguous matrix faster). It is a snapshot: the packed copies are what the
weights were when it was made. ``Bundle`` makes one when it loads a checkpoint (its model is never changed
afterwards); code that trains a model makes a new one after changing weights (``is_current`` tells whether any
weight was written through autograd-visible ops since). Nothing is stored on the model, nothing runs at import, no
global switch: pass ``fast=None`` to run plain ``F.linear`` everywhere (the reference path). The kernel is CPU
only: on CUDA every matrix takes ``F.linear`` (column-major copies, on the model's device, for the per-step ones).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..transformer.attention import Linear

if TYPE_CHECKING:
    from ..transformer.layers import DecoderLayer, LayerStack

Scale = float | Tensor  # one scale for a whole matrix, or one per output row (out,) for fused matrices
INT8_MAX = 127  # Marian's int8 matrices: integers -127..127 times max|W| / 127

# The kernel runs on one thread. Measured on the benchmark's matrices (256x256, 1024x256, 256x1024) on a 2-core
# machine: as fast as MKL or faster up to 32 rows (mixed at 64) with torch on 1 thread AND on 2 threads (e.g.
# 1024x256, 16 rows: 94 vs 142 us on 1 thread, 125 vs 147 us on 2). More threads are unmeasured here and let MKL
# spread the rows, so they keep the kernel to a few rows.
ROWS_MAX = 32  # rows that take the kernel when torch runs on 1 or 2 threads
ROWS_MAX_THREADED = 8  # ... and on more
LARGE = 1 << 20  # weight elements from which the kernel wins at more rows (8000 x 256 here) ...
LARGE_ROWS_MAX = 256  # ... up to this many: 32000 x 256 on 1 thread, 256 rows 63 vs 74 ms, 1008 rows 392 vs 299 ms
# A packed matrix of this many elements or more is kept as two halves of its rows. With torch on 2 threads or more
# the halves run at once, one on a second thread (the kernel itself keeps to one): a step of a large model streams
# its big matrices (NLLB-600M's 256k-row output layer, its FFNs) on both cores, as F.linear does in float32.
SPLIT = 1 << 22
# ... and the output projection, up to this many elements, also whole, for torch on 1 thread: the halves one after
# the other would be joined by a copy of every logit (a corpus scan's vocabulary projection, 297 positions x 32000:
# 6 ms of 160 here). Twice the packed bytes of that one matrix (32000 x 256: 16 MiB more), not of a larger one
# (NLLB-600M's 256k x 1024) nor of the feed-forward matrices.
WHOLE_MAX = 1 << 24


class Packed(NamedTuple):
    """One packed part of a matrix: its rows ``start:stop``, packed (``_pack``), a zero bias of that many rows, and
    the scale of those rows."""

    matrix: Tensor
    zeros: Tensor
    scale: Scale
    start: int
    stop: int

    def bound(self, bias: Tensor | None) -> Linear:
        """``(fn, w, b)`` with ``fn(x, w, b)`` = x (..., in) times these rows, plus ``bias`` (of these rows, or None):
        the kernel itself when the scale is 1, else the kernel times the scale."""
        if isinstance(self.scale, float) and self.scale == 1.0:
            return torch.fbgemm_linear_fp16_weight, self.matrix, self.zeros if bias is None else bias
        return functools.partial(_scaled_kernel, zeros=self.zeros, scale=self.scale), self.matrix, bias

    def __call__(self, x: Tensor, bias: Tensor | None) -> Tensor:
        """x (..., in) times these rows, plus ``bias``: (..., stop - start)."""
        fn, w, b = self.bound(bias)
        return fn(x, w, b)


def _in_halves(
    x: Tensor, _weight: Tensor, bias: Tensor | None, *, halves: tuple[Packed, Packed], pool: ThreadPoolExecutor
) -> Tensor:
    """x W^T + b for a matrix packed as two halves of its rows: the second on ``pool``'s thread while this thread
    runs the first when torch has 2 threads or more, else one after the other. (..., out)."""
    top, bottom = halves
    b_top, b_bottom = (None, None) if bias is None else (bias[: top.stop], bias[top.stop :])
    if torch.get_num_threads() < 2:
        return torch.cat([top(x, b_top), bottom(x, b_bottom)], dim=-1)
    grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()

    def second() -> Tensor:  # the caller's autograd modes (thread-local) on the pool's thread
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            return bottom(x, b_bottom)

    other = pool.submit(second)
    first = top(x, b_top)
    return torch.cat([first, other.result()], dim=-1)


class FastModel(Protocol):
    """What ``FastWeights`` reads of a model (a ``Transformer`` is one): its modules, the decoder layers and the
    output projection (the matrices read at every decoding step)."""

    @property
    def decoder_layers(self) -> LayerStack[DecoderLayer]: ...

    @property
    def output(self) -> nn.Linear: ...

    def modules(self) -> Iterator[nn.Module]: ...


def kernel_available() -> bool:
    """True when this build of torch has the fbgemm float16-weight kernel."""
    return hasattr(torch, "fbgemm_linear_fp16_weight") and "fbgemm" in torch.backends.quantized.supported_engines


def _grid_scale(weight: Tensor) -> float | None:
    """The scale to try for ``weight`` (``_pack`` checks it): 1.0 when its values are float16 numbers, else
    ``max|W| / 127`` (the one scale of a Marian int8 matrix); None for no CPU matrix (nothing is packed for another
    device: the kernel is CPU only) or non-finite values."""
    if weight.dtype != torch.float32 or weight.dim() != 2 or weight.numel() == 0 or not weight.is_cpu:
        return None
    w = weight.detach()
    low, high = (float(v) for v in torch.aminmax(w))  # one pass, nothing allocated: NaN or inf shows in one of them
    if not (math.isfinite(low) and math.isfinite(high)):
        return None
    if bool((w[:1].half().float() == w[:1]).all()) and bool((w.half().float() == w).all()):  # one row first
        return 1.0
    scale = float(torch.tensor(max(-low, high) / INT8_MAX, dtype=torch.float32))  # a float32 number
    return scale or None


def _pack(weight: Tensor, scale: Scale | None) -> Tensor | None:
    """A packed float16 copy of ``weight`` / ``scale`` (out, in) if that quotient is float16 numbers that give
    ``weight`` back exactly when multiplied by ``scale``; else None. ``scale`` comes from ``_grid_scale`` (for a
    fused matrix, of each part): 1.0 means every value was checked there (finite, a float16 number)."""
    if scale is None or weight.dtype != torch.float32 or not weight.is_cpu or weight.dim() != 2:
        return None
    q = weight.detach()
    if not (isinstance(scale, float) and scale == 1.0):
        rows = scale if isinstance(scale, float) else scale[:, None]  # (out, 1)
        first_rows = rows if isinstance(rows, float) else rows[:1]
        first = torch.round(q[:1] / first_rows)  # one row first: a float32 matrix of other values fails here, cheaply
        if not (bool((first.half().float() == first).all()) and bool((first * first_rows == q[:1]).all())):
            return None
        q = torch.round(q / rows)
        if not (bool((q.half().float() == q).all()) and bool((q * rows == weight.detach()).all())):
            return None  # not float16 numbers times the scale: the kernel would change the weights
    with warnings.catch_warnings():  # torch 2.13 marks the (still present) fbgemm ops deprecated, once per process
        warnings.filterwarnings("ignore", message="fbgemm_.* is deprecated", category=UserWarning)
        # packing may write into its input (fbgemm clamps to the float16 range): give it a copy
        return torch.fbgemm_pack_gemm_matrix_fp16(q.clone(memory_format=torch.contiguous_format))


def _scaled_kernel(x: Tensor, packed: Tensor, bias: Tensor | None, *, zeros: Tensor, scale: Scale) -> Tensor:
    """x (..., in) times a packed matrix of float16 numbers Q, times ``scale``, plus ``bias``: x (Q s)^T + b."""
    y = torch.fbgemm_linear_fp16_weight(x, packed, zeros)  # (..., out) = x Q^T, float32 sums
    if isinstance(scale, float):
        return y.mul_(scale) if bias is None else torch.add(bias, y, alpha=scale)
    return y.mul_(scale) if bias is None else torch.addcmul(bias, y, scale)


def fuse(linears: Sequence[nn.Linear]) -> tuple[Tensor, Tensor | None, Scale | None]:
    """Several projections of the same input as ONE (sum of outs, in) matrix, column-major (one matmul per step),
    its bias (zeros where a part has none; None when no part has one) and its grid scale (``_grid_scale``: one
    float when every part shares it, else one per row; None when a part has none). ``_pack`` checks the scale."""
    weight = torch.cat([p.weight.detach().t() for p in linears], dim=1).t()  # (sum out, in), strides (1, sum out)
    biases = [p.bias for p in linears]
    bias = (
        None
        if all(b is None for b in biases)
        else torch.cat(
            [
                p.weight.new_zeros(p.weight.shape[0]) if b is None else b.detach()
                for p, b in zip(linears, biases, strict=True)
            ]
        )
    )
    scales = [_grid_scale(p.weight) for p in linears]
    known = [s for s in scales if s is not None]
    scale: Scale | None = None
    if len(known) == len(scales):
        if len(set(known)) == 1:
            scale = known[0]
        else:
            scale = torch.cat(
                [
                    torch.full((p.weight.shape[0],), s, device=p.weight.device)
                    for p, s in zip(linears, known, strict=True)
                ]
            )
    return weight, bias, scale


class FastWeights:
    """Packed / re-laid-out copies of ``model``'s matrices, keyed by the weight tensors they copy."""

    def __init__(self, model: FastModel, *, kernel: bool = True) -> None:
        self.kernel = kernel and kernel_available()
        self._packed: dict[int, tuple[Packed, ...]] = {}  # id(weight) -> the whole matrix packed, or its two halves
        self._whole: dict[int, Packed] = {}  # id(weight) -> the output projection kept in halves, packed whole too
        self._column_major: dict[int, Tensor] = {}  # id(weight) -> the same values, strides (1, out)
        # (weight, its version when copied; None for copies made here and inference tensors, which cannot be
        # written in place): holding them keeps the ids above theirs
        self._weights: list[tuple[Tensor, int | None]] = []
        self.fused_qkv: dict[int, tuple[Tensor, Tensor | None]] = {}  # decoder layer -> fused Q/K/V (3D, D)
        self.fused_ssru: dict[int, tuple[Tensor, Tensor | None]] = {}  # decoder layer -> SSRU's [W; W_f] (2D, D)
        per_step = {id(m) for part in (model.decoder_layers, model.output) for m in part.modules()}
        self._output = id(model.output.weight)  # the one matrix also packed whole when split (``WHOLE_MAX``)
        with torch.inference_mode(False), torch.no_grad():  # ordinary tensors, even when made inside inference mode
            for module in model.modules():
                if isinstance(module, nn.Linear):
                    self._add(module.weight, id(module) in per_step, scale=_grid_scale(module.weight))
            for i, layer in enumerate(model.decoder_layers):
                if layer.self_attn is not None:
                    parts = [layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj]
                    target = self.fused_qkv
                else:
                    assert layer.ssru is not None
                    parts, target = [layer.ssru.W, layer.ssru.W_f], self.fused_ssru
                weight, bias, scale = fuse(parts)
                target[i] = (weight, bias)
                self._add(weight, True, derived=True, scale=scale)
        # the second thread of the matrices packed in halves: made here, not at the first call (a FastWeights is
        # shared by the app's sessions, whose threads would race to make it)
        halves = any(len(parts) == 2 for parts in self._packed.values())
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="fast-weights") if halves else None
        if self._packed:  # the deprecation note comes once per process, at the first call: take it here
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="fbgemm_.* is deprecated", category=UserWarning)
                tiny = torch.fbgemm_pack_gemm_matrix_fp16(torch.zeros(1, 1))
                torch.fbgemm_linear_fp16_weight(torch.zeros(1, 1), tiny, torch.zeros(1))

    def _add(self, weight: Tensor, per_step: bool, *, derived: bool = False, scale: Scale | None) -> None:
        """per_step: read at every decoding step (a column-major copy helps when it cannot be packed);
        derived: a copy made here (a fused matrix), not a weight of the model; scale: see ``_pack``."""
        if id(weight) in self._packed or id(weight) in self._column_major:
            return
        self._weights.append((weight, None if derived or weight.is_inference() else weight._version))
        out = weight.shape[0] if weight.dim() == 2 else 0
        cuts = [0, out // 2, out] if weight.numel() >= SPLIT else [0, out]
        parts = []
        for start, stop in zip(cuts, cuts[1:], strict=False):
            rows = scale if isinstance(scale, float) or scale is None else scale[start:stop]
            packed = _pack(weight[start:stop], rows) if self.kernel else None
            if packed is None:
                break
            assert rows is not None
            parts.append(Packed(packed, weight.new_zeros(stop - start), rows, start, stop))
        if parts and len(parts) == len(cuts) - 1:
            self._packed[id(weight)] = tuple(parts)
            if len(parts) == 2 and id(weight) == self._output and weight.numel() <= WHOLE_MAX:
                whole = _pack(weight, scale)
                assert whole is not None and scale is not None  # its halves were packed
                self._whole[id(weight)] = Packed(whole, weight.new_zeros(out), scale, 0, out)
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
        ``fn(x, w, b)`` equal to it. For a loop that calls the same matrices many times (``core.fast.plan``)."""
        packed = self._packed.get(id(weight))
        if packed is not None and self._rows_ok(rows, weight):
            whole = self._whole.get(id(weight))
            if whole is not None and torch.get_num_threads() < 2:  # one thread: the halves gain nothing
                return whole.bound(bias)
            if len(packed) == 2:
                assert self._pool is not None  # made with the halves
                return functools.partial(_in_halves, halves=packed, pool=self._pool), packed[0].matrix, bias
            return packed[0].bound(bias)
        if torch.is_grad_enabled() and weight.requires_grad:
            return F.linear, weight, bias
        return F.linear, self._column_major.get(id(weight), weight), bias

    def linear(self, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """``F.linear(x, weight, bias)`` through the fast copies: x (..., in), weight (out, in) -> (..., out)."""
        fn, w, b = self.bind(weight, bias, x.numel() // max(x.shape[-1], 1))
        if fn is not F.linear and not x.is_contiguous():
            x = x.contiguous()
        return fn(x, w, b)
