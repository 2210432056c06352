"""The head page's pure figure builders: word-alignment links and the alignment matrix, short and long."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from viz_app.figures import head_roles
from viz_app.figures.style import HOVER_TEXT_MAX

KINDS = {"encoder": "encoder self-attention", "decoder": "decoder masked self-attention", "cross": "cross-attention"}


def test_links_are_one_trace_per_kind_of_link_with_each_segment_named() -> None:
    src, tgt = ["the", "cat", "sleeps"], ["o", "gato", "dorme", "bem"]
    sure, possible = {(0, 0), (1, 1), (2, 2)}, {(2, 3)}
    links = {(0, 0), (1, 1), (2, 3), (0, 3)}  # two sure, one possible, one wrong; (2, 2) missed
    fig = head_roles.alignment_links(src, tgt, links, title="t", gold=(sure, possible))
    lines = {t.name: t for t in fig.data if t.mode == "lines"}
    assert set(lines) == {"sure in gold", "possible in gold", "not in gold", "gold link missed"}
    sure_line = lines["sure in gold"]
    assert list(sure_line.x) == [0, 1, None, 0, 1, None]  # two segments, source (left) to target, with a gap
    assert list(sure_line.y) == [0, 0, None, 1.5, 1, None]  # 3 source words spread over the 4 target rows
    assert sure_line.text[0] == "the → o (sure in gold)" and sure_line.text[3] == "cat → gato (sure in gold)"
    assert lines["gold link missed"].line.dash == "dot" and lines["not in gold"].line.color == "#d62728"
    many = {(i, i) for i in range(150)}
    words = [f"w{i}" for i in range(150)]
    big = head_roles.alignment_links(words, words, many, title="t")
    assert sum(t.mode == "lines" for t in big.data) == 1  # not 150 traces


def test_the_matrix_names_words_when_short_and_positions_when_long() -> None:
    src, tgt = ["the", "cat"], ["o", "gato"]
    m = np.array([[0.9, 0.1], [0.2, 0.8]])
    fig = head_roles.alignment_matrix(m, src, tgt, {(0, 0), (1, 1)}, title="t")
    heat, dots = fig.data
    assert heat.customdata[1][0] == "gato ← the" and list(heat.x) == [0, 1]
    assert list(dots.x) == [0, 1] and list(fig.layout.xaxis.ticktext) == ["the", "cat"]
    n_src, n_tgt = 201, 98
    assert n_src * n_tgt > HOVER_TEXT_MAX
    long_m = np.random.default_rng(0).random((n_tgt, n_src))
    src_w, tgt_w = [f"s{i}" for i in range(n_src)], [f"t{i}" for i in range(n_tgt)]
    fig = head_roles.alignment_matrix(long_m, src_w, tgt_w, {(0, 0), (200, 97)}, title="t")
    heat, dots = fig.data
    assert heat.customdata is None and "source word %{x}" in heat.hovertemplate
    assert list(heat.x[:2]) == [1, 2] and list(dots.x) == [1, 201] and list(dots.y) == [1, 98]  # 1-based, as hovered
    ticks = fig.layout.xaxis
    assert len(ticks.tickvals) <= head_roles.MATRIX_X_TICKS and ticks.tickvals[0] == 1
    assert ticks.ticktext[0].startswith("1 ") and ticks.title.text == "source word"
    forty = head_roles.alignment_matrix(np.eye(40), [f"w{i}" for i in range(40)], ["o"] * 40, set(), title="t")
    assert len(forty.layout.xaxis.tickvals) <= head_roles.MATRIX_X_TICKS  # 40 labels in ~300 px overlapped
    assert len(fig.layout.yaxis.tickvals) <= 50
    assert len(fig.to_json()) < 600_000


def _word_rows(fig) -> dict[str, tuple[list[float], list[str]]]:
    return {t.name: (list(t.y), list(t.text)) for t in fig.data if t.mode == "markers+text"}


@pytest.mark.parametrize("n_words", [1, 2, 13, 40, 60])
def test_link_diagram_words_never_overlap_at_any_length(n_words: int) -> None:
    """Side by side in a row, neighbouring words ran together ('lighthousekeeper', 'guardeiãodo'): each word now
    has a line of its own, at least a text line apart, and the side margins hold the longest word."""
    src = ["The", "old", "lighthouse", "keeper", "wrote", "letters", "to", "his", "daughter", "every", "winter."]
    tgt = ["O", "velho", "guardeião", "do", "farol", "escreveu", "cartas", "para", "sua", "filha", "a", "cada"]
    src_words = [src[i % len(src)] + ("-extraordinarily-long-word" if i == 7 else "") for i in range(n_words)]
    tgt_words = [tgt[i % len(tgt)] for i in range(max(1, n_words - 3))]
    links = {(i, min(i, len(tgt_words) - 1)) for i in range(n_words)}
    fig = head_roles.alignment_links(src_words, tgt_words, links, title="Links read from best head")
    layout = fig.layout
    plot_px = layout.height - layout.margin.t - layout.margin.b
    lo, hi = sorted(layout.yaxis.range)
    px_per_unit = plot_px / (hi - lo)
    rows = _word_rows(fig)
    assert set(rows) == {"source words", "target words"}
    for name, (ys, text) in rows.items():
        gaps = np.diff(sorted(ys)) * px_per_unit
        assert len(text) == (n_words if name == "source words" else len(tgt_words))
        if len(ys) > 1:  # a 12 px word is about 15 px tall
            assert gaps.min() >= 1.5 * head_roles.WORD_FONT, (name, gaps.min())
        assert all(lo <= y <= hi for y in ys)  # every word inside the drawn range
    words = {t.name: t for t in fig.data if t.mode == "markers+text"}
    assert words["source words"].textposition == "middle left" and words["target words"].textposition == "middle right"
    assert words["source words"].cliponaxis is False  # written in the margin, not cut at the plot's edge
    widest_src = max(head_roles.label_px(w) for w in src_words)
    widest_tgt = max(head_roles.label_px(w) for w in tgt_words)
    assert layout.margin.l >= widest_src + 10 and layout.margin.r >= widest_tgt + 10
    assert widest_src <= head_roles.WORD_MAX * head_roles.CHAR_PX + 1  # a very long word is cut, not the page
    if n_words >= 8:
        assert any(t.endswith("…") for t in rows["source words"][1])


def test_head_table_shows_a_dash_and_says_why_a_value_is_missing() -> None:
    nan = float("nan")
    rows = [
        {"kind": "encoder", "layer": 1, "head": 1, "entropy": 0.5, "previous": 0.2, "next": 0.1, "alignment AER": nan,
         "labels": "EOS sink", "evidence": "eos 0.61 ≥ 0.5 over 15 rows"},
        {"kind": "decoder", "layer": 1, "head": 1, "entropy": 0.4, "previous": 0.3, "next": nan, "alignment AER": nan,
         "labels": "", "evidence": ""},
        {"kind": "cross", "layer": 1, "head": 1, "entropy": 0.3, "previous": nan, "next": nan, "alignment AER": 0.2,
         "labels": "alignment", "evidence": "AER 0.20 ≤ 0.3 on gold"},
    ]  # fmt: skip
    table = head_roles.head_table(rows, KINDS)
    assert list(table.frame.columns[:4]) == ["kind", "layer", "head", "labels"]  # labels seen without scrolling
    assert table.frame.columns[-1] == "evidence" and table.frame["kind"][2] == "cross"  # short: a narrow column
    assert table.help["kind"] == (
        "encoder = encoder self-attention; decoder = decoder masked self-attention; cross = cross-attention"
    )
    assert table.widths["labels"] >= 7 * len("alignment") and table.widths["evidence"] >= 7 * len(rows[0]["evidence"])
    aer = table.help["alignment AER"]
    assert "— for encoder and decoder:" in aer
    assert "only cross-attention heads are scored as word aligners" in aer
    assert "cross-attention has no previous or next token" in table.help["previous"]
    assert "the causal mask hides the next token" in table.help["next"]
    assert "cross-attention has no previous or next token" in table.help["next"]
    assert "—" not in table.help["entropy"]  # nothing missing there, nothing to explain
    assert "alignment AER" in table.note and "previous" in table.note and "entropy" not in table.note
    # Streamlit draws an empty number as the word 'None': a column with gaps is text, '—' where there is no value
    assert list(table.frame["alignment AER"]) == ["—", "—", "0.200"]
    assert list(table.frame["next"]) == ["0.100", "—", "—"] and table.as_text == ("previous", "next", "alignment AER")
    assert not table.frame.isna().any().any()
    assert list(table.frame["entropy"]) == [0.5, 0.4, 0.3]  # no gaps: stays a number
    padded = head_roles.numbers_as_text(pd.Series([12.1, 3.65, None, 0.5]))
    assert padded == ["12.100", " 3.650", "—", " 0.500"]
    assert sorted(padded) == [" 0.500", " 3.650", "12.100", "—"]  # text order is still the order of the values
    full = head_roles.head_table([{**rows[0], "alignment AER": 0.4, "next": 0.2}], KINDS)
    assert full.note == "" and "—" not in full.help["alignment AER"]
    assert head_roles.missing_reason("alignment AER", "cross").startswith("the hand-aligned gold sentences")
    assert head_roles.missing_reason("entropy", "decoder").startswith("no query row defines it")
