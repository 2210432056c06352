"""The "Source or prefix?" tab of "Why this word?" and the Steps page's share line (AppTest), and the tab's pure
figure builders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_helpers import chart_titles, ok, texts
from conftest import build_tiny_checkpoint
from conftest import plotly_array as array
from streamlit.testing.v1 import AppTest

import core
from core.analysis.contributions import contributions
from core.analysis.value_norms import value_norms
from viz_app.figures import sources

APP = Path(__file__).resolve().parents[2] / "viz_app" / "app.py"
TIMEOUT = 120
TEXT = "The cat sleeps on the warm chair."
TAB = "Source or prefix?"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sources_checkpoints")
    build_tiny_checkpoint(root / "tiny", seed=3)
    return root


@pytest.fixture(autouse=True)
def _env(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from viz_app.session import runs

    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(root))
    monkeypatch.setenv("LAB_CHECKPOINT", "tiny")
    monkeypatch.setattr(runs, "BUILTIN_SHARE_SENTENCES", 3)  # the comparison set, kept small for the test
    torch.set_num_threads(1)


def _open(page: str = "explain") -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update({"page": page, "text": TEXT, "explain_tab": TAB})
    return ok(at.run(timeout=TIMEOUT))


def _specs(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def test_the_tab_shows_each_words_share_computed_from_the_run(root: Path) -> None:
    at = _open()
    titles = chart_titles(at)
    assert titles[0].startswith("Source share of each word of the model's translation") and len(titles) == 2
    bars = _specs(at)[0]["data"][0]
    expected = contributions(core.load(root / "tiny", device="cpu"), TEXT)
    np.testing.assert_allclose(array(bars["y"]), expected.token_source_share, atol=1e-4)
    said = texts(at)
    assert "This translation takes" in said and "of this model's translations of 3 built-in sentences" in said
    assert "take less of" in said or "takes less of" in said or "No output word takes less" in said
    assert "Rank agreement with ALTI+'s source map" in said
    assert "This share is ALTI+ over the translation:" in said and "attention rollout:" in said
    maps = _specs(at)[1]["data"]
    assert len(maps) == 3  # ALTI+, cross-attention, rollout
    for heat in maps:  # every panel: rows scaled to 1
        np.testing.assert_allclose(array(heat["z"]).sum(-1), 1.0, atol=1e-3)
    np.testing.assert_allclose(array(maps[0]["z"]), sources.row_shares(expected.source_matrix), atol=1e-4)


def test_a_typed_translation_is_scored_teacher_forced_against_the_models_own(root: Path) -> None:
    at = _open()
    at.text_input(key="explain_src_typed").set_value("Le chien mange une pomme.").run(timeout=TIMEOUT)
    ok(at)
    assert chart_titles(at)[0].startswith("Source share of each word of your translation (teacher-forced)")
    bundle = core.load(root / "tiny", device="cpu")
    typed = contributions(bundle, TEXT, translation="Le chien mange une pomme.")
    np.testing.assert_allclose(array(_specs(at)[0]["data"][0]["y"]), typed.token_source_share, atol=1e-4)
    said = texts(at)
    own = contributions(bundle, TEXT).source_share
    assert f"the translation you typed takes {typed.source_share:.1%}" in said and f"model's own {own:.1%}" in said
    assert "integrated gradients" not in said.lower()  # only for the model's own translation


def test_integrated_gradients_join_the_agreement_on_request() -> None:
    at = _open()
    assert "|IG|" not in texts(at)
    at.button(key="explain_src_ig").click().run(timeout=TIMEOUT)
    ok(at)
    assert "integrated gradients |IG| (word 1" in texts(at)


def test_integrated_gradients_the_attribution_tab_computed_are_used_without_a_click() -> None:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update({"page": "explain", "text": TEXT, "explain_tab": "Attribution"})
    ok(at.run(timeout=TIMEOUT))
    at.select_slider(key="explain_attr_position").set_value(2).run(timeout=TIMEOUT)  # word 3, default steps
    at = _open()
    at.select_slider(key="explain_src_ig_word").set_value(2).run(timeout=TIMEOUT)
    ok(at)
    assert "integrated gradients |IG| (word 3" in texts(at)


def test_value_weighted_norms_are_the_second_view_on_request(root: Path) -> None:
    at = _open()
    assert len(chart_titles(at)) == 2  # not computed until asked for
    at.toggle(key="explain_src_norms").set_value(True).run(timeout=TIMEOUT)
    ok(at)
    assert chart_titles(at)[2].startswith("Attention weights and value-weighted norms")
    panels = _specs(at)[2]["data"]
    vn = value_norms(core.load(root / "tiny", device="cpu"), TEXT)
    np.testing.assert_allclose(array(panels[1]["z"]), sources.row_shares(vn.combined[("cross", 1)]), atol=1e-4)
    assert "value-weighted norms L2" in texts(at)


def test_contributions_exported_with_the_trace_replay_without_the_model(root: Path, tmp_path: Path) -> None:
    bundle = core.load(root / "tiny", device="cpu")
    out = bundle.translate(TEXT)
    c = contributions(bundle, TEXT)
    bare = out.trace.save(tmp_path / "bare.npz")
    path = out.trace.with_analysis(*c.to_arrays()).save(tmp_path / "t.npz")
    for saved in (bare, path):
        at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
        at.query_params.update({"page": "explain", "explain_tab": TAB})
        at.session_state["_replay"] = core.Translation(core.Trace.load(saved))
        ok(at.run(timeout=TIMEOUT))
        if saved == bare:
            assert "This runs the model again" in texts(at) and not at.get("plotly_chart")
    assert "Replayed from the saved trace" in texts(at) and len(chart_titles(at)) == 2
    np.testing.assert_allclose(array(_specs(at)[0]["data"][0]["y"]), c.token_source_share, atol=1e-4)


def test_the_steps_page_shows_each_steps_source_share(root: Path) -> None:
    at = _open("steps")
    c = contributions(core.load(root / "tiny", device="cpu"), TEXT)
    line = next(x.value for x in at.caption if x.value.startswith("Source share at this step (ALTI+)"))
    assert f"{c.token_source_share[0]:.1%} of the decoder's representation" in line


def test_source_share_bars_mark_the_words_below_the_threshold() -> None:
    fig = sources.source_share_bars(["▁a", "▁b", "."], np.array([0.9, 0.4, 0.7]), 0.5, title="t")
    bar = fig.data[0]
    assert list(bar.marker.color) == [sources.SOURCE_COLOUR, sources.LOW_COLOUR, sources.SOURCE_COLOUR]
    assert fig.layout.shapes[0].y0 == 0.5 and "below the threshold" in bar.text[1]
    (label,) = [a for a in fig.layout.annotations if a.text.startswith("threshold")]
    assert (label.xref, label.x, label.xanchor) == ("paper", 1.0, "left")  # in the margin: over no bar
    unknown = sources.source_share_bars(["▁a"], np.array([0.1]), None, title="t")
    assert not unknown.layout.shapes and list(unknown.data[0].marker.color) == [sources.SOURCE_COLOUR]


def test_source_maps_share_one_scale_and_scale_rows() -> None:
    maps = {"a": np.array([[0.2, 0.2], [0.0, 0.0]]), "b": np.array([[1.0, 3.0], [2.0, 2.0]])}
    fig = sources.source_maps(maps, ["x", "y"], ["s", "t"], title="t")
    assert [h.coloraxis for h in fig.data] == ["coloraxis", "coloraxis"]
    np.testing.assert_allclose(fig.data[0].z, [[0.5, 0.5], [0.0, 0.0]])  # a row of zeros stays 0
    np.testing.assert_allclose(fig.data[1].z, [[0.25, 0.75], [0.5, 0.5]])
    assert [a.text for a in fig.layout.annotations] == ["a", "b"]


def test_a_what_if_branch_shows_the_alternatives_share(root: Path) -> None:
    bundle = core.load(root / "tiny", device="cpu")
    free = bundle.translate(TEXT)
    own = [int(i) for i in free.trace["output.ids"]]
    other = next(int(i) for i in free.trace["output.top_ids"][1] if int(i) != own[1])
    alt = bundle.translate_from(TEXT, [own[0], other])
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update({"page": "steps", "text": TEXT, "step": "2", "whatif": f"{own[0]}.{other}"})
    ok(at.run(timeout=TIMEOUT))
    line = next(x.value for x in at.caption if x.value.startswith("Source share at this step (ALTI+)"))
    scored = contributions(bundle, TEXT, translation=alt.text).token_source_share[1]  # the alternative, forced
    assert f"{scored:.1%} of the decoder's representation" in line
    assert f"{contributions(bundle, TEXT).token_source_share[1]:.1%} of" not in line
