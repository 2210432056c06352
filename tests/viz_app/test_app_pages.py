"""Every page of the Streamlit app, driven headlessly with streamlit.testing.v1.AppTest.

A session-scoped root holds two tiny random checkpoints (a self-attention decoder and an SSRU
decoder); the app finds them through $LAB_CHECKPOINT_ROOT. Figures are checked through the
Plotly spec each chart element carries (titles, shapes), everything else through the widgets.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_helpers import chart_titles, ok, specs, texts
from conftest import build_tiny_checkpoint
from conftest import plotly_array as array
from streamlit.testing.v1 import AppTest

import core
from viz_app.widgets.markup import md
from viz_app.widgets.sidebar import NUMBERING

APP = Path(__file__).resolve().parents[2] / "viz_app" / "app.py"
TIMEOUT = 90
SENTENCE = "Is there any tea left?"
LONGER = "The cat sleeps on the warm chair and the dog sleeps on the floor."


@pytest.fixture(scope="session")
def app_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("app_checkpoints")
    build_tiny_checkpoint(root / "tiny", seed=3)
    build_tiny_checkpoint(root / "tiny-ssru", seed=0, decoder_self="ssru", pe_layout="concatenated", start="zeros")
    (root / "not-a-checkpoint").mkdir()
    return root


@pytest.fixture(autouse=True)
def _env(app_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(app_root))
    monkeypatch.setenv("LAB_CHECKPOINT", "tiny")
    torch.set_num_threads(1)


def run(query: dict[str, str] | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update(query or {})
    return at.run(timeout=TIMEOUT)


def titles(at: AppTest) -> list[str]:
    """Titles of the page's own figures (not the before/after chart every page shows with switches on)."""
    found = chart_titles(at)
    return [t for t in found if not t.startswith("Log-probability of each as-trained output piece")]


def expected(app_root: Path, text: str = SENTENCE, **options) -> core.Translation:
    return core.load(app_root / "tiny").translate(text, options=core.InferenceOptions(**options), truncate=True)


# ----------------------------------------------------------------------------- 1 · translate & overview
def test_overview_shows_translation_tokens_grids_and_exports(app_root: Path) -> None:
    at = ok(run())
    out = expected(app_root)
    assert at.text_input(key="text").value == SENTENCE  # the first example of the source language
    assert f"#### {md(out.text)}" in texts(at)
    assert "`␣Is`" in texts(at) and "`</s>`" in texts(at)
    names = titles(at)
    assert names[0] == "Encoder self-attention: every layer × head — as trained"  # only the open tab is drawn
    assert any(t.startswith("Cross-attention · layer 1 · head 1") for t in names)
    grid = specs(at)[0]
    assert [t["name"] for t in grid["data"]] == ["L1", "L2"] and all(t["type"] == "heatmap" for t in grid["data"])
    for kind in ("Decoder masked self-attention", "Cross-attention"):
        at.session_state["overview_tab"] = kind
        assert titles(ok(at.run(timeout=TIMEOUT)))[0] == f"{kind}: every layer × head — as trained"
    assert [b.label for b in at.get("download_button")] == ["⬇ Trace as JSON", "⬇ Trace as NPZ"]
    assert "Options in effect: **as trained**" in [m.value for m in at.sidebar.markdown]
    # the one numbering, said in the sidebar and, word for word, in docs/app.md
    assert NUMBERING in [c.value for c in at.sidebar.caption]
    assert NUMBERING in (Path(__file__).resolve().parents[2] / "docs" / "app.md").read_text().replace("\n> ", " ")


def test_overview_example_picker_and_enter(app_root: Path) -> None:
    at = run()
    at.selectbox(key="example").set_value("The cat sleeps on the warm chair.").run(timeout=TIMEOUT)
    ok(at)
    assert at.text_input(key="text").value == "The cat sleeps on the warm chair."
    at.text_input(key="text").input(LONGER).run(timeout=TIMEOUT)
    ok(at)
    assert f"#### {md(expected(app_root, LONGER).text)}" in texts(at)
    assert at.query_params["text"] == LONGER


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("   \t  ", "empty"),
        ("\x00\x01\x02", "empty"),
        ("x" * 5001, "only the first 5,000 were read"),
        ("😀 🎉 👍", "unknown to this model"),
        ("日本語のテキスト", "unknown to this model"),
        ("word " * 300, "Truncated"),
    ],
)
def test_bad_input_gives_a_message_not_a_traceback(text: str, message: str) -> None:
    at = run()
    at.text_input(key="text").input(text).run(timeout=TIMEOUT)
    assert not at.exception, [e.message for e in at.exception]
    assert message in "\n".join(w.value for w in at.warning)


