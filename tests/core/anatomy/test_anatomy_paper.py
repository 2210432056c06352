"""The paper's table 3 by the lab's own parameter accounting: printed figures, deltas between rows, vocabulary."""

from __future__ import annotations

import pytest

from core.anatomy.paper import (
    PAPER_VOCAB,
    TABLE_3,
    architecture,
    common_vocab,
    fitted_vocab,
    row,
    row_parameters,
    table_3,
    vocab_interval,
)
from core.anatomy.parameters import parameter_table

PRINTED = {r.label: r.published for r in TABLE_3 if r.published is not None}
SAME_WIDTH = [r for r in TABLE_3 if r.d_model == 512 and r.published is not None and r.label != "base"]


def test_the_printed_figures():
    """The table as printed (checked against several copies of the paper)."""
    assert PRINTED == {
        "base": 65,
        "(B) d_k=16": 58,
        "(B) d_k=32": 60,
        "(C) N=2": 36,
        "(C) N=4": 50,
        "(C) N=8": 80,
        "(C) d_model=256": 28,
        "(C) d_model=1024": 168,
        "(C) d_ff=1024": 53,
        "(C) d_ff=4096": 90,
        "big": 213,
    }
    groups = [r.group for r in TABLE_3]
    assert len(TABLE_3) == 20 and groups.count("A") == 4 and groups.count("C") == 7 and groups.count("D") == 4


@pytest.mark.parametrize("attention_bias", [False, True])
def test_every_row_but_big_reproduces_the_paper_at_one_vocabulary(attention_bias):
    counts = table_3(attention_bias=attention_bias)
    wrong = {c.row.label: (c.millions, c.expected) for c in counts if not c.matches}
    assert wrong == {"big": (218, 213)}
    # rows with no printed figure are the base model's 65: (A) keeps h·d_k = 512, (D) changes no weight,
    # (E) adds a learned table of 512 positions (0.26 million)
    assert {c.row.group for c in counts if c.row.published is None} == {"A", "D", "E"}
    base = counts[0].parameters
    assert all(c.parameters == base for c in counts if c.row.group in ("A", "D"))
    e = next(c for c in counts if c.row.group == "E")
    assert e.parameters - base == 512 * 512


def test_the_vocabulary_the_figures_need():
    assert common_vocab([r for r in TABLE_3 if r.group != "big"]) == (41_004, 41_208)  # as the module says
    assert common_vocab([r for r in TABLE_3 if r.group != "big"], attention_bias=True) == (40_932, 41_160)
    assert vocab_interval(row("big")) == (35_368, 36_344)
    assert common_vocab(TABLE_3) is None  # no vocabulary gives both base's 65 and big's 213
    assert fitted_vocab() == 41_106
    assert vocab_interval(row("(A) h=1")) is None
    # the paper's "about 37000": base counts 63.05 million, big 214.17
    at_37k = {c.row.label: c for c in table_3(PAPER_VOCAB)}
    assert at_37k["base"].parameters == 63_045_632 and at_37k["base"].millions == 63
    assert at_37k["big"].millions == 214


@pytest.mark.parametrize("paper_row", SAME_WIDTH, ids=lambda r: r.label)
def test_deltas_from_base_need_no_vocabulary(paper_row):
    """Rows of the base's d_model differ from it by the same amount at any vocabulary; each printed figure is
    rounded to a million, so the printed delta is within 1 of the exact one."""
    for vocab in (1, PAPER_VOCAB, 41_106):
        exact = (row_parameters(paper_row, vocab) - row_parameters(row("base"), vocab)) / 1e6
        assert abs(exact - (paper_row.published - PRINTED["base"])) < 1, (paper_row.label, exact)


def test_big_against_its_own_width():
    """Big and (C) d_model 1024 share d_model, so their difference needs no vocabulary: the d_ff 2048 -> 4096 step
    (h 16 × d_k 64 = 8 × 128: the attention is the same size) counts 50.4 million; the paper's figures differ by
    45. This is why no vocabulary reproduces both (the module's note)."""
    exact = row_parameters(row("big"), 37_000) - row_parameters(row("(C) d_model=1024"), 37_000)
    assert exact == 12 * (2 * 1024 * 2048 + 2048) == 50_356_224
    assert PRINTED["big"] - PRINTED["(C) d_model=1024"] == 45


def test_rows_use_the_same_accounting():
    arch = architecture(row("(B) d_k=16"), 41_106)
    table = parameter_table(arch)
    attention = table.block("encoder.0.self_attn")
    assert attention.formula == "2·d_model·h·d_k + 2·d_model·h·d_v"  # d_k ≠ d_model / h: its own symbols
    assert attention.size == 2 * 512 * 8 * 16 + 2 * 512 * 8 * 64
    base = parameter_table(architecture(row("base"), 41_106))
    assert base.block("encoder.0.self_attn").formula == "4·d_model²"  # the paper's equations: no biases
    assert base.group_totals()["encoder.0"] == 3_152_384 - 4 * 512  # the layer, less the four biases
    assert {b.name: b.shared_with for b in base.shared} == {"embed.tgt": "embed.src", "output.projection": "embed.src"}
