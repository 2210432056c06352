"""The "Why this word?" page (AppTest) and its pure figure builders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_helpers import chart_titles, ok, specs
from conftest import build_tiny_checkpoint
from conftest import plotly_array as array
from streamlit.testing.v1 import AppTest

from viz_app.explain import attribution as attribution_tab
from viz_app.figures import explain

APP = Path(__file__).resolve().parents[2] / "viz_app" / "app.py"
TIMEOUT = 120


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("explain_checkpoints")
    build_tiny_checkpoint(root / "tiny", seed=3)
    return root


@pytest.fixture(autouse=True)
def _env(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(root))
    monkeypatch.setenv("LAB_CHECKPOINT", "tiny")
    torch.set_num_threads(1)


def test_importance_maps_ranking_and_the_jump_to_a_head() -> None:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.switch_page("views/explain.py").run(timeout=TIMEOUT)
    ok(at)
    assert chart_titles(at) == [
        f"{k} — as trained" for k in ("Encoder self-attention", "Decoder masked self-attention", "Cross-attention")
    ]
    table = at.dataframe[0].value
    assert len(table) == 12 and list(table["Δ log p"]) == sorted(table["Δ log p"])  # most relied-on first
    assert any("With only these" in m.value for m in at.markdown)
    picked = table["head"].iloc[-1]  # the least important head
    at.selectbox(key="explain_head").set_value(picked).run(timeout=TIMEOUT)
    at.button(key="explain_open").click().run(timeout=TIMEOUT)
    ok(at)
    kind, layer, head = picked.split()
    assert at.session_state["kind"] == kind
    assert at.session_state["layer"] == int(layer[1:]) - 1 and at.session_state["head"] == int(head[1:]) - 1
    assert any(
        t.startswith(f"{'Cross' if kind == 'cross' else kind.capitalize()}") and f"head {head[1:]}" in t
        for t in chart_titles(at)
    ), chart_titles(at)  # the Head detail page shows that head


def test_a_long_sentence_opens_with_the_estimate_and_measures_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    from viz_app.session import runs

    monkeypatch.setattr(runs, "IMPORTANCE_EXACT_PIECES", 4)  # the tiny model's sentence counts as long
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.switch_page("views/explain.py").run(timeout=TIMEOUT)
    ok(at)
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(specs) == 3 and all("(estimate)" in s["data"][0]["colorbar"]["title"]["text"] for s in specs)
    table = at.dataframe[0].value
    assert "Δ log p (estimate)" in table and set(table["output changes"]) == {"not measured"}
    assert any("estimate" in i.value and "one teacher-forced pass per head" in i.value for i in at.info)
    assert not any("With only these" in m.value for m in at.markdown)  # the extra translations wait for a click
    at.toggle(key="explain_k_translate").set_value(True).run(timeout=TIMEOUT)
    assert any("With only these" in m.value for m in at.markdown)
    at.button(key="explain_exact").click().run(timeout=TIMEOUT)
    ok(at)
    assert at.toggle(key="explain_k_translate").value  # still on request (each translation decodes it all again)
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert not any("(estimate)" in s["data"][0]["colorbar"]["title"]["text"] for s in specs)
    table = at.dataframe[0].value
    assert "Δ log p" in table and set(table["output changes"]) <= {"yes", "no"}
    assert any("The one-pass estimate ranked the heads with ρ =" in c.value for c in at.caption)
    at.selectbox(key="explain_head").set_value(table["head"].iloc[-1]).run(timeout=TIMEOUT)  # stays measured
    ok(at)
    assert "Δ log p" in at.dataframe[0].value


def test_rollout_tab_draws_each_output_word_over_the_source() -> None:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["explain_tab"] = "Attention rollout"
    at.switch_page("views/explain.py").run(timeout=TIMEOUT)
    ok(at)
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(specs) == 1 and specs[0]["layout"]["title"]["text"].startswith("Rollout")
    heat = specs[0]["data"][0]
    z = array(heat["z"])
    np.testing.assert_allclose(z.sum(-1), 1.0, atol=1e-3)  # each output word: a distribution over the source
    # the colours span the values drawn, and the caption quotes that very range
    assert (heat["zmin"], heat["zmax"]) == (pytest.approx(z.min()), pytest.approx(z.max()))
    assert any(f"Colours run from {heat['zmin']:.3f} (lightest) to {heat['zmax']:.3f}" in c.value for c in at.caption)
    # which of the three source shares this is, and the two others linked
    assert any(c.value.startswith("This share is attention rollout:") for c in at.caption)
    at.button(key="share_rollout_sentence").click().run(timeout=TIMEOUT)  # opens the ALTI+ share's tab
    assert at.session_state["explain_tab"] == "Source or prefix?"
    assert any(c.value.startswith("This share is ALTI+ over the translation:") for c in at.caption)
    at.session_state["explain_tab"] = "Attention rollout"
    ok(at.run(timeout=TIMEOUT))
    aside = next(t for t in at.toggle if t.label.startswith("Set special tokens aside"))
    n_src = z.shape[1]
    aside.set_value(not aside.value).run(timeout=TIMEOUT)
    ok(at)
    other = array(json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]["z"])
    assert {other.shape[1], n_src} == {n_src, n_src - 1}  # </s>'s column comes and goes
    np.testing.assert_allclose(other.sum(-1), 1.0, atol=1e-3)  # rows renormalised over what is drawn
    at.radio(key="explain_fusion").set_value("max").run(timeout=TIMEOUT)
    ok(at)
    assert "max of heads" in chart_titles(at)[0]


@pytest.mark.parametrize("tab", ["Attention rollout", "Patching", "Attribution"])
def test_a_link_naming_a_tab_opens_it_and_the_open_tab_is_in_the_link(tab: str) -> None:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update({"page": "explain", "explain_tab": tab})
    ok(at.run(timeout=TIMEOUT))
    assert at.session_state["explain_tab"] == tab
    drawn = {"Attention rollout": "explain_fusion", "Patching": "explain_how", "Attribution": "explain_attr_position"}
    assert drawn[tab] in at.session_state  # only the open tab draws its widgets
    assert at.query_params["explain_tab"] == tab  # and the address bar keeps it for the next link
    at.session_state["explain_tab"] = "Head importance"  # the default tab leaves the link
    ok(at.run(timeout=TIMEOUT))
    assert "explain_tab" not in at.query_params and at.query_params["page"] == "explain"


def test_figure_builders() -> None:
    m = np.array([[-4.0, 0.5], [0.0, -1.0]])
    fig = explain.importance_heatmap(m, title="t", scale=2.0)
    heat = fig.data[0]
    np.testing.assert_allclose(np.array(heat.z), m)  # Δ log p as the table and hover give it, one sign on the page
    assert heat.reversescale  # a loss (Δ < 0: a head relied on) at the warm end
    assert (heat.zmin, heat.zmax, heat.zmid) == (-2.0, 2.0, 0.0)
    assert list(heat.x) == ["H1", "H2"] and list(heat.y) == ["L1", "L2"]
    assert heat.colorbar.title.text == "Δ log p" and "Δ log p = -4.000" in heat.text[0][0]
    est = explain.importance_heatmap(m, title="t", scale=2.0, estimate=True).data[0]
    assert "estimate" in est.colorbar.title.text and "Δ log p ≈ -4.000 (estimate)" in est.text[0][0]
    assert "Δ log p = -4.000" in heat.text[0][0]
    share = np.array([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]])
    fig = explain.rollout_heatmap(share, ["▁O", "▁gato", "</s>"], ["▁The", "▁cat"], title="r")
    assert np.array(fig.data[0].z).shape == (3, 2) and fig.layout.yaxis.ticktext[1] == "␣gato"
    assert (fig.data[0].zmin, fig.data[0].zmax) == (0.2, 0.8)  # the range drawn, not 0 to the largest
    bars = explain.attribution_bars(["▁The", "▁cat"], {"a": np.array([1.0, -2.0])}, title="b")
    legend = bars.layout.legend
    assert legend.orientation == "v" and legend.x > 1  # beside the plot, clear of the token labels and axis title
    np.testing.assert_allclose(bars.data[0].y, [0.5, -1.0])


def test_rollout_with_special_tokens_set_aside_keeps_each_source_position() -> None:
    share = np.array([[0.25, 0.75], [0.5, 0.5]])  # '<s> ▁The <unk> ▁cat </s>' with 0, 2 and 4 set aside
    fig = explain.rollout_heatmap(share, ["▁O", "▁gato"], ["▁The", "▁cat"], title="r", src_positions=[1, 3])
    assert fig.data[0].text[1][1] == "output 2 ␣gato<br>source 4 ␣cat<br>share 0.500"  # not 'source 2'
    assert list(fig.layout.xaxis.ticktext) == ["␣The", "␣cat"]
    n = 60  # numbered ticks (a long sentence) name the original positions too
    long = explain.rollout_heatmap(
        np.ones((1, n)) / n, ["▁O"], [f"▁w{j}" for j in range(n)], title="r", src_positions=range(1, n + 1)
    )
    assert list(long.layout.xaxis.ticktext)[:2] == ["2 ␣w0", "4 ␣w2"]
    assert (
        explain.rollout_heatmap(share, ["▁O", "▁gato"], ["▁The", "▁cat"], title="r")
        .data[0]
        .text[0][1]
        .startswith("output 1 ␣O<br>source 2 ␣cat")
    )  # every column drawn: positions 1, 2, …


def test_patching_tab_restores_the_replaced_word_and_names_bad_pairs() -> None:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["text"] = "The cat sleeps on the warm chair."
    at.query_params["explain_tab"] = "Patching"
    at.session_state["explain_how"] = "typing the sentence"
    at.switch_page("views/explain.py").run(timeout=TIMEOUT)
    ok(at)
    assert not at.get("plotly_chart")  # nothing until the corrupted sentence is typed
    at.text_input(key="explain_corrupt").set_value("The car sleeps on the warm chair.").run(timeout=TIMEOUT)
    ok(at)
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert [s["layout"]["title"]["text"].split(" — ")[0] for s in specs] == [
        "Source position × encoder layer: share restored",
        "One cross-attention head: share restored",
        "Decoder input position × layer: share restored",
    ]
    restored = array(specs[0]["data"][0]["z"])
    ticks = specs[0]["layout"]["xaxis"]["ticktext"]
    assert restored.shape == (3, len(ticks))
    # the clean embedding at the replaced piece ("c|at" -> "c|ar": the piece after "␣c") brings it all back
    replaced = ticks.index("at")
    assert restored[0, replaced] == pytest.approx(1.0, abs=1e-3)
    assert np.abs(np.delete(restored[0], replaced)).max() < 1e-3
    at.text_input(key="explain_corrupt").set_value("A dog.").run(timeout=TIMEOUT)
    assert not at.exception
    said = [w.value for w in at.warning if "same number of pieces" in w.value]
    # says what the sentence was for (it used to read "Cannot translate this text. the corrupted sentence ...")
    assert said and said[0].startswith("**Cannot patch with this corrupted sentence.** The corrupted sentence has")


def test_attribution_tab_compares_attribution_with_attention() -> None:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["explain_tab"] = "Attribution"
    at.switch_page("views/explain.py").run(timeout=TIMEOUT)
    ok(at)
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    names = [d["name"] for d in spec["data"]]
    assert names[0] == "integrated gradients |IG|" and "rollout" in names and len(names) == 5
    prefix = json.loads(at.get("plotly_chart")[1].proto.spec)
    assert prefix["layout"]["title"]["text"].startswith("… and over the decoder inputs")
    assert any("agrees best with the attribution" in m.value for m in at.markdown)
    assert any("convergence delta is how far they miss" in c.value and "f(baseline) = " in c.value for c in at.caption)
    verdicts = [b.value for b in [*at.success, *at.warning] if "attributions" in b.value or "log p" in b.value]
    assert len(verdicts) == 2, verdicts  # one computed verdict on whether they add up: the word, and against the
    # runner-up (… and not which word?)
    more = [b for b in at.button if b.key == "explain_ig_more"]
    if more:  # too far off: one click integrates again with more steps
        more[0].click().run(timeout=TIMEOUT)
        ok(at)
        assert at.select_slider(key="explain_ig_steps").value == 64
        assert any("(64 steps)" in c.value for c in at.caption)
    else:
        at.select_slider(key="explain_ig_steps").set_value(64).run(timeout=TIMEOUT)
        ok(at)
        assert any("(64 steps)" in c.value for c in at.caption)
    assert len(at.dataframe[0].value) == 4  # 2 cross layers x 2 heads, each with its rank correlation


def test_patching_by_picking_a_word() -> None:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["text"] = "The cat sleeps on the warm chair."
    at.query_params["explain_tab"] = "Patching"
    at.switch_page("views/explain.py").run(timeout=TIMEOUT)
    ok(at)
    assert any(c.value.startswith("Pick the word to replace and type its replacement") for c in at.caption)
    assert not any("Type the corrupted sentence" in c.value for c in at.caption)  # nothing to type in this mode
    at.selectbox(key="explain_word").set_value(1)  # "cat"
    at.text_input(key="explain_replacement").set_value("car").run(timeout=TIMEOUT)
    ok(at)
    assert any("The car sleeps on the warm chair." in c.value for c in at.caption)
    assert len(at.get("plotly_chart")) == 3


def test_with_beam_search_on_the_page_explains_the_greedy_translation() -> None:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["beam"] = "4"  # a beam the Steps page offers
    at.switch_page("views/explain.py").run(timeout=TIMEOUT)
    ok(at)
    assert any("explains the greedy translation" in c.value for c in at.caption)
    assert any("beam" not in c.value and "as trained" in c.value for c in at.caption)  # the header's options note
    assert len(at.get("plotly_chart")) == 3


def test_the_logit_lens_tab_draws_core_s_lens_and_says_where_the_pieces_settle(root: Path) -> None:
    import core
    from core.analysis.lens import logit_lens
    from viz_app import claims_explain

    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update({"page": "explain", "explain_tab": "Logit lens"})
    at.run(timeout=TIMEOUT)
    ok(at)
    text = at.text_input(key="text").value
    found = logit_lens(core.load(root / "tiny"), text)
    spec = next(s for s in specs(at) if s["layout"]["title"]["text"].startswith("Logit lens"))
    np.testing.assert_allclose(array(spec["data"][0]["z"]), np.round(found.chosen_prob, 4))
    assert array(spec["data"][0]["z"]).shape == (found.n_layers, len(found.chosen))
    assert claims_explain.lens_note(found.chosen, found.first_top, found.n_layers) in [m.value for m in at.markdown]
    assert at.query_params["explain_tab"] == "Logit lens"


def test_the_value_zeroing_tab_draws_core_s_matrices_and_their_agreement(root: Path) -> None:
    import core
    from core.analysis.contributions import contributions
    from core.analysis.value_zeroing import rank_agreement, value_zeroing
    from viz_app import claims_explain

    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update({"page": "explain", "explain_tab": "Value zeroing"})
    at.run(timeout=TIMEOUT)
    ok(at)
    bundle = core.load(root / "tiny")
    text = at.text_input(key="text").value
    found = value_zeroing(bundle, text)
    spec = next(s for s in specs(at) if s["layout"]["title"]["text"].startswith("Value zeroing, whole model"))
    np.testing.assert_allclose(array(spec["data"][0]["z"]), found.source, atol=1e-4)
    alti = contributions(bundle, text)
    rho = float(np.nanmean(rank_agreement(found.source, alti.source_matrix)))
    shown = [m.value for m in at.markdown]
    assert claims_explain.zeroing_alti_note(rho) in shown
    at.radio(key="zeroing_kind").set_value("cross").run(timeout=TIMEOUT)
    at.selectbox(key="zeroing_layer").set_value(1).run(timeout=TIMEOUT)
    spec = next(s for s in specs(ok(at)) if s["layout"]["title"]["text"].startswith("Value zeroing: cross"))
    np.testing.assert_allclose(array(spec["data"][0]["z"]), found.layers["cross"][1], atol=1e-4)
    per_layer = [float(np.nanmean(row)) for row in found.attention_agreement("cross")]
    assert claims_explain.zeroing_attention_note("cross-attention", per_layer) in [m.value for m in at.markdown]


def test_why_this_word_and_not_that_one(root: Path) -> None:
    import core
    from core.analysis.attribution import attribute
    from core.sites import ids_site, output_site
    from viz_app import claims_explain

    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update({"page": "explain", "explain_tab": "Attribution"})
    ok(at.run(timeout=TIMEOUT))
    at.select_slider(key="explain_attr_position").set_value(1).run(timeout=TIMEOUT)
    ok(at)
    bundle = core.load(root / "tiny")
    out = bundle.translate(at.text_input(key="text").value)
    chosen, offered = out.output_tokens[1], [piece for piece, _ in out.steps[1].top_k if piece != out.output_tokens[1]]
    picker = at.selectbox(key="explain_contrast")
    assert picker.value == offered[0] and len(picker.options) == len(offered) + 1  # the model's own, then "typed"
    picker.set_value(offered[2]).run(timeout=TIMEOUT)
    ok(at)
    src, ids = [int(i) for i in out.trace[ids_site("src")]], [int(i) for i in out.trace[output_site("ids")]]
    other = int(out.trace[output_site("top_ids")][1][[p for p, _ in out.steps[1].top_k].index(offered[2])])
    for kind in ("logit_diff", "prob_diff"):
        at.radio(key="explain_contrast_kind").set_value(kind).run(timeout=TIMEOUT)
        ok(at)
        a = attribute(bundle, src, ids, 1, contrast=other, contrast_kind=kind)
        prefix = out.tgt_tokens[: len(a.target_ig)]
        assert claims_explain.contrast_note(a, chosen, offered[2], out.src_tokens, prefix) in [
            m.value for m in at.markdown
        ]
        assert claims_explain.contrast_sum_line(a, chosen, offered[2]) in [c.value for c in at.caption]
    contrast = [s for s in specs(at) if "rather than" in s["layout"]["title"]["text"]]
    assert len(contrast) == 1 and [d["name"] for d in contrast[0]["data"]] == [
        "integrated gradients",
        "gradient × input",
    ]
    at.selectbox(key="explain_contrast").set_value(attribution_tab.TYPED).run(timeout=TIMEOUT)
    at.text_input(key="explain_contrast_typed").set_value("xyzzy quux").run(timeout=TIMEOUT)
    assert not at.exception
    said = [w.value for w in at.warning if w.value.startswith("**Cannot contrast with this alternative.**")]
    assert len(said) == 1 and "must be one piece of the target vocabulary" in said[0], [w.value for w in at.warning]
    assert not any("rather than" in m.value for m in at.markdown)  # no contrast shown
    assert len(specs(at)) == 2  # the plain attribution stays


def replayed(saved, tab: str) -> AppTest:
    """The page on ``tab`` while ``saved`` (a Translation whose trace holds analyses) is replayed: no model run."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state["_replay"] = saved
    at.query_params.update({"page": "explain", "explain_tab": tab})
    return ok(at.run(timeout=TIMEOUT))