def test_markdown_and_html_in_the_text_stay_literal(app_root: Path) -> None:
    text = "Price: $5 *now* <b>bold</b> [link](x) # 1"
    at = run()
    at.text_input(key="text").input(text).run(timeout=TIMEOUT)
    ok(at)
    assert f"#### {md(expected(app_root, text).text) or '∅ (the model produced no words)'}" in texts(at)
    assert "`␣\\*now\\*`" not in texts(at)  # pieces are shown as code, not re-escaped
    assert md("*a* $b$ <i>") == "\\*a\\* \\$b\\$ \\<i\\>"


def test_toggles_change_the_options_shown_and_the_link() -> None:
    at = run()
    at.toggle(key="pe").set_value(False).run(timeout=TIMEOUT)
    ok(at)
    assert "Options in effect: **PE off**" in [m.value for m in at.sidebar.markdown]
    assert all(t.endswith("— PE off") for t in titles(at))
    assert at.query_params["pe"] == "0"
    at.session_state["overview_tab"] = "Cross-attention"
    at.multiselect(key="ablate").set_value(["cross L1 H2"]).run(timeout=TIMEOUT)
    ok(at)
    assert "Options in effect: **PE off, 1 head ablated**" in [m.value for m in at.sidebar.markdown]
    assert at.button(key="reset").disabled is False
    cross = next(s for s in specs(at) if s["layout"]["title"]["text"].startswith("Cross-attention: every"))
    assert [a["name"] for a in cross["layout"]["annotations"] if a["text"] == "off"] == ["off L1 H2"]
    assert at.query_params["ablate"] == "cross.1.2"
    at.button(key="reset").click().run(timeout=TIMEOUT)
    ok(at)
    assert "Options in effect: **as trained**" in [m.value for m in at.sidebar.markdown]
    assert "pe" not in at.query_params and "ablate" not in at.query_params


def test_query_params_restore_the_view() -> None:
    at = ok(
        run(
            {
                "page": "head",
                "text": LONGER,
                "pe": "0",
                "causal": "0",
                "kind": "encoder",
                "layer": "2",
                "head": "2",
                "values": "scores",
            }
        )
    )
    assert at.title[0].value == "Head detail"
    assert at.text_input(key="text").value == LONGER
    assert (at.session_state["layer"], at.session_state["head"], at.session_state["kind"]) == (1, 1, "encoder")
    assert titles(at) == [
        "Encoder self-attention · layer 2 · head 2 · scaled scores QKᵀ/√d_k (grey = masked, −∞)"
        " — PE off, causal mask off"
    ]
    assert at.query_params["page"] == "head" and at.query_params["layer"] == "2"


def test_bad_query_params_fall_back_to_defaults() -> None:
    at = ok(
        run(
            {
                "layer": "zero",
                "head": "-4",
                "beam": "many",
                "pe": "maybe",
                "ablate": "bogus",
                "ckpt": "../etc",
                "kind": "nonsense",
                "shortlist": "perhaps",
            }
        )
    )
    assert at.session_state["layer"] == 0 and at.session_state["pe"] is True
    assert at.session_state["shortlist"] is False  # and this model has none to switch on
    assert at.selectbox(key="ckpt").value == "tiny"
    said = link_warning(at)
    for part in ("`layer=zero`", "`head=-4`", "`beam=many`", "`pe=maybe`", "`ablate=bogus`", "`shortlist=perhaps`"):
        assert part in said  # each unreadable value is named...
    assert "`kind=nonsense` could not be read (choices: encoder, decoder, cross)" in said  # ...with its choices
    assert "../etc" not in said  # the checkpoint has its own notice, which repeats no path
    at.text_input(key="text").set_value(LONGER).run(timeout=TIMEOUT)
    assert not link_warning(ok(at))  # said once: the next action no longer reads the link


def link_warning(at: AppTest) -> str:
    return "\n".join(w.value for w in at.warning if "Parts of this link could not be used" in w.value)


