"""The Learn page's numbers: matrix excerpts, a numpy LayerNorm and RMSNorm, differences, table columns."""

from __future__ import annotations

import numpy as np


def excerpt(matrix: np.ndarray, rows: int = 8, cols: int = 8) -> tuple[np.ndarray, str]:
    """The top-left ``rows`` × ``cols`` corner of ``matrix`` (2-D) and a note saying what was left out ('' when
    nothing was)."""
    m = np.atleast_2d(np.asarray(matrix))
    r, c = m.shape
    part = m[:rows, :cols]
    if (r, c) == part.shape:
        return part, ""
    return part, f"its first {part.shape[0]} of {r} rows and {part.shape[1]} of {c} columns"


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm over the last axis, as torch computes it (biased variance), in float64."""
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * np.asarray(weight, np.float64) + np.asarray(bias, np.float64)


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm over the last axis, as torch computes it: x / sqrt(mean(x²) + eps) · weight (no mean, no bias), in
    float64."""
    x = np.asarray(x, dtype=np.float64)
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * np.asarray(weight, np.float64)


def max_difference(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a − b| (0 for empty arrays)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b), initial=0.0))
