"""``linear``: F.linear that streams half the bytes when that changes nothing.

A decoding step multiplies ONE row per sentence by every decoder matrix and the output projection,
so its cost is reading the weights, not arithmetic. Every committed checkpoint stores float16
weights (they load as float32 values that are exactly float16 numbers), so those matrices can be
read as float16 with no loss: fbgemm's ``fbgemm_linear_fp16_weight`` keeps a packed float16 copy,
multiplies in float32 and accumulates in float32. The result equals ``F.linear`` up to the order of
float32 additions (tests/test_fastlinear.py).

It is used only when all of these hold, else ``F.linear`` runs:
  * the CPU build has the fbgemm kernel and ``set_enabled(False)`` was not called;
  * grad mode is off (``torch.no_grad`` / ``torch.inference_mode``, as in every decoding loop);
  * few rows (<= ``ROWS_MAX``: decoding steps, beams, a sentence's encoder) or a large matrix (the vocabulary projection),
    where the kernel measured faster; many rows of a small matrix stay with MKL;
  * the weight is a float32 CPU matrix whose every value is a float16 number (checked once per version).

The packed copies are memoised per weight tensor, keyed by its version counter, storage, dtype, device,
shape and strides, so an optimizer step or ``load_state_dict`` (both write in place) and ``.to()`` / ``.data =``
invalidate them; an entry keeps the old storage alive so its address cannot be reused behind the key.
Not detected: writes through ``weight.data`` (``p.data.mul_(2)``), which bypass the version counter —
call ``set_enabled(False)`` around such code. Inference tensors (a model built under
``torch.inference_mode``) keep no version counter, so they are never memoised (and take F.linear).
The memo holds weak references to the weights and never keeps a model alive.
"""
from __future__ import annotations

import weakref
from typing import Callable, Sequence, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

T = TypeVar("T")

# The kernel runs on one thread. Measured on the benchmark's matrices (256x256, 1024x256, 256x1024) on this
# 2-core machine: as fast as MKL or faster up to 32 rows (mixed at 64) with torch on 1 thread AND on 2 threads
# (e.g. 1024x256, 16 rows: 94 vs 142 us on 1 thread, 125 vs 147 us on 2). More threads are unmeasured here and
# let MKL spread the rows, so they keep the kernel to a few rows.
ROWS_MAX = 32  # rows that take the kernel when torch runs on 1 or 2 threads
ROWS_MAX_THREADED = 8  # ... and on more
LARGE = 1 << 20  # weight elements from which the kernel wins at any row count measured (8000 x 256 here)

_KERNEL = hasattr(torch.ops.aten, "fbgemm_linear_fp16_weight") and "fbgemm" in torch.backends.quantized.supported_engines
_fp16_linear = torch.fbgemm_linear_fp16_weight if _KERNEL else None  # (x, packed, bias) -> x W^T + b (the C binding: no Python op wrapper)
_enabled = _KERNEL


def _use_once_quietly() -> None:
    """torch 2.13 prints a one-line C++ deprecation note the first time each of the two fbgemm ops runs (they
    are still there in the pinned version; if a later torch drops them, ``available()`` is False and F.linear
    runs). Run both once on a 1x1 matrix with file descriptor 2 pointed at /dev/null, so users never see it."""
    import os
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            pack = torch.ops.aten.fbgemm_pack_gemm_matrix_fp16(torch.zeros(1, 1))
            torch.ops.aten.fbgemm_linear_fp16_weight(torch.zeros(1, 1), pack, torch.zeros(1))
    finally:
        os.dup2(saved, 2)
        os.close(saved)


if _KERNEL:
    try:
        _use_once_quietly()
    except Exception:  # no usable fd 2, or the kernel refuses to run here: plain F.linear everywhere
        _KERNEL = _enabled = False
# id(weight) -> (weak reference, key, storage, (packed, zero bias) | None): a plain dict (looked up ~25 times per decoding
# step, where WeakIdKeyDictionary's per-lookup reference objects cost more than the kernel saves on small matrices)
_packed: dict[int, tuple[weakref.ref, tuple, object, tuple[Tensor, Tensor] | None]] = {}
_derived: WeakIdKeyDictionary = WeakIdKeyDictionary()  # anchor tensor -> (keys of its sources, value)


def available() -> bool:
    """True when this build of torch has the fbgemm float16-weight kernel."""
    return _KERNEL