def test_a_link_beyond_this_model_says_which_values_it_could_not_use() -> None:
    at = ok(run({"page": "head", "layer": "9", "head": "2", "ablate": "cross.7.1,encoder.1.2", "beam": "20"}))
    said = link_warning(at)
    assert "`layer=9` is not available here (choices: 1–2)" in said  # the tiny model has two layers
    assert "`ablate=cross.7.1,encoder.1.2` names heads this model does not have (cross L7 H1)" in said
    assert "`beam=20` could not be read" in said and "`head=" not in said  # head 2 exists: used, not named
    assert at.session_state["head"] == 1 and at.session_state["ablate"] == ["encoder L1 H2"]
    assert [t.value for t in at.title] == ["Head detail"] and len([w for w in at.warning if "link" in w.value]) == 1


def test_a_link_beam_the_steps_page_does_not_offer_or_an_unknown_page_is_named() -> None:
    """?beam=3 ran every page with beam 3 until Steps reset it to 1 without a word; ?page=bogus and a
    ?heads_stat= the heads page does not know fell back silently."""
    at = ok(run({"beam": "3", "page": "bogus", "heads_stat": "median"}))
    said = link_warning(at)
    assert "`beam=3` could not be read (choices: 1, 2, 4, 8)" in said and at.session_state["beam"] == 1
    assert "`page=bogus` is not a page of the lab" in said and "`heads_stat=median` could not be read" in said


def test_a_link_whose_checkpoint_cannot_load_is_not_read_again_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sidebar stopped the first run before the link was said; the user's next action (another checkpoint)
    then showed the link's problems, clamps of that change included."""
    root = tmp_path / "root"
    build_tiny_checkpoint(root / "tiny", seed=3)
    build_tiny_checkpoint(root / "broken", seed=3)
    (root / "broken" / "model.safetensors").write_bytes(b"not weights")
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(root))
    at = run({"ckpt": "broken", "layer": "5", "beam": "5", "page": "head"})
    assert "`beam=5` could not be read" in link_warning(at)  # said on the link's own run
    at.selectbox(key="ckpt").set_value("tiny").run(timeout=TIMEOUT)
    assert not link_warning(ok(at)) and at.session_state["layer"] == 0  # clamped by the change, silently


def test_a_link_value_for_another_page_or_beyond_the_text_is_named_too() -> None:
    """Values with fixed choices are checked whichever page the link opens (the overview reads no pe_side while
    PE is on, no explain_fusion, no agg); a sentence number beyond a one-sentence text is named (was silent)."""
    at = ok(run({"pe_side": "sideways", "explain_fusion": "median", "agg": "sum", "sentence": "3", "kind": "self"}))
    said = link_warning(at)
    assert "`pe_side=sideways` could not be read (choices: both, encoder, decoder)" in said
    assert "`explain_fusion=median` could not be read (choices: mean, max, min)" in said
    assert "`agg=sum` could not be read (choices: single head, mean, max)" in said
    assert "`kind=self` could not be read (choices: encoder, decoder, cross)" in said
    assert "`sentence=3` is not available here (choices: 1)" in said
    assert at.session_state["pe_side"] == "both" and at.session_state["sentence"] == 0


def test_a_good_link_says_nothing_about_itself() -> None:
    at = ok(run({"page": "head", "layer": "2", "head": "1", "pe": "0", "text": SENTENCE}))
    assert not link_warning(at) and at.session_state["layer"] == 1


def test_checkpoint_picker_lists_only_checkpoint_folders() -> None:
    at = ok(run())
    assert at.selectbox(key="ckpt").options == ["tiny", "tiny-ssru"]
    assert any("Running on **CPU**" in c.value for c in at.sidebar.caption)


def test_ssru_decoder_shows_gates_instead_of_self_attention() -> None:
    at = run()
    at.selectbox(key="ckpt").set_value("tiny-ssru").run(timeout=TIMEOUT)
    ok(at)
    at.session_state["overview_tab"] = "Decoder (SSRU, no self-attention)"
    ok(at.run(timeout=TIMEOUT))
    assert "This model's decoder has **no self-attention**" in texts(at)
    assert any(t.startswith("SSRU forget gates · decoder layer 1") for t in titles(at))
    assert at.radio(key="kind").options == ["encoder self-attention", "cross-attention"]


