"""Unit tests of the pure Plotly builders in viz_app/figures/ (no Streamlit involved)."""

from __future__ import annotations

import ast
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from viz_app.figures import attention_maps, decoding, explain, masking, overview, positional, style
from viz_app.figures.attention_maps import GridOptions

REPO = Path(__file__).resolve().parents[2]
SRC = ["▁Is", "▁the", "re", "▁the", "?", "</s>"]  # a repeated piece on purpose
TGT = ["<s>", "▁Ist", "▁noch", "▁noch"]


def _weights(h: int, q: int, k: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(h, q, k))
    e = np.exp(x)
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


def _heatmaps(fig: go.Figure) -> list[go.Heatmap]:
    return [t for t in fig.data if isinstance(t, go.Heatmap)]


# ----------------------------------------------------------------------------- purity
FIGURE_MODULES = sorted(p.stem for p in (REPO / "viz_app" / "figures").glob("*.py"))


def test_the_figure_package_is_every_figure_module() -> None:
    assert {"__init__", "style", "attention_maps", "decoding", "positional"} <= set(FIGURE_MODULES)
    assert not list((REPO / "viz_app").glob("figures*.py"))  # no figure module outside the package


@pytest.mark.parametrize("module", FIGURE_MODULES)
def test_figure_modules_never_import_streamlit(module: str) -> None:
    tree = ast.parse((REPO / "viz_app" / "figures" / f"{module}.py").read_text(encoding="utf-8"))
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [n for n in names if n.split(".")[0] == "streamlit"]


