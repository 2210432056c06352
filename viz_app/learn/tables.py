"""How the Learn page shows numbers: small tables with a fixed number of decimals, a weight matrix's corner, a
vector's first dimensions, and a one-line verdict that a value by hand equals the model's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from viz_app.figures import learn

DIGITS = 3
SHOWN = 12  # dimensions of a d_model-long vector shown in a table
CORNER = 8  # rows and columns of a weight matrix shown
TOLERANCE = 1e-3  # float32 arithmetic, summed in another order: differences of about 1e-6 are expected


def frame(matrix: np.ndarray, rows: list[str], prefix: str = "d", digits: int = DIGITS) -> pd.DataFrame:
    """``matrix`` (rows × n) rounded, its columns named d1 … dn."""
    matrix = np.atleast_2d(matrix)
    return pd.DataFrame(
        np.round(matrix, digits), index=rows, columns=[f"{prefix}{j + 1}" for j in range(matrix.shape[1])]
    )


def check(what: str, diff: float) -> None:
    """A one-line verdict: the by-hand numbers equal the model's (largest |difference| shown)."""
    if diff < TOLERANCE:
        st.markdown(f":green-badge[✓ equal] {what} — largest |difference| {diff:.1e}")
    else:
        st.markdown(f":red-badge[✗ differ] {what} — largest |difference| {diff:.2e}")


def static(matrix: np.ndarray, rows: list[str], columns: list[str], digits: int) -> None:
    """A small static table with every number written to ``digits`` decimals."""
    text = [[f"{v:.{digits}f}" for v in row] for row in np.atleast_2d(matrix)]
    st.table(pd.DataFrame(text, index=rows, columns=columns))


def vector_table(rows: dict[str, np.ndarray]) -> None:
    """Rows of d_model-long vectors, their first SHOWN entries, as a static table."""
    first = next(iter(rows.values()))
    n = min(SHOWN, first.shape[-1])
    static(np.stack([v[:n] for v in rows.values()]), list(rows), [f"d{j + 1}" for j in range(n)], DIGITS)
    if first.shape[-1] > n:
        st.caption(f"The first {n} of its {first.shape[-1]} dimensions (all are used).")


def matrix_excerpt(matrix: np.ndarray, label: str) -> None:
    """A weight matrix's top-left corner (4 decimals: weights are small), said so when it is not all of it."""
    part, note = learn.excerpt(matrix, CORNER, CORNER)
    r, c = matrix.shape
    st.markdown(f"**{label}**, {r} × {c}" + (f" — {note}:" if note else ":"))
    rows, cols = [f"row {i + 1}" for i in range(part.shape[0])], [f"col {j + 1}" for j in range(part.shape[1])]
    static(part, rows, cols, 4)