def test_default_checkpoint_env_then_default_file_then_first(app_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from viz_app.session import checkpoints

    names = checkpoints.checkpoint_names()
    assert names == ["tiny", "tiny-ssru"]
    monkeypatch.setenv("LAB_CHECKPOINT", "tiny-ssru")
    assert checkpoints.default_checkpoint() == "tiny-ssru"
    monkeypatch.setenv("LAB_CHECKPOINT", str(app_root / "tiny-ssru"))  # a path works too
    assert checkpoints.default_checkpoint() == "tiny-ssru"
    monkeypatch.delenv("LAB_CHECKPOINT")
    assert checkpoints.default_checkpoint() == "tiny"  # no DEFAULT file: the first folder
    other = app_root.parent / "with_default_file"
    for name in ("a", "b"):
        (other / name).mkdir(parents=True, exist_ok=True)
        (other / name / "config.json").write_text("{}")
    (other / "DEFAULT").write_text("b\n")
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(other))
    assert checkpoints.default_checkpoint() == "b"
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", "checkpoints")
    monkeypatch.chdir(other)  # no ./checkpoints here: a relative root falls back to the repo's
    assert (
        checkpoints.checkpoint_root() == checkpoints.REPO / "checkpoints"
        or not (checkpoints.REPO / "checkpoints").is_dir()
    )
    (other / "checkpoints").mkdir()
    assert checkpoints.checkpoint_root() == Path("checkpoints")  # ... unless the cwd has one


def test_no_checkpoint_explains_how_to_get_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(tmp_path))
    at = run()
    assert not at.exception
    assert "make run" in at.info[0].value and "make train" in at.info[0].value


def test_a_broken_checkpoint_is_reported_not_raised(
    app_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((app_root / "tiny" / "config.json").read_text())  # weights missing
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(tmp_path))
    monkeypatch.setenv("LAB_CHECKPOINT", "broken")
    at = run()
    assert not at.exception
    assert any("The checkpoint cannot be loaded" in e.value for e in at.error)


# ----------------------------------------------------------------------------- 2 · head detail
def test_head_detail_pickers_aggregation_and_scores() -> None:
    at = run()
    at.switch_page("views/head_detail.py").run(timeout=TIMEOUT)
    ok(at)
    assert titles(at) == ["Cross-attention · layer 1 · head 1 · weights — as trained"]
    at.radio(key="kind").set_value("decoder masked self-attention")
    at.selectbox(key="layer").set_value(1)
    at.radio(key="agg").set_value("mean")
    at.run(timeout=TIMEOUT)
    ok(at)
    assert titles(at) == ["Decoder masked self-attention · layer 2 · mean over 2 heads · weights — as trained"]
    at.radio(key="values").set_value("scores").run(timeout=TIMEOUT)
    spec = specs(ok(at))[0]
    assert "scaled scores" in spec["layout"]["title"]["text"]
    z = array(spec["data"][0]["z"])
    assert np.isnan(z[0, 1]) and np.isfinite(z[1, 0])  # causal: the future is −∞ (a gap)
    at.radio(key="values").set_value("weights").run(timeout=TIMEOUT)
    heat = specs(ok(at))[0]["data"][0]
    assert (heat["zmin"], heat["zmax"]) == (0.0, 1.0)  # the lab's default: a fixed 0–1 scale
    at.checkbox(key="fixed").uncheck().run(timeout=TIMEOUT)
    heat = specs(ok(at))[0]["data"][0]
    z = np.asarray(array(heat["z"]), dtype=float)
    assert heat["zmax"] == pytest.approx(np.nanmax(z)) and "stretched" in heat["colorbar"]["title"]["text"]
    assert at.query_params["fixed"] == "0"  # the link keeps it


# ----------------------------------------------------------------------------- 3 · masks
def test_masks_page_with_a_padded_batch_and_live_toggles(app_root: Path) -> None:
    at = run()
    at.switch_page("views/masks.py").run(timeout=TIMEOUT)
    ok(at)
    assert "has no `<pad>` tokens" in texts(at)
    at.text_input(key="text2").input(LONGER).run(timeout=TIMEOUT)
    at.radio(key="mask_kind").set_value("cross").run(timeout=TIMEOUT)
    ok(at)
    batch_texts = [one.text for one in core.load(app_root / "tiny").translate_batch([SENTENCE, LONGER])]
    assert f"**Translation 2:** {md(batch_texts[1])}" in texts(at)
    panels = specs(at)[0]
    assert panels["layout"]["title"]["text"] == "Masks of the cross-attention — as trained, batch of 2 (greedy)"
    padding = array(panels["data"][0]["z"])
    assert padding[0, -1] == 0 and padding[0, 0] == 1  # sentence 1 is the shorter one: its tail is <pad>
    stages = specs(at)[1]
    assert any(t.get("name") == "−∞ (masked)" for t in stages["data"])
    assert " · query 1 “" in chart_titles(at)[1]  # the query's position, counted from 1, beside its piece

    at.toggle(key="masks_padding").set_value(False).run(timeout=TIMEOUT)
    ok(at)
    assert at.session_state["padding"] is False and at.toggle(key="padding").value is False
    assert "padding mask off" in [m.value for m in at.sidebar.markdown][-1]
    applied = array(specs(at)[0]["data"][2]["z"])
    assert applied.all()  # nothing blocked any more

    at.radio(key="mask_kind").set_value("decoder")
    at.toggle(key="masks_causal").set_value(False).run(timeout=TIMEOUT)
    ok(at)
    assert array(specs(at)[0]["data"][2]["z"]).all()
    assert at.query_params["causal"] == "0"