def set_enabled(flag: bool) -> bool:
    """Switch the fast path on or off (for comparisons and tests); returns the previous setting."""
    global _enabled
    previous, _enabled = _enabled, bool(flag) and _KERNEL
    return previous


def is_enabled() -> bool:
    return _enabled


def _key(weight: Tensor) -> tuple | None:
    """What identifies the values of ``weight`` for the memo, or None when nothing can (an inference tensor)."""
    if weight.is_inference():
        return None
    return weight._version, weight.data_ptr(), weight.dtype, weight.device, weight.shape, weight.stride()


def derived(anchor: Tensor, sources: Sequence[Tensor], make: Callable[[], T]) -> T:
    """``make()`` memoised on ``anchor`` until any of ``sources`` (which include it) is written or replaced:
    e.g. the fused Q/K/V matrix of an attention layer, so its packed copy is made once, not per call.
    Not memoised (``make()`` runs as called) when autograd must see it or a source is an inference tensor."""
    keys = tuple(_key(t) for t in sources)
    if None in keys or (torch.is_grad_enabled() and any(t.requires_grad for t in sources)):
        return make()
    entry = _derived.get(anchor)
    if entry is not None and entry[0] == keys:
        return entry[1]
    with torch.inference_mode(False), torch.no_grad():  # an ordinary tensor, whose writes are tracked
        value = make()
    _derived[anchor] = (keys, value)
    return value


def packed(weight: Tensor) -> tuple[Tensor, Tensor] | None:
    """(packed float16 copy, zero bias) of ``weight`` (out, in) if it is losslessly float16, else None."""
    key = _key(weight)
    if key is None:
        return None
    entry = _packed.get(id(weight))
    if entry is not None and entry[1] == key and entry[0]() is weight:
        return entry[3]
    result = None
    if weight.dtype == torch.float32 and weight.is_cpu and weight.dim() == 2:
        with torch.no_grad():
            w = weight.detach()
            if bool(torch.isfinite(w).all()) and bool((w.half().float() == w).all()):
                # packing may write into its input (fbgemm clamps to the float16 range): give it a copy
                result = (torch.ops.aten.fbgemm_pack_gemm_matrix_fp16(w.clone(memory_format=torch.contiguous_format)),
                          w.new_zeros(w.shape[0]))
    ident = id(weight)
    _packed[ident] = (weakref.ref(weight, lambda _: _packed.pop(ident, None)), key, weight.untyped_storage(), result)
    return result


def _kernel_wanted(rows: int, weight: Tensor) -> bool:
    """Whether the float16 kernel may run for ``rows`` input rows (before looking at the weight's values)."""
    if not _enabled or torch.is_grad_enabled():
        return False
    return rows <= (ROWS_MAX if torch.get_num_threads() <= 2 else ROWS_MAX_THREADED) or weight.numel() >= LARGE


def bind(weight: Tensor, bias: Tensor | None, rows: int) -> tuple[Callable[..., Tensor], Tensor, Tensor | None]:
    """What ``linear(x, weight, bias)`` runs for inputs of ``rows`` rows, resolved once: ``(fn, w, b)`` with
    ``fn(x, w, b)`` equal to it — the kernel with the packed copy, or ``F.linear`` with the weight itself.
    For a loop that calls the same matrices many times (``core.step``). x must be contiguous for the kernel."""
    pack = packed(weight) if _kernel_wanted(rows, weight) else None
    if pack is None or _fp16_linear is None:
        return F.linear, weight, bias
    return _fp16_linear, pack[0], pack[1] if bias is None else bias


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``: x (..., in), weight (out, in), bias (out,) -> (..., out).

    Called ~25 times per decoding step, so the checks are ordered cheapest first (about 1 µs in all)."""
    if not _kernel_wanted(x.numel() // max(x.shape[-1], 1), weight):
        return F.linear(x, weight, bias)
    entry = _packed.get(id(weight))
    pack = entry[3] if entry is not None and entry[1] == _key(weight) and entry[0]() is weight else packed(weight)
    if pack is None:  # not float16 numbers (or not a float32 CPU matrix): nothing to gain without changing values
        return F.linear(x, weight, bias)
    return _fp16_linear(x if x.is_contiguous() else x.contiguous(), pack[0], pack[1] if bias is None else bias)