def test_importing_every_figure_module_loads_no_streamlit() -> None:
    """Nor through what they import: one fresh interpreter imports them one after another and names the first that
    brings Streamlit in (one interpreter per module took 15 x 3-20 s here)."""
    dotted = ["viz_app.figures" if m == "__init__" else f"viz_app.figures.{m}" for m in FIGURE_MODULES]
    code = (
        "import importlib, sys\n"
        f"for name in {dotted!r}:\n"
        "    importlib.import_module(name)\n"
        "    if 'streamlit' in sys.modules:\n"
        "        print(name); break\n"
        "else:\n"
        "    print('none')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "none", f"importing {result.stdout.strip()} loads streamlit"


# ----------------------------------------------------------------------------- labels
def test_token_labels_mark_word_starts_and_escape_html() -> None:
    assert style.token_label("▁the") == "␣the"
    assert style.token_label("<s>") == "&lt;s&gt;"  # Plotly would read '<s>' as strike-through markup
    assert style.token_text("<s>") == "<s>"
    assert style.token_text("a\x07") == "a\\u0007"
    assert style.token_text("") == "∅"


def test_unique_labels_keep_duplicate_pieces_apart() -> None:
    labels = style.unique_labels(SRC)
    assert len(set(labels)) == len(SRC)
    assert labels[1] == "2 ␣the" and labels[3] == "4 ␣the"  # 1-based, like layers, heads and steps


def test_plot_config_exports_png() -> None:
    config = style.plot_config("cross L1/H2")
    assert config["toImageButtonOptions"]["format"] == "png"
    assert config["toImageButtonOptions"]["filename"] == "cross_L1_H2"
    assert config["displaylogo"] is False


# ----------------------------------------------------------------------------- head heatmap
def test_head_heatmap_uses_tokens_as_tick_labels_and_rounds() -> None:
    w = _weights(1, len(TGT), len(SRC))[0]
    fig = attention_maps.head_heatmap(w, TGT, SRC, title="Cross · layer 1 · head 1 — PE off")
    (hm,) = _heatmaps(fig)
    assert list(fig.layout.xaxis.ticktext) == style.token_labels(SRC)
    assert list(fig.layout.yaxis.ticktext) == style.token_labels(TGT)
    assert list(fig.layout.xaxis.tickvals) == list(range(len(SRC)))  # positional: duplicates stay separate
    z = np.asarray(hm.z, dtype=np.float64)
    np.testing.assert_allclose(z, np.round(w, style.DECIMALS), atol=1e-6)
    assert (hm.zmin, hm.zmax) == (0.0, 1.0) and hm.colorbar.title.text == "weight<br>(0–1)"  # the lab's default
    assert fig.layout.title.text.endswith("— PE off")
    assert fig.layout.yaxis.autorange == "reversed"  # first query at the top, like a matrix
    assert "query 1 &lt;s&gt;" in hm.text[0][0] and "key 4 ␣the" in hm.text[0][3]


def test_weight_maps_are_fixed_0_to_1_unless_stretched_and_the_colour_bar_says_which() -> None:
    w = _weights(1, 3, 3)[0] * 0.5
    hm = _heatmaps(attention_maps.head_heatmap(w, TGT[:3], SRC[:3], title="t", fixed_scale=True))[0]
    assert (hm.zmin, hm.zmax) == (0.0, 1.0) and hm.colorbar.title.text == "weight<br>(0–1)"
    top = float(np.round(w, style.DECIMALS).max())
    hm = _heatmaps(attention_maps.head_heatmap(w, TGT[:3], SRC[:3], title="t", fixed_scale=False))[0]
    assert (
        hm.zmax == pytest.approx(top, abs=1e-6) and hm.colorbar.title.text == f"weight<br>(0–{top:.2g},<br>stretched)"
    )
    maps = [_weights(2, 3, 3) * 0.1]
    grid = attention_maps.attention_grid(maps, TGT[:3], SRC[:3], title="g")
    assert (grid.layout.coloraxis.cmin, grid.layout.coloraxis.cmax) == (0.0, 1.0)
    stretched = attention_maps.attention_grid(
        maps, TGT[:3], SRC[:3], title="g", options=attention_maps.GridOptions(fixed_scale=False)
    )
    assert stretched.layout.coloraxis.cmax < 0.2 and "stretched" in stretched.layout.coloraxis.colorbar.title.text
    step = decoding.step_attention([maps[0][:, 0]], SRC[:3], title="s", fixed_scale=False).data[0]
    assert step.zmax < 0.2 and "stretched" in step.colorbar.title.text
    assert decoding.step_attention([maps[0][:, 0]], SRC[:3], title="s").data[0].zmax == 1.0


def test_head_heatmap_scores_show_masked_cells_as_gaps_with_a_grey_layer() -> None:
    scores = np.array([[0.5, -np.inf, -np.inf], [1.5, -2.0, -np.inf], [0.1, 0.2, 0.3]], dtype=np.float32)
    fig = attention_maps.head_heatmap(scores, TGT[:3], TGT[:3], title="scores", values="scores")
    main, grey = _heatmaps(fig)
    z = np.asarray(main.z, dtype=np.float64)
    assert np.isnan(z[0, 1]) and np.isnan(z[1, 2]) and z[1, 1] == pytest.approx(-2.0)
    assert main.zmid == 0 and main.zmin == -main.zmax == pytest.approx(-2.0)  # symmetric around 0
    assert "blocked by the mask" in main.text[0][1]
    g = np.asarray(grey.z, dtype=np.float64)
    assert g[0, 1] == 1 and np.isnan(g[0, 0]) and grey.showscale is False


def test_aggregate_mean_and_max() -> None:
    a = np.stack([np.eye(2), np.ones((2, 2)) * 0.5]).astype(np.float32)
    np.testing.assert_allclose(attention_maps.aggregate(a, "mean"), [[0.75, 0.25], [0.25, 0.75]])
    np.testing.assert_allclose(attention_maps.aggregate(a, "max"), [[1.0, 0.5], [0.5, 1.0]])
    with pytest.raises(ValueError):
        attention_maps.aggregate(a, "median")


# ----------------------------------------------------------------------------- grids
def test_attention_grid_shows_every_layer_and_head() -> None:
    maps = [_weights(3, len(TGT), len(SRC), seed=s) for s in range(2)]
    fig = attention_maps.attention_grid(
        maps, TGT, SRC, title="Cross — as trained", options=GridOptions(ablated=[(1, 2)], selected=(0, 1))
    )
    hms = _heatmaps(fig)
    assert len(hms) == 2 and [t.name for t in hms] == ["L1", "L2"]  # one subplot row per layer
    assert (hms[0].xaxis, hms[1].xaxis) == ("x", "x2")
    n_k = len(SRC)
    z = np.asarray(hms[1].z, dtype=np.float64)
    assert z.shape == (len(TGT), 3 * (n_k + 1) - 1)  # three heads side by side, one blank column between
    np.testing.assert_allclose(
        z[:, n_k + 1 : 2 * n_k + 1], np.round(maps[1][1], attention_maps.GRID_DECIMALS), atol=1e-6
    )  # L2 H2
    assert np.isnan(z[:, n_k]).all()
    assert list(hms[0].y) == style.unique_labels(TGT)
    assert hms[0].x[0] == "H1 · key 1 ␣Is" and hms[0].x[n_k + 1 + 3] == "H2 · key 4 ␣the"
    assert len(set(hms[0].x)) == len(hms[0].x)  # categorical labels must be unique
    labels = [a.text for a in fig.layout.annotations]
    assert labels[:3] == ["H1", "H2", "H3"] and "L1" in labels and "L2" in labels
    off = [a for a in fig.layout.annotations if a.text == "off"]
    assert len(off) == 1 and off[0].yref == "y2" and off[0].x == pytest.approx(2 * (n_k + 1) + (n_k - 1) / 2)
    (box,) = fig.layout.shapes  # the selected head, L1 H2
    assert (box.xref, box.x0, box.x1) == ("x", n_k + 1 - 0.5, 2 * n_k + 1 - 0.5)
    assert fig.layout.coloraxis.cmin == 0


def test_grid_writes_each_heads_label_under_its_square_and_sizes_rows_by_cell() -> None:
    maps = [_weights(2, 3, 4, seed=s) for s in range(2)]
    labels = {(1, 0): "previous token", (0, 1): "<s> sink"}
    small = attention_maps.attention_grid(maps, TGT[:3], SRC[:4], title="g", options=GridOptions(head_labels=labels))
    written = {a.name: a for a in small.layout.annotations if a.name and a.name.startswith("label")}
    assert set(written) == {"label L2 H1", "label L1 H2"}
    assert written["label L1 H2"].text == "&lt;s&gt; sink"  # escaped: a label is text, not markup
    assert written["label L2 H1"].yref == "y2" and written["label L2 H1"].y == pytest.approx(3 - 0.5)
    assert written["label L2 H1"].x == pytest.approx((4 - 1) / 2)
    tall = attention_maps.attention_grid(maps, TGT[:3], SRC[:4], title="g", options=GridOptions(cell=300))
    assert tall.layout.height - small.layout.height == 2 * (300 - 120)
    with pytest.raises(ValueError, match="cell must be a positive number of pixels"):
        GridOptions(cell=0)


def test_difference_grid_uses_a_symmetric_scale() -> None:
    a = [_weights(2, 3, 3, seed=0)]
    b = [_weights(2, 3, 3, seed=1)]
    diff = [b[0] - a[0]]
    fig = attention_maps.attention_grid(diff, TGT[:3], TGT[:3], title="Δ", options=GridOptions(diverging=True))
    ca = fig.layout.coloraxis
    assert ca.cmin == pytest.approx(-ca.cmax) and ca.cmid == 0
    assert ca.cmax == pytest.approx(float(np.abs(np.round(diff[0], attention_maps.GRID_DECIMALS)).max()), abs=1e-6)
    assert ca.colorscale[0][1] != ca.colorscale[-1][1]  # diverging: two different ends


# ----------------------------------------------------------------------------- masks
def test_mask_panels_show_each_mask() -> None:
    causal = np.tril(np.ones((4, 4), dtype=bool))
    fig = masking.mask_panels(
        {"padding": np.ones((4, 4), bool), "causal": causal, "applied": causal},
        TGT,
        TGT,
        title="Masks — causal mask off",
    )
    hms = _heatmaps(fig)
    assert len(hms) == 3
    np.testing.assert_array_equal(np.asarray(hms[1].z), causal.astype(int))
    assert [a.text for a in fig.layout.annotations] == ["padding", "causal", "applied"]
    assert sum(bool(h.showscale) for h in hms) == 1
    assert list(hms[2].colorbar.ticktext) == ["blocked", "may attend"]


def test_long_masks_name_positions_on_hover_and_stay_light() -> None:
    n = 200
    tokens = [f"▁w{i}" for i in range(n)]
    causal = np.tril(np.ones((n, n), dtype=bool))
    panels = {"padding": np.ones((n, n), bool), "causal": causal, "applied": causal}
    fig = masking.mask_panels(panels, tokens, tokens, title="Masks — as trained")
    hms = _heatmaps(fig)
    assert all(h.text is None and h.xgap is None for h in hms)
    assert list(hms[0].x[:2]) == [1, 2] and "query %{y}<br>key %{x}" in hms[0].hovertemplate
    np.testing.assert_array_equal(np.asarray(hms[2].z), causal.astype(int))
    ticks = fig.layout.xaxis.tickvals
    assert ticks[0] == 1 and fig.layout.xaxis.ticktext[0].startswith("1")  # a tick sits on the cell it names
    # three panels side by side: a third of the labels each, the "every k-th" note once, no empty-title note
    assert len(ticks) <= style.MAX_TICKS // 3 + 1
    x_titles = [fig.layout[f"xaxis{i}"].title.text for i in ("", "2", "3")]
    assert x_titles[0] == x_titles[2] == "key" and "labelled" in x_titles[1]
    assert [fig.layout[f"yaxis{i}"].title.text for i in ("2", "3")] == ["", ""]
    assert len(fig.to_json()) < 400_000  # three 200 x 200 masks
    small = masking.mask_panels({"applied": causal[:4, :4]}, tokens[:4], tokens[:4], title="t")
    assert _heatmaps(small)[0].text is not None  # short inputs keep their token names


def test_mask_stages_handles_minus_infinity() -> None:
    raw = np.array([0.2, -1.0, 0.7, 1.3])
    mask = np.array([True, True, False, False])
    e = np.exp(raw[:2] - raw[:2].max())
    weights = np.array([*(e / e.sum()), 0.0, 0.0])
    fig = masking.mask_stages(raw, mask, weights, ["<s>", "▁a", "▁b", "▁c"], title="stages — as trained")
    scores, masked, minus_inf, soft = fig.data
    np.testing.assert_allclose(np.asarray(scores.y, float), raw)
    y = np.asarray(masked.y, float)
    assert np.isnan(y[2]) and np.isnan(y[3]) and y[0] == pytest.approx(0.2)
    assert list(minus_inf.x) == [2, 3] and list(minus_inf.text) == ["−∞", "−∞"]
    np.testing.assert_allclose(np.asarray(soft.y, float), np.round(weights, 4))
    assert not np.isnan(np.asarray(soft.y, float)).any()


# ----------------------------------------------------------------------------- decoding, SSRU, PE
def test_step_attention_rows_and_topk_bars() -> None:
    rows = [_weights(2, 1, 3)[:, 0], _weights(2, 1, 3, seed=1)[:, 0]]  # per layer (H, n_key)
    fig = decoding.step_attention(rows, TGT[:3], title="step 3")
    hm = _heatmaps(fig)[0]
    assert list(hm.y) == ["L1 H1", "L1 H2", "L2 H1", "L2 H2"] and np.asarray(hm.z).shape == (4, 3)
    bars = decoding.topk_bars([("▁noch", 0.61234567), ("▁Tee", 0.2)], "▁noch", title="top-k — beam 4")
    bar = bars.data[0]
    assert list(bar.y) == ["1. ␣noch", "2. ␣Tee"] and bar.x[0] == pytest.approx(0.6123)
    assert bar.marker.color[0] != bar.marker.color[1]


def test_ssru_gates_shape_and_mean() -> None:
    gates = np.random.default_rng(0).uniform(size=(4, 16)).astype(np.float32)
    fig = overview.ssru_gates(gates, TGT, title="SSRU gates")
    hm, mean = fig.data
    assert np.asarray(hm.z).shape == (16, 4)  # dimensions × positions
    assert (hm.zmin, hm.zmax) == (0.0, 1.0)
    np.testing.assert_allclose(np.asarray(mean.y, float), np.round(gates.mean(1), 4), atol=1e-6)
    assert list(fig.layout.xaxis2.ticktext) == style.token_labels(TGT)
    # the first decoder input is step 1 and the first dimension 1 in the hover, as the Steps page counts
    assert list(hm.x) == list(mean.x) == [1, 2, 3, 4] and list(fig.layout.xaxis2.tickvals) == [1, 2, 3, 4]
    assert list(hm.y) == list(range(1, 17)) and "step %{x}" in hm.hovertemplate


def test_positional_encoding_figures() -> None:
    from core.transformer.positional import sinusoidal_table

    table = sinusoidal_table(20, 16).numpy()
    matrix = positional.pe_matrix(table, title="PE")
    assert np.asarray(matrix.data[0].z).shape == (20, 16) and matrix.data[0].zmid == 0
    added = positional.pe_matrix(table[:4], tokens=TGT, title="added — PE off")
    assert list(added.layout.yaxis.ticktext) == style.token_labels(TGT)
    curves = positional.pe_curves(table, [0, 5], title="curves")
    assert [t.name for t in curves.data] == ["dim 0", "dim 5"]
    sim = np.asarray(positional.pe_similarity(table, title="sim").data[0].z, float)
    assert sim.shape == (20, 20) and sim[0, 0] == pytest.approx(8.0, abs=1e-3)  # d/2 sin²+cos² pairs
    assert np.allclose(sim, sim.T)


def test_rounded_turns_infinities_into_gaps() -> None:
    r = style.rounded(np.array([1.234567, -math.inf, math.inf]))
    assert r[0] == pytest.approx(1.2346) and np.isnan(r[1]) and np.isnan(r[2]) and r.dtype == np.float32


def test_decoder_and_cross_rows_read_input_then_predicted() -> None:
    q, k = style.query_key_tokens("cross", SRC, TGT, ["▁Ist", "▁noch", "▁Tee", "</s>"])
    assert list(q) == ["<s> → ▁Ist", "▁Ist → ▁noch", "▁noch → ▁Tee", "▁noch → </s>"] and list(k) == SRC
    assert style.token_label(q[1]) == "␣Ist → ␣noch"
    q, k = style.query_key_tokens("encoder", SRC, TGT, ["x"])
    assert list(q) == list(k) == SRC  # encoder rows are source pieces, nothing predicted there


def test_masked_weights_are_grey_and_named_not_zero() -> None:
    w = _weights(1, 4, 4)[0]
    mask = np.tril(np.ones((4, 4), dtype=bool))
    fig = attention_maps.head_heatmap(w, TGT, TGT, title="t", mask=mask)
    main, grey = _heatmaps(fig)
    assert np.isnan(np.asarray(main.z, dtype=float)[0, 1]) and not np.isnan(np.asarray(main.z, dtype=float)[1, 0])
    assert "blocked by the mask" in main.text[0][1] and grey.name == "masked (−∞)"
    grid = attention_maps.attention_grid([_weights(2, 4, 4)], TGT, TGT, title="g", mask=mask)
    assert grid.layout.plot_bgcolor == style.MASKED_BG
    assert np.isnan(np.asarray(_heatmaps(grid)[0].z, dtype=float)[0, 1])


def test_long_axes_label_every_kth_token_with_its_position() -> None:
    tokens = [f"▁w{i}" for i in range(120)]
    axis = style.token_axis(tokens, "key")
    assert len(axis["tickvals"]) == 40 and axis["tickvals"][:3] == [0, 3, 6]
    assert axis["ticktext"][1] == "4 ␣w3" and "every 3rd labelled" in axis["title"]["text"]
    assert len(style.token_axis(tokens[:50], "key")["tickvals"]) == 50  # short axes: every token


def test_token_logprob_bars_compare_the_two_runs() -> None:
    fig = overview.token_logprob_bars(["▁O", "▁gato"], np.array([0.9, 0.8]), np.array([0.5, 0.0]), note="PE off")
    trained, switched = fig.data
    assert list(trained.y) == pytest.approx([math.log(0.9), math.log(0.8)])
    assert switched.y[1] == -30.0 and switched.name == "PE off"  # log 0 drawn at the floor
    assert list(trained.x) == ["1 ▁O", "2 ▁gato"] and fig.layout.title.text.endswith("— PE off")


def test_long_inputs_are_pooled_in_the_grid_and_light_in_the_large_map() -> None:
    z = np.array([[0.1, -0.9, 0.2], [0.3, np.nan, 0.0], [np.nan, np.nan, 0.5]])
    np.testing.assert_allclose(
        attention_maps.pool_max(z, 2, 2), [[-0.9, 0.2], [np.nan, 0.5]]
    )  # largest |value|, sign kept
    assert attention_maps.pooled_labels(["a", "b", "c", "d", "e"], 2) == ["1–2 a…", "3–4 c…", "5–5 e…"]
    n = 150
    tokens = [f"▁w{i}" for i in range(n)]
    grid = attention_maps.attention_grid([_weights(2, n, n)], tokens, tokens, title="g")
    hm = _heatmaps(grid)[0]
    assert (
        np.asarray(hm.z, dtype=float).shape[0] == 50
        and "pooled: largest weight of 3×3 tokens" in grid.layout.title.text
    )
    assert len(grid.to_json()) < 400_000  # about 150 kB instead of several MB
    big = attention_maps.head_heatmap(_weights(1, n, n)[0], tokens, tokens, title="h")
    main = _heatmaps(big)[0]
    assert main.text is None and main.x[0] == 1 and big.layout.xaxis.tickvals[0] == 1  # positions from 1
    assert main.xgap == main.ygap == 0  # no cell gaps at this size (they doubled Plotly's drawing time)
    assert len(big.to_json()) < 300_000
    small = attention_maps.head_heatmap(_weights(1, 6, 6)[0], SRC, SRC, title="h")
    assert _heatmaps(small)[0].text is not None and small.layout.xaxis.tickvals[0] == 0  # short: tokens on hover
    assert _heatmaps(small)[0].xgap == 1


def test_top_k_bars_keep_small_candidates_visible() -> None:
    fig = decoding.topk_bars([("▁gato", 0.99995), ("▁cão", 4e-5), ("▁rato", 1e-5)], "▁gato", title="t")
    assert fig.layout.xaxis.type == "log" and list(fig.data[0].text) == ["100.0%", "0.004%", "0.001%"]
    even = decoding.topk_bars([("a", 0.5), ("b", 0.3)], "a", title="t")
    assert even.layout.xaxis.type != "log" and list(even.data[0].text) == ["50.0%", "30.0%"]


def test_ordinals_read_as_english() -> None:
    from viz_app.figures.style import ordinal

    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111, 112)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "101st", "111th", "112th",
    ]  # fmt: skip