# ----------------------------------------------------------------------------- 4 · positional encoding
def test_positional_page_table_run_and_comparison() -> None:
    at = run()
    at.switch_page("views/positional.py").run(timeout=TIMEOUT)
    ok(at)
    names = titles(at)
    assert "Positional-encoding table: 64 positions × 16 dimensions" in names
    at.session_state["pe_tab"] = "Added in this run"
    names = titles(ok(at.run(timeout=TIMEOUT)))
    assert names == [
        "PE values added to the source tokens — as trained",
        "PE values added to the decoder input tokens — as trained",
    ]
    at.session_state["pe_tab"] = "Switch it off"
    at.run(timeout=TIMEOUT)
    at.toggle(key="compare").set_value(True).run(timeout=TIMEOUT)
    ok(at)
    assert "**As trained (with PE):**" in texts(at) and "**Without PE:**" in texts(at)
    diff = next(s for s in specs(at) if s["layout"]["title"]["text"].startswith("Difference (without PE − as trained)"))
    axis = diff["layout"]["coloraxis"]
    assert axis["cmin"] == pytest.approx(-axis["cmax"])
    kind = next(k for k in ("encoder", "decoder", "cross") if f"pe_cmp_show_{k}" in at.session_state)
    at.radio(key=f"pe_cmp_show_{kind}").set_value("without").run(timeout=TIMEOUT)
    assert "Without PE — PE off" in titles(ok(at))  # one grid at a time, at full width


def test_pe_off_on_the_encoder_only_compares_the_as_trained_run_with_it(app_root: Path) -> None:
    """?pe=0&pe_side=encoder: "with PE" was the encoder-PE-off run and the encoder difference grid was blank."""
    at = run({"pe": "0", "pe_side": "encoder", "text": SENTENCE})
    at.switch_page("views/positional.py")
    at.session_state["pe_tab"] = "Switch it off"
    at.run(timeout=TIMEOUT)
    at.toggle(key="compare").set_value(True).run(timeout=TIMEOUT)
    shown = texts(ok(at))
    trained, switched = expected(app_root), expected(app_root, encoder_pe=False)
    assert f"**As trained (with PE):** {md(trained.text) or '∅'}" in shown
    assert f"**Without PE on the encoder:** {md(switched.text) or '∅'}" in shown
    table = at.dataframe[0].value
    assert set(table.columns) == {"sentence", "as trained (with PE)", "without PE on the encoder"}
    at.session_state["pe_cmp_tab"] = "Encoder self-attention"
    at.run(timeout=TIMEOUT)
    diff = next(s for s in specs(ok(at)) if s["layout"]["title"]["text"].startswith("Difference (without PE on"))
    cells = np.concatenate([array(t["z"]).ravel() for t in diff["data"] if "z" in t])
    assert np.nanmax(np.abs(cells)) > 1e-3  # encoder PE off changes the encoder's maps
    assert "The weights change by up to" in texts(at)


def test_pe_off_on_the_decoder_only_opens_the_comparison_where_the_maps_change(app_root: Path) -> None:
    """With positions off on the decoder only the encoder's maps cannot change: the comparison opens on the
    decoder's tab (the encoder's last), not on a blank 'No change' grid."""
    at = run({"pe": "0", "pe_side": "decoder", "text": SENTENCE})
    at.switch_page("views/positional.py")
    at.session_state["pe_tab"] = "Switch it off"
    at.run(timeout=TIMEOUT)
    at.toggle(key="compare").set_value(True).run(timeout=TIMEOUT)
    diff = next(s for s in specs(ok(at)) if s["layout"]["title"]["text"].startswith("Difference (without PE on"))
    assert "decoder masked self-attention" in diff["layout"]["title"]["text"]
    assert at.session_state["pe_cmp_tab"] == "Decoder masked self-attention"