@pytest.mark.parametrize("tab, title", [("Logit lens", "Logit lens"), ("Value zeroing", "Value zeroing, whole model")])
def test_a_saved_trace_replays_its_analysis_without_the_model(root: Path, tab: str, title: str) -> None:
    import core
    from core.analysis.lens import logit_lens
    from core.analysis.value_zeroing import value_zeroing

    bundle = core.load(root / "tiny")
    out = bundle.translate("the cat sleeps")
    if tab == "Logit lens":
        lens = logit_lens(bundle, "the cat sleeps")
        found, shown, atol = lens, np.round(lens.chosen_prob, 4), 1e-6
    else:
        found = value_zeroing(bundle, "the cat sleeps")
        shown, atol = found.source, 1e-4
    saved = core.Translation(core.Trace.load(out.trace.with_analysis(*found.to_arrays()).to_json().encode()))
    at = replayed(saved, tab)
    spec = next(s for s in specs(at) if s["layout"]["title"]["text"].startswith(title))
    np.testing.assert_allclose(array(spec["data"][0]["z"]), shown, atol=atol)
    assert not any("close the saved trace" in i.value for i in at.info)


def test_a_saved_trace_replays_its_contrastive_attribution(root: Path) -> None:
    import core
    from core.analysis.attribution import attribute
    from viz_app import claims_explain

    bundle = core.load(root / "tiny")
    out = bundle.translate("the cat sleeps")
    src_ids, out_ids = list(out.trace["ids.src"]), list(out.output_ids)
    other = next(int(i) for i in out.trace["output.top_ids"][0] if int(i) != out_ids[0])
    plain, contrast = attribute(bundle, src_ids, out_ids, 0), attribute(bundle, src_ids, out_ids, 0, contrast=other)
    (a1, d1), (a2, d2) = plain.to_arrays(), contrast.to_arrays()
    saved = core.Translation(core.Trace.load(out.trace.with_analysis({**a1, **a2}, {**d1, **d2}).to_json().encode()))
    at = replayed(saved, "Attribution")
    back = core.analysis.attribution.Attribution.from_trace(saved.trace, 0, contrast=True)
    prefix = saved.tgt_tokens[: len(back.target_ig)]
    note = claims_explain.contrast_note(
        back, saved.output_tokens[0], saved.trace.piece(other), saved.src_tokens, prefix
    )
    assert note in [m.value for m in at.markdown]


def test_the_pages_own_export_replays_its_lens_and_value_zeroing(root: Path) -> None:
    """What the page remembers for its export (``analysis_store``) after the two tabs ran, saved as the export's
    JSON and opened again: both tabs draw from it without the model."""
    import core

    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update({"page": "explain", "explain_tab": "Logit lens"})
    ok(at.run(timeout=TIMEOUT))
    at.session_state["explain_tab"] = "Value zeroing"  # the other tab opened
    ok(at.run(timeout=TIMEOUT))
    store = at.session_state["_analysis"]
    text = at.text_input(key="text").value
    out = core.load(root / "tiny").translate(text)
    exported = out.trace.with_analysis(store["arrays"], store["meta"]).to_json()
    for tab, title in (("Logit lens", "Logit lens"), ("Value zeroing", "Value zeroing, whole model")):
        again = replayed(core.Translation(core.Trace.load(exported.encode())), tab)
        assert any(t.startswith(title) for t in chart_titles(again)), (tab, chart_titles(again))
        assert not any("close the saved trace" in i.value for i in again.info)