# ----------------------------------------------------------------------------- nothing drawn on top of anything
def test_log_prob_legend_sits_above_the_bars_not_on_them() -> None:
    """Inside the plot area (y 1.12 of a 320 px chart) the legend covered bars 14–17 of an 18-piece sentence."""
    n = 18
    p = np.linspace(0.99, 0.5, n)
    fig = overview.token_logprob_bars([f"▁w{i}" for i in range(n)], p, p / 1e4, note="PE off")
    legend = fig.layout.legend
    assert legend.orientation == "h" and legend.yanchor == "bottom" and legend.y >= 1.0  # wholly above the bars
    title_px = 20 + style.TITLE_LINE * style.title_lines(fig.layout.title.text)  # pad, then the title's lines
    assert fig.layout.margin.t >= title_px + style.LEGEND_ROW  # room for the legend between title and bars
    long = overview.token_logprob_bars(["▁a"], np.array([0.5]), np.array([0.1]), note="PE off, " + "L1H1, " * 20)
    assert long.data[1].name == "with the switches"  # a list of switches would wrap the legend into the title
    assert "<br>" in long.layout.title.text  # the long title wraps (the margin grows with it)
    assert long.layout.margin.t == fig.layout.margin.t + style.TITLE_LINE * (
        style.title_lines(long.layout.title.text) - style.title_lines(fig.layout.title.text)
    )