# ----------------------------------------------------------------------------- 5 · step by step
def test_steps_page_slider_buttons_and_beam() -> None:
    at = run()
    at.switch_page("views/steps.py").run(timeout=TIMEOUT)
    ok(at)
    assert "**Step 1 of" in texts(at)
    assert "Top 10 candidates at step 1 — as trained" in titles(at)
    one_key = "the only piece written so far is `<s>`"  # why step 1's decoder map is all one colour
    assert one_key in texts(at)
    at.button(key="next").click().run(timeout=TIMEOUT)
    ok(at)
    assert at.session_state["step"] == 1 and "**Step 2 of" in texts(at) and one_key not in texts(at)
    assert any(t.startswith("Decoder self-attention at step 2") for t in titles(at))
    at.select_slider(key="step").set_value(4).run(timeout=TIMEOUT)
    assert "**Step 5 of" in texts(ok(at))
    n = len(at.select_slider(key="step").options)
    at.select_slider(key="step").set_value(n - 2).run(timeout=TIMEOUT)
    at.toggle(key="playing").set_value(True).run(timeout=TIMEOUT)  # plays the last step, then stops by itself
    ok(at)
    assert at.session_state["step"] == n - 1 and at.session_state["playing"] is False
    assert at.query_params["step"] == str(n)  # 1-based in links
    at.radio(key="decoding").set_value(4).run(timeout=TIMEOUT)
    ok(at)
    assert "Beam search kept several" in texts(at)
    assert any(t.endswith("— beam 4") for t in titles(at))


# ----------------------------------------------------------------------------- 6 · learn
def test_learn_page_recomputes_the_recorded_weights() -> None:
    at = run()
    at.switch_page("views/learn.py").run(timeout=TIMEOUT)
    ok(at)
    assert "recomputed softmax equals the weights the model recorded" in at.success[0].value
    at.radio(key="kind").set_value("decoder masked self-attention")
    at.select_slider(key="query").set_value(2).run(timeout=TIMEOUT)
    ok(at)
    assert "recomputed softmax equals" in at.success[0].value
    table = at.dataframe[3].value
    assert list(table["mask M"])[:4] == ["0", "0", "0", "−∞"]  # query 3 may see keys 1..3 (1-based)
    assert any("query 3" in t for t in titles(at))


def _header_of(text: str, pe: bool) -> None:  # runs inside AppTest.from_function (its own module scope)
    import dataclasses
    import os

    import core as c
    from viz_app.widgets import header

    out = c.load(os.path.join(os.environ["LAB_CHECKPOINT_ROOT"], "tiny")).translate(
        "Is there any tea left?", options=c.InferenceOptions(positional_encoding=pe)
    )
    header.translation_header(c.Translation(dataclasses.replace(out.trace, meta={**out.trace.meta, "text": text})))


@pytest.mark.parametrize("text, pe, hint", [("", False, True), ("", True, False), ("Tee", False, False)])
def test_an_empty_translation_under_switches_says_why_and_how_back(text: str, pe: bool, hint: bool) -> None:
    at = ok(AppTest.from_function(_header_of, args=(text, pe), default_timeout=TIMEOUT).run(timeout=TIMEOUT))
    shown = texts(at)
    assert ("∅ (the model produced no words)" in shown) == (text == "")
    assert ("**Reset switches**" in shown) == hint  # only when a switch is off and nothing came out
    if hint:
        assert "With these switches (PE off)" in shown


def test_switches_show_the_as_trained_translation_and_what_changed() -> None:
    plain = ok(run({"text": LONGER}))
    trained_text = plain.markdown[0].value if plain.markdown else ""
    at = ok(run({"text": LONGER, "ablate": "cross.1.1,cross.1.2,cross.2.1,cross.2.2,encoder.1.1"}))
    shown = texts(at)
    assert "**As trained:**" in shown or "As trained the translation is the same" in shown
    bars = [s for s in specs(at) if s["layout"]["title"]["text"].startswith("Log-probability of each as-trained")]
    assert bars and bars[0]["layout"]["title"]["text"].endswith("— 5 heads ablated")
    at.radio(key="overview_show").set_value("difference").run(timeout=TIMEOUT)
    grid = next(s for s in specs(ok(at)) if "every layer × head" in s["layout"]["title"]["text"])
    assert grid["layout"]["title"]["text"].endswith("change made by 5 heads ablated")
    assert grid["layout"]["coloraxis"]["cmid"] == 0.0  # a diverging scale around no change
    assert "overview_show=difference" in "&".join(f"{k}={v}" for k, v in at.query_params.items())
    assert trained_text  # the plain run drew its header


