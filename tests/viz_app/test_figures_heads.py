"""The head page's pure figure builders: word-alignment links and the alignment matrix, short and long."""

from __future__ import annotations

import numpy as np

from viz_app import figures_heads
from viz_app.figures import HOVER_TEXT_MAX


def test_links_are_one_trace_per_kind_of_link_with_each_segment_named() -> None:
    src, tgt = ["the", "cat", "sleeps"], ["o", "gato", "dorme", "bem"]
    sure, possible = {(0, 0), (1, 1), (2, 2)}, {(2, 3)}
    links = {(0, 0), (1, 1), (2, 3), (0, 3)}  # two sure, one possible, one wrong; (2, 2) missed
    fig = figures_heads.alignment_links(src, tgt, links, title="t", gold=(sure, possible))
    lines = {t.name: t for t in fig.data if t.mode == "lines"}
    assert set(lines) == {"sure in gold", "possible in gold", "not in gold", "gold link missed"}
    sure_line = lines["sure in gold"]
    assert list(sure_line.y) == [1, 0, None, 1, 0, None]  # two segments, separated by a gap
    assert sure_line.text[0] == "the → o (sure in gold)" and sure_line.text[3] == "cat → gato (sure in gold)"
    assert lines["gold link missed"].line.dash == "dot" and lines["not in gold"].line.color == "#d62728"
    many = {(i, i) for i in range(150)}
    words = [f"w{i}" for i in range(150)]
    big = figures_heads.alignment_links(words, words, many, title="t")
    assert sum(t.mode == "lines" for t in big.data) == 1  # not 150 traces


def test_the_matrix_names_words_when_short_and_positions_when_long() -> None:
    src, tgt = ["the", "cat"], ["o", "gato"]
    m = np.array([[0.9, 0.1], [0.2, 0.8]])
    fig = figures_heads.alignment_matrix(m, src, tgt, {(0, 0), (1, 1)}, title="t")
    heat, dots = fig.data
    assert heat.customdata[1][0] == "gato ← the" and list(heat.x) == [0, 1]
    assert list(dots.x) == [0, 1] and list(fig.layout.xaxis.ticktext) == ["the", "cat"]
    n_src, n_tgt = 201, 98
    assert n_src * n_tgt > HOVER_TEXT_MAX
    long_m = np.random.default_rng(0).random((n_tgt, n_src))
    src_w, tgt_w = [f"s{i}" for i in range(n_src)], [f"t{i}" for i in range(n_tgt)]
    fig = figures_heads.alignment_matrix(long_m, src_w, tgt_w, {(0, 0), (200, 97)}, title="t")
    heat, dots = fig.data
    assert heat.customdata is None and "source word %{x}" in heat.hovertemplate
    assert list(heat.x[:2]) == [1, 2] and list(dots.x) == [1, 201] and list(dots.y) == [1, 98]  # 1-based, as hovered
    ticks = fig.layout.xaxis
    assert len(ticks.tickvals) <= 51 and ticks.tickvals[0] == 1 and ticks.ticktext[0].startswith("1 ")
    assert len(fig.to_json()) < 600_000