def test_titles_wrap_at_the_width_given() -> None:
    title = "Decoder self-attention at step 12: every layer/head over the pieces so far — PE off, causal mask off"
    wrapped = style.wrap_title(title, 60)
    lines = wrapped.split("<br>")
    assert len(lines) == 2 and all(len(x) <= 60 for x in lines) and " ".join(lines) == title
    assert style.wrap_title("short", 60) == "short" and style.wrap_title(title, None) == title
    assert style.wrap_title("a " + "x" * 70, 60) == "a<br>" + "x" * 70  # a long word keeps a line to itself
    options = (
        "Log-probability of each as-trained output piece: as trained (blue) and with the switches — 5 heads ablated"
    )
    assert style.wrap_title(options, 100) == options.replace(" — ", "<br>— ")  # the options keep a line whole


def test_charts_in_a_third_of_the_page_wrap_their_titles_narrower() -> None:
    """The Steps page's top candidates and Why this word?'s three importance maps sit in a third of the page (about
    290 px at 1280 px wide): their titles wrap at NARROW_TITLE characters, the others at TITLE_CHARS."""
    bars = decoding.topk_bars([("▁O", 0.6), ("▁A", 0.3)], "▁O", title="Top 10 candidates at step 1 — as trained")
    assert bars.layout.title.text == "Top 10 candidates at step 1<br>— as trained"
    heat = explain.importance_heatmap(np.zeros((2, 2)), title="Decoder masked self-attention — as trained", scale=1.0)
    assert all(len(line) <= style.NARROW_TITLE for line in heat.layout.title.text.split("<br>"))
    wide = style.base_layout(go.Figure(), "x " * 40, height=100)
    assert style.title_lines(wide.layout.title.text) == 2  # 80 characters: two lines of at most TITLE_CHARS