def test_positional_encoding_can_be_removed_on_one_side() -> None:
    at = ok(run({"text": SENTENCE, "pe": "0"}))
    at.radio(key="pe_side").set_value("decoder").run(timeout=TIMEOUT)
    ok(at)
    assert "Options in effect: **decoder PE off**" in [m.value for m in at.sidebar.markdown]
    assert any(t.endswith("— decoder PE off") for t in titles(at))
    at.button(key="reset").click().run(timeout=TIMEOUT)
    assert "Options in effect: **as trained**" in [m.value for m in ok(at).sidebar.markdown]
    assert at.session_state["pe"] is True and at.session_state["beam"] == 1


def test_the_large_head_labels_rows_input_to_predicted() -> None:
    at = ok(run({"text": SENTENCE, "kind": "cross"}))
    spec = next(s for s in specs(at) if s["layout"]["title"]["text"].startswith("Cross-attention · layer 1 · head 1"))
    rows = spec["layout"]["yaxis"]["ticktext"]
    assert rows[0].startswith("&lt;s&gt; → ") and all(" → " in r for r in rows)


def test_the_sidebar_shows_the_quality_line_and_the_card(app_root: Path) -> None:
    at = ok(run({"text": SENTENCE}))
    captions = [c.value for c in at.sidebar.caption]
    assert any(c.startswith("Quality: Random weights, for tests only.") for c in captions), captions
    assert any("tiny test checkpoint" in m.value for m in at.sidebar.markdown)  # the card, in its popover


def test_exports_are_named_after_the_checkpoint_and_the_sentence() -> None:
    from viz_app.session import checkpoints

    out = core.load(Path(os.environ["LAB_CHECKPOINT_ROOT"]) / "tiny").translate("Is there any tea left?")
    assert checkpoints.export_stem(out) == "tiny-test_is-there-any-tea-left"


def test_the_head_grid_switches_whole_layers_and_keeps_only_the_checked() -> None:
    at = ok(run({"text": SENTENCE, "ablate": "encoder.1.1"}))
    at.button(key="invert_encoder").click().run(timeout=TIMEOUT)
    assert sorted(ok(at).session_state["ablate"]) == ["encoder L1 H2", "encoder L2 H1", "encoder L2 H2"]
    assert "Options in effect: **3 heads ablated**" in [m.value for m in at.sidebar.markdown]
    at.button(key="clear_encoder").click().run(timeout=TIMEOUT)
    assert ok(at).session_state["ablate"] == []


def _edit_matrix() -> None:  # runs inside AppTest.from_function: the grid's change callback, as an edit fires it
    import streamlit as st

    from viz_app.widgets import ablation

    st.session_state.setdefault("ablate", ["cross L1 H1"])
    st.session_state["m"] = {"edited_rows": {1: {"whole layer": True}, 0: {"H2": True}}, "added_rows": []}
    ablation._matrix_edited("decoder", "m", 2)
    st.write(", ".join(sorted(st.session_state["ablate"])))


def test_a_grid_edit_sets_heads_and_whole_layers_of_its_kind_only() -> None:
    at = ok(AppTest.from_function(_edit_matrix, default_timeout=TIMEOUT).run())
    assert at.markdown[0].value == "cross L1 H1, decoder L1 H2, decoder L2 H1, decoder L2 H2"


def test_causal_mask_off_shows_the_rows_each_step_computed() -> None:
    at = ok(run({"text": SENTENCE, "causal": "0", "overview_tab": "Decoder masked self-attention"}))
    assert at.radio(key="causal_rows_decoder").value == "generation"
    shown = texts(at)
    assert "the later words did not exist yet" in shown
    # under the token-by-token chart: how many pieces the leak made less or more likely, and why
    assert "With the causal mask off every position of this pass can also read the pieces after it" in shown
    grid = next(s for s in specs(at) if s["layout"]["title"]["text"].startswith("Decoder masked self-attention: every"))
    z = array(grid["data"][0]["z"])
    assert np.isnan(z[0, 1])  # step 1 could not see the second piece: it was not written yet
    at.radio(key="causal_rows_decoder").set_value("recompute").run(timeout=TIMEOUT)
    grid = next(
        s for s in specs(ok(at)) if s["layout"]["title"]["text"].startswith("Decoder masked self-attention: every")
    )
    z = array(grid["data"][0]["z"])
    assert not np.isnan(z[0, 1])  # recomputed: the first row sees the later pieces


