"""The Positional-encoding page's pure builders for the other families: a relative bias per head against distance,
its bucket map, the bias a run added, and the cosine similarity of a learned table; and the page's words, computed
from the config."""

from __future__ import annotations

import numpy as np
import torch
from conftest import plotly_array as array
from conftest import tiny_config

from core import Transformer
from core.anatomy.positions import relative_bias
from viz_app.figures import positional
from viz_app.figures import relative_bias as figures
from viz_app.positional import describe


def _t5() -> Transformer:
    torch.manual_seed(0)
    return Transformer(tiny_config(positional="relative", relative_buckets=8, relative_max_distance=12)).eval()


def test_bias_curves_one_line_per_head_and_the_bucket_edges_marked() -> None:
    bias = relative_bias(_t5(), "encoder", 16)
    assert bias is not None
    fig = figures.bias_curves(bias.distances, bias.values, title="t", exact=bias.exact, max_distance=12)
    assert [t.name for t in fig.data] == ["head 1", "head 2"]
    np.testing.assert_allclose(array(fig.data[1].y), np.round(bias.values[1], 4))
    marks = sorted(shape.x0 for shape in fig.layout.shapes)
    assert marks == [-12, -2, 2, 12]  # ±exact and ±max_distance, both inside ±16
    assert [a.text for a in fig.layout.annotations] == ["shared buckets from here", "one bucket from here"]


def test_bucket_map_and_the_run_grid() -> None:
    bias = relative_bias(_t5(), "decoder", 6)
    assert bias is not None
    fig = figures.bucket_map(bias.bucket_map(5), title="b")
    z = array(fig.data[0].z)
    assert z.shape == (5, 5) and (np.triu(z, 1) == 0).all()  # the decoder: later keys all read bucket 0
    grid = figures.bias_grid(
        np.arange(2 * 3 * 3, dtype=float).reshape(2, 3, 3), ["a", "b", "c"], ["a", "b", "c"], title="g"
    )
    assert len(grid.data) == 2 and [a.text for a in grid.layout.annotations] == ["head 1", "head 2"]
    assert grid.data[0].zmin == -grid.data[0].zmax == -17.0  # one symmetric scale for every head
    causal = np.tril(np.ones((3, 3), bool))
    masked = figures.bias_grid(np.ones((2, 3, 3)), ["a", "b", "c"], ["a", "b", "c"], title="g", mask=causal)
    assert np.isnan(array(masked.data[1].z)[0, 2]) and array(masked.data[1].z)[2, 0] == 1.0  # blocked: grey


def test_bucket_map_names_1_based_positions() -> None:
    fig = figures.bucket_map(np.zeros((3, 4), dtype=int), title="b")
    heat = fig.data[0]
    assert list(heat.x) == [1, 2, 3, 4] and list(heat.y) == [1, 2, 3]  # ticks and hover: position 1 = first piece
    assert "query %{y}, key %{x}" in heat.hovertemplate
    np.testing.assert_array_equal(array(heat.customdata)[0], [0, 1, 2, 3])  # distances do not shift


def test_bias_grid_hover_names_1_based_positions_as_the_ticks_do() -> None:
    grid = figures.bias_grid(np.zeros((2, 2, 3)), ["▁The", "▁cat"], ["▁The", "▁cat", "</s>"], title="g")
    heat = grid.data[1]
    assert heat.text[0][2] == "query 1 ␣The<br>key 3 &lt;/s&gt;" and "%{text}" in heat.hovertemplate
    assert "%{y}" not in heat.hovertemplate and heat.hovertemplate.startswith("head 2")
    bare = figures.bias_grid(np.zeros((1, 2, 2)), ["1", "2"], ["1", "2"], title="g")  # no tokens: positions only
    assert bare.data[0].text[1][0] == "query 2<br>key 1" and list(bare.layout.yaxis.ticktext) == ["1", "2"]
    n = 70  # beyond HOVER_TEXT_MAX cells: positions as coordinates, 1..n on the ticks and in the hover
    big = figures.bias_grid(np.zeros((1, n, n)), [f"▁w{i}" for i in range(n)], [f"▁w{i}" for i in range(n)], title="g")
    assert big.data[0].text is None and "query %{y}" in big.data[0].hovertemplate
    assert list(big.data[0].x)[0] == 1 and big.layout.xaxis.tickvals[1] == 5 and big.layout.xaxis.ticktext[1] == "5 ␣w4"
    assert tuple(big.layout.yaxis.range) == (n + 0.5, 0.5)


def test_cosine_similarity_of_a_learned_table() -> None:
    table = np.array([[1.0, 0.0], [10.0, 0.0], [0.0, 3.0]])
    sim = array(positional.pe_similarity(table, title="s", cosine=True).data[0].z)
    np.testing.assert_allclose(sim, [[1, 1, 0], [1, 1, 0], [0, 0, 1]])  # lengths do not count
    assert array(positional.pe_similarity(table, title="s").data[0].z)[1, 1] == 100.0  # the dot product does


def test_the_words_follow_the_config() -> None:
    t5 = tiny_config(positional="relative", relative_buckets=8, relative_max_distance=12)
    assert "no position vector" in describe.summary(t5) and "8 distance buckets" in describe.summary(t5)
    assert "relative position bias" in describe.switch_help(t5)
    assert "self-attention bias" in describe.side_help(t5) and "input" in describe.side_help(tiny_config())
    bart = tiny_config(positional="learned", position_offset=2, separate_positions=True, embed_norm=True)
    said = describe.summary(bart)
    assert "learned" in said and "one for the target" in said and "row p + 2" in said and "LayerNorm" in said
    assert "Position 1 reads row 3 of the table" in said  # rows counted from 1, as positions
    assert describe.short(t5) == "relative position bias (8 buckets up to distance 12)"
    assert describe.short(bart) == "learned tables, one per side, from row 3"  # position 1 reads the 3rd row
    plain = tiny_config()
    assert describe.short(plain) == "sinusoids (interleaved)"
    assert "reads row" not in describe.summary(plain) and "embedding" in describe.switch_help(plain)
    assert describe.FORMULA_COUNT in describe.summary(plain)  # the formula's pos and i count from 0: said beside it
    bias = relative_bias(_t5(), "encoder", 4)
    assert bias is not None
    words = describe.buckets(bias)
    assert "4 buckets for keys before the query and 4 for keys after it" in words and "Distances 0 to 1" in words
    decoder = relative_bias(_t5(), "decoder", 4)
    assert decoder is not None and "all 8 buckets for keys before the query" in describe.buckets(decoder)