def test_presentation_scales_every_font_and_leaves_the_figure_given_alone() -> None:
    fig = decoding.topk_bars([("▁O", 0.6), ("▁A", 0.3)], "▁O", title="Top 2")
    fig.add_annotation(text="note", font=dict(size=10))
    big = style.scaled_fonts(fig, 1.5)
    assert big.layout.font.size == 1.5 * fig.layout.font.size and big.layout.title.font.size == 24
    assert big.layout.annotations[-1].font.size == 15 and big.layout.height == int(1.5 * fig.layout.height)
    assert big.layout.margin.t == int(1.5 * fig.layout.margin.t)
    assert fig.layout.title.font.size == 16 and fig.layout.annotations[-1].font.size == 10  # a copy was scaled


def test_steps_decoder_title_wraps_instead_of_running_past_the_column() -> None:
    """On the Steps page this chart is two thirds wide (about 600 px at 1280 px): one line was cut at 'PE'."""
    rows = [_weights(2, 1, 3, seed=s)[:, 0, :] for s in range(2)]
    title = "Decoder self-attention at step 3: every layer/head over the pieces so far — PE off"
    fig = decoding.step_attention(rows, TGT[:3], title=title)
    lines = fig.layout.title.text.split("<br>")
    assert len(lines) == 2 and max(map(len, lines)) <= style.TITLE_CHARS
    one_line = decoding.step_attention(rows, TGT[:3], title="step 3")
    assert fig.layout.margin.t == one_line.layout.margin.t + style.TITLE_LINE  # the plot moves down a line
    assert fig.layout.height == one_line.layout.height + style.TITLE_LINE  # and keeps its own height