def test_a_text_of_several_sentences_is_translated_one_sentence_at_a_time(app_root: Path) -> None:
    text = "The cat sleeps on the warm chair. Where is the station? Is there any tea left?"
    at = ok(run({"text": text}))
    assert any("This text has 3 sentences" in i.value for i in at.info)
    bundle = core.load(app_root / "tiny", device="cpu")
    first, second = (bundle.translate(s).text for s in ("The cat sleeps on the warm chair.", "Where is the station?"))
    assert at.selectbox(key="sentence").value == 0
    assert at.markdown[0].value == f"#### {md(first) or '∅ (the model produced no words)'}"  # the first sentence's
    whole = next(c.value for c in at.caption if c.value.startswith("Whole text, sentence by sentence:"))
    assert (md(first) or "∅") in whole and (md(second) or "∅") in whole
    at.selectbox(key="sentence").set_value(1).run(timeout=TIMEOUT)
    ok(at)
    assert at.markdown[0].value == f"#### {md(second) or '∅ (the model produced no words)'}"
    assert at.session_state["text"] == text  # nothing typed is lost
    assert at.query_params["sentence"] == ["2"] or at.query_params["sentence"] == "2"


def test_the_pe_page_shows_this_models_formula_and_the_word_order_pairs(app_root: Path, monkeypatch) -> None:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.switch_page("views/positional.py")
    at.query_params.update({"text": SENTENCE})
    at.session_state["pe_tab"] = "Switch it off"
    at.run(timeout=TIMEOUT)
    ok(at)
    assert any("The paper's layout" in c.value for c in at.caption)  # the tiny model interleaves
    table = at.dataframe[0].value
    assert list(table["sentence"])[:2] == ["The dog bit the man.", "The man bit the dog."]
    bundle = core.load(app_root / "tiny", device="cpu")
    off = core.InferenceOptions(positional_encoding=False)
    assert list(table["without PE"])[0] == (bundle.translate("The dog bit the man.", options=off).text or "∅")
    assert list(table["as trained (with PE)"])[0] == (bundle.translate("The dog bit the man.").text or "∅")
    told = texts(at)  # the encoder's outputs for each pair, computed live: one set without positions
    assert "“The dog bit the man.” and “The man bit the dog.”" in told and "the same set of vectors" in told
    monkeypatch.setenv("LAB_CHECKPOINT", "tiny-ssru")  # concatenated sinusoids: the formula says so
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.switch_page("views/positional.py")
    at.run(timeout=TIMEOUT)
    assert any("first half of the dimensions" in c.value for c in ok(at).caption)


def test_the_masks_page_opens_on_the_decoder_and_names_truncation_and_padding() -> None:
    at = run({"text": SENTENCE, "kind": "cross"})  # cross picked elsewhere: the masks page still opens on the decoder
    at.switch_page("views/masks.py").run(timeout=TIMEOUT)
    assert ok(at).radio(key="mask_kind").value == "decoder"
    long = " ".join(["the warm chair and the cat"] * 60)  # far beyond the longest source the model takes
    at.text_input(key="text2").set_value(long).run(timeout=TIMEOUT)
    shown = texts(ok(at))
    assert "Sentence 2: Truncated" in shown
    at.radio(key="mask_kind").set_value("encoder").run(timeout=TIMEOUT)
    at.radio(key="mask_item").set_value(1).run(timeout=TIMEOUT)
    assert "Sentence 2 is the longest of the batch" in texts(ok(at))
    titles_now = [a["text"] for s in specs(at) for a in s["layout"].get("annotations", []) if a.get("text")]
    assert {"padding", "causal (not used)", "applied"} <= set(titles_now)


def test_a_second_sentence_beyond_the_character_limit_or_with_nothing_in_it() -> None:
    """Over 5,000 characters the batch was refused ('... (in Python, truncate=True ...)') while the notice below
    said it had been cut; an invisible one was refused twice, as 'Cannot translate this text'."""
    at = run({"text": SENTENCE})
    at.switch_page("views/masks.py").run(timeout=TIMEOUT)
    at.text_input(key="text2").set_value("The dog runs. " * 500).run(timeout=TIMEOUT)
    assert not ok(at).warning or all("Sentence 2: " in w.value for w in at.warning), [w.value for w in at.warning]
    assert "Sentence 2: Truncated: the text was 6,999 characters long" in texts(at) and at.radio(key="mask_item")
    at.text_input(key="text2").set_value("\u200b\x01").run(timeout=TIMEOUT)
    said = [w.value for w in ok(at).warning]
    assert len(said) == 1 and said[0].startswith("**Cannot make a batch with the second sentence.** The text is empty")
