"""The paper's table 3 (Vaswani et al. 2017, "Attention Is All You Need"): each row's parameter count by the same
accounting as the lab's own models (``core.anatomy.parameters``), beside the figure the paper printed.

The rows and printed figures (params ×10^6) were checked against several independent copies of the paper's
table (text extracted from the NIPS 2017 PDF and its arXiv version). Blank cells are the base model's values
("Unlisted values are identical to those of the base model"); the paper prints no parameter figure for rows (A),
(D) and (E).

The paper's model, as its section 3 describes it: post-norm, N encoder and N decoder layers, one matrix for the
source and target embeddings and the pre-softmax projection (section 3.4), sinusoidal positions, attention
projections without biases (its equations have none; ``attention_bias=True`` adds them: at most 0.04 million per
row, never visible at the paper's rounding), feed-forward with biases, a LayerNorm gain and bias per sub-layer.

The vocabulary is the one unknown. The paper says "a shared source-target vocabulary of about 37000 tokens" for
EN-DE; at 37,000 the base model counts 63.05 million, not 65. ``vocab_interval`` solves each row for the
vocabularies that reproduce its printed figure: every row but big agrees on 41,004-41,208 (``common_vocab``).
The big row needs 35,368-36,344 — no single vocabulary gives both base's 65 and big's 213, and the gap does not
depend on the vocabulary: big and row (C) d_model 1024 share d_model, so their difference (published 45) is
the d_ff 2048 -> 4096 step alone, 12 · (2·1024·2048 + 2048) = 50.4 million by this accounting.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from .parameters import Architecture, parameter_table

PAPER_VOCAB = 37_000  # "a shared source-target vocabulary of about 37000 tokens" (section 5.1, EN-DE)
ASSUMED_POSITIONS = 512  # row (E)'s learned table: the paper gives no length; any up to ~800 keeps base's 65


@dataclass(frozen=True)
class PaperRow:
    """One row of table 3: its hyperparameters (blank cells filled with the base model's) and the printed
    parameter figure in millions (None where the paper leaves the cell blank)."""

    label: str  # 'base', '(A) h=1', '(C) d_model=256', 'big'
    group: Literal["base", "A", "B", "C", "D", "E", "big"]
    published: int | None
    N: int = 6
    d_model: int = 512
    d_ff: int = 2048
    h: int = 8
    d_k: int = 64
    d_v: int = 64
    p_drop: float = 0.1
    eps_ls: float = 0.1
    train_steps: str = "100K"
    positional: Literal["sinusoidal", "learned"] = "sinusoidal"


TABLE_3: tuple[PaperRow, ...] = (
    PaperRow("base", "base", 65),
    PaperRow("(A) h=1", "A", None, h=1, d_k=512, d_v=512),
    PaperRow("(A) h=4", "A", None, h=4, d_k=128, d_v=128),
    PaperRow("(A) h=16", "A", None, h=16, d_k=32, d_v=32),
    PaperRow("(A) h=32", "A", None, h=32, d_k=16, d_v=16),
    PaperRow("(B) d_k=16", "B", 58, d_k=16),
    PaperRow("(B) d_k=32", "B", 60, d_k=32),
    PaperRow("(C) N=2", "C", 36, N=2),
    PaperRow("(C) N=4", "C", 50, N=4),
    PaperRow("(C) N=8", "C", 80, N=8),
    PaperRow("(C) d_model=256", "C", 28, d_model=256, d_k=32, d_v=32),
    PaperRow("(C) d_model=1024", "C", 168, d_model=1024, d_k=128, d_v=128),
    PaperRow("(C) d_ff=1024", "C", 53, d_ff=1024),
    PaperRow("(C) d_ff=4096", "C", 90, d_ff=4096),
    PaperRow("(D) P_drop=0.0", "D", None, p_drop=0.0),
    PaperRow("(D) P_drop=0.2", "D", None, p_drop=0.2),
    PaperRow("(D) ε_ls=0.0", "D", None, eps_ls=0.0),
    PaperRow("(D) ε_ls=0.2", "D", None, eps_ls=0.2),
    PaperRow("(E) positional embedding", "E", None, positional="learned"),
    PaperRow("big", "big", 213, d_model=1024, d_ff=4096, h=16, p_drop=0.3, train_steps="300K"),
)


@dataclass(frozen=True)
class PaperCount:
    """A row computed: ``parameters`` at ``vocab``, in millions rounded as the paper prints them, beside the
    printed figure (``expected``: the printed one, or base's where the cell is blank)."""

    row: PaperRow
    vocab: int
    parameters: int
    expected: int
    vocab_interval: tuple[int, int] | None  # the vocabularies that reproduce a printed figure; None: none printed

    @property
    def millions(self) -> int:
        return round(self.parameters / 1e6)

    @property
    def matches(self) -> bool:
        return self.millions == self.expected


def row(label: str) -> PaperRow:
    for r in TABLE_3:
        if r.label == label:
            return r
    raise KeyError(f"no row {label!r} in table 3; rows: {', '.join(r.label for r in TABLE_3)}")


def architecture(
    paper_row: PaperRow, vocab: int, *, attention_bias: bool = False, max_positions: int = ASSUMED_POSITIONS
) -> Architecture:
    """The row's model as the accounting sees it (d_k and d_v of their own, not d_model / h)."""
    return Architecture(
        src_vocab=vocab,
        tgt_vocab=vocab,
        d_model=paper_row.d_model,
        d_ff=paper_row.d_ff,
        n_heads=paper_row.h,
        d_k=paper_row.d_k,
        d_v=paper_row.d_v,
        n_encoder_layers=paper_row.N,
        n_decoder_layers=paper_row.N,
        positional=paper_row.positional,
        max_positions=max_positions,
        attention_bias=attention_bias,
    )


def row_parameters(paper_row: PaperRow, vocab: int, *, attention_bias: bool = False) -> int:
    return parameter_table(architecture(paper_row, vocab, attention_bias=attention_bias)).total


def vocab_interval(paper_row: PaperRow, *, attention_bias: bool = False) -> tuple[int, int] | None:
    """The shared vocabularies V (lowest, highest) for which the row's count rounds to its printed figure:
    count(V) = A + d_model·V (one matrix of V·d_model), solved for (figure - 0.5)e6 <= count < (figure + 0.5)e6.
    None where the paper prints no figure."""
    if paper_row.published is None:
        return None
    d = paper_row.d_model
    fixed = row_parameters(paper_row, 0, attention_bias=attention_bias)  # A: every parameter but the vocabulary's
    low = math.ceil(((paper_row.published - 0.5) * 1e6 - fixed) / d)
    high = math.ceil(((paper_row.published + 0.5) * 1e6 - fixed) / d) - 1
    return low, high


def common_vocab(rows: Iterable[PaperRow], *, attention_bias: bool = False) -> tuple[int, int] | None:
    """The vocabularies that reproduce every printed figure of ``rows`` at once; None when there is none."""
    intervals = [i for r in rows if (i := vocab_interval(r, attention_bias=attention_bias)) is not None]
    low, high = max(i[0] for i in intervals), min(i[1] for i in intervals)
    return (low, high) if low <= high else None


def fitted_vocab(*, attention_bias: bool = False) -> int:
    """The middle of the vocabularies that reproduce every printed figure but big's (see the module's note)."""
    interval = common_vocab([r for r in TABLE_3 if r.group != "big"], attention_bias=attention_bias)
    assert interval is not None
    return (interval[0] + interval[1]) // 2


def table_3(vocab: int | None = None, *, attention_bias: bool = False) -> tuple[PaperCount, ...]:
    """Every row computed at ``vocab`` (None: ``fitted_vocab``), beside the paper's figure."""
    vocab = fitted_vocab(attention_bias=attention_bias) if vocab is None else vocab
    base = row("base")
    assert base.published is not None
    return tuple(
        PaperCount(
            r,
            vocab,
            row_parameters(r, vocab, attention_bias=attention_bias),
            base.published if r.published is None else r.published,
            vocab_interval(r, attention_bias=attention_bias),
        )
        for r in TABLE_3
    )