def _no_change_notes(fig: go.Figure) -> list[str]:
    return [a.text for a in fig.layout.annotations if a.text and a.text.startswith("no change")]


def test_a_difference_map_where_nothing_changed_says_so() -> None:
    zero = np.zeros((3, 4), dtype=np.float32)
    fig = attention_maps.head_heatmap(zero, TGT[:3], SRC[:4], title="Δ", values="difference")
    assert _no_change_notes(fig) == [style.NO_CHANGE]
    changed = zero.copy()
    changed[1, 2] = 1e-6  # tiny, but a change: no claim that nothing changed
    assert (
        _no_change_notes(attention_maps.head_heatmap(changed, TGT[:3], SRC[:4], title="Δ", values="difference")) == []
    )
    weights = attention_maps.head_heatmap(zero, TGT[:3], SRC[:4], title="w")  # weights of 0 are not a difference
    assert _no_change_notes(weights) == []


def test_a_difference_grid_names_the_unchanged_heads_or_says_nothing_changed() -> None:
    still = [np.zeros((2, 3, 3), dtype=np.float32), np.zeros((2, 3, 3), dtype=np.float32)]
    grid = attention_maps.attention_grid(still, TGT[:3], TGT[:3], title="Δ", options=GridOptions(diverging=True))
    assert _no_change_notes(grid) == [style.NO_CHANGE]  # once, for the whole grid
    some = [still[0], _weights(2, 3, 3) - _weights(2, 3, 3, seed=1)]
    some[1][1] = 0.0  # L2 H2 unchanged too
    grid = attention_maps.attention_grid(
        some, TGT[:3], TGT[:3], title="Δ", options=GridOptions(diverging=True, ablated=[(0, 0)])
    )
    notes = [a for a in grid.layout.annotations if a.text == "no change"]
    assert sorted(a.name for a in notes) == ["no change L1 H1", "no change L1 H2", "no change L2 H2"]
    assert style.NO_CHANGE not in _no_change_notes(grid)
    under_off = next(a for a in notes if a.name == "no change L1 H1")
    assert under_off.yshift < 0 and under_off.yref == "y"  # below the 'off' note of the same square, in its panel
    plain = attention_maps.attention_grid(still, TGT[:3], TGT[:3], title="w")  # weights grid: no claim about change
    assert _no_change_notes(plain) == []
