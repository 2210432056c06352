"""Sampling on the Step-by-step page: the pure parts (each step's draw read from the recorded arrays, the figure,
the sentence, one test per branch), then the page in AppTest on a tiny checkpoint: a link with the same seed and
settings shows core's sampled translation in fresh sessions (its draw chart against the draw made again from the
whole distribution), temperature 0 shows the greedy one, bad values are named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from apptest_helpers import chart_titles, ok, specs, texts
from streamlit.testing.v1 import AppTest

import core
from core.decoding.sampling import Sampling, reshaped
from viz_app.claims_sampling import draw_claim, settings
from viz_app.figures import sampling as figure
from viz_app.steps.draws import step_draws, trace_draws
from viz_app.widgets.markup import md

APP = Path(__file__).resolve().parents[2] / "viz_app" / "app.py"
TIMEOUT = 90
SENTENCE = "Is there any tea left?"
PIECES = {10: "▁a", 11: "▁b", 12: "▁c", 13: "▁d", 2: "</s>"}


# ----------------------------------------------------------------------------- pure parts
def test_each_step_draw_reads_the_recorded_draw() -> None:
    top_ids = np.array([[10, 11, 12], [11, 10, 2]])  # (T, k) the model's most probable, as decoding recorded them
    top_probs = np.array([[0.5, 0.3, 0.15], [0.6, 0.2, 0.1]], dtype=np.float32)
    draw = {
        "top_probs": np.array([[0.6, 0.4, 0.0], [0.9, 0.1, 0.0]], dtype=np.float32),
        "top_cut": np.array([[False, False, True], [False, False, True]]),
        "prob": np.array([0.4, 0.0], dtype=np.float32),
        "rank": np.array([2, 5]),
        "kept": np.array([2, 2]),
        "cut": np.array([2, 3]),
    }
    first, second = step_draws(top_ids, top_probs, np.array([11, 13]), np.array([0.3, 0.04]), draw, PIECES.__getitem__)
    assert first.pieces == ("▁a", "▁b", "▁c") and first.piece == "▁b" and first.drawn == 1 and first.rank == 2
    assert first.before == pytest.approx((0.5, 0.3, 0.15)) and first.after == pytest.approx((0.6, 0.4, 0.0))
    assert first.kept == 2 and first.cut == 2 and first.cut_pieces == ("▁c",)
    # the drawn piece below the shown ones comes last, with its own recorded probabilities
    assert second.pieces == ("▁b", "▁a", "</s>", "▁d") and second.drawn == 3 and second.rank == 5
    assert second.before[3] == pytest.approx(0.04) and second.after[3] == 0 and second.cut_pieces == ("</s>",)
    assert (
        len(step_draws(top_ids, top_probs, np.array([11, 13]), np.array([0.3, 0.04]), draw, str, shown=2)[0].pieces)
        == 2
    )


def test_a_trace_that_was_not_sampled_holds_no_draw(tiny_checkpoint: Path) -> None:
    with pytest.raises(ValueError, match="not sampled"):
        trace_draws(core.load(tiny_checkpoint, device="cpu").translate(SENTENCE).trace)


def test_the_draw_figure_has_both_series_and_marks_the_drawn_and_cut_pieces() -> None:
    fig = figure.draw_bars(["▁a", "<x>", "▁c"], [0.5, 0.3, 0.2], [0.7, 0.3, 0.0], 1, ["▁c"], title="The draw")
    assert isinstance(fig, go.Figure) and fig.layout.title.text == "The draw"
    names = [figure.BEFORE_NAME, figure.AFTER_NAME]
    assert [t.name for t in fig.data] == names * 2  # the two series, then their plain legend keys
    before, after = fig.data[:2]
    assert [t.showlegend for t in fig.data] == [False, False, None, None]  # the keys carry no drawn-piece outline
    assert list(before.x) == [0.5, 0.3, 0.2] and list(after.x) == [0.7, 0.3, 0.0]
    assert list(before.y) == ["1. ␣a", "2. &lt;x&gt; ★ drawn", "3. ␣c ✂ cut"]
    assert list(after.marker.line.width) == [0.0, 2.5, 0.0]  # the drawn piece's bars outlined
    assert fig.layout.barmode == "group"


CLAIM = dict(temperature=0.7, top_k=None, top_p=None, piece="gato", before=0.91, after=0.97, rank=1, kept=1200, cut=0)


def test_claim_a_plain_draw_without_a_cut() -> None:
    assert draw_claim(**CLAIM) == (
        "At temperature 0.7 the drawn piece “gato” had p 0.91 before and 0.97 after; it was the model's own top "
        "choice. No top-k or top-p cut: all 1,200 pieces stayed in the draw."
    )


def test_claim_a_cut_that_removed_pieces_and_a_lower_ranked_draw() -> None:
    said = draw_claim(**{**CLAIM, "top_k": 5, "top_p": 0.9, "rank": 2, "before": 0.004, "kept": 3, "cut": 31997})
    assert said == (
        "At temperature 0.7 the drawn piece “gato” had p 0.004 before and 0.97 after; the model ranked it 2. "
        "The cut (top-k 5, top-p 0.9) kept 3 pieces and removed 31,997."
    )


def test_claim_a_cut_that_removed_nothing() -> None:
    said = draw_claim(**{**CLAIM, "top_p": 1.0, "kept": 1})
    assert said.endswith("The cut (top-p 1) removed nothing here: all 1 piece stayed in the draw.")


def test_claim_temperature_zero_and_a_forced_piece() -> None:
    assert draw_claim(**{**CLAIM, "temperature": 0.0, "after": 1.0}) == (
        "At temperature 0 sampling takes the model's top choice, “gato” (p 0.91), as greedy decoding does: nothing "
        "is left to chance."
    )
    assert draw_claim(**{**CLAIM, "after": 0.0}).startswith("“gato” was not drawn: a generation rule")


# ----------------------------------------------------------------------------- the page, in AppTest
@pytest.fixture(autouse=True)
def _env(tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The app lists the one tiny checkpoint (tests/conftest.py) and opens it."""
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(tiny_checkpoint.parent))
    monkeypatch.setenv("LAB_CHECKPOINT", tiny_checkpoint.name)
    torch.set_num_threads(1)


def run(query: dict[str, str]) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update(query)
    return ok(at.run(timeout=TIMEOUT))


def link_warning(at: AppTest) -> str:
    return "\n".join(w.value for w in at.warning if "Parts of this link could not be used" in w.value)


LINK = {"page": "steps", "temperature": "1.5", "top_k": "8", "top_p": "0.95", "seed": "4", "step": "2"}


def test_a_sampling_link_replays_cores_sampled_translation(tiny_checkpoint: Path) -> None:
    bundle = core.load(tiny_checkpoint, device="cpu")
    sampling = Sampling(temperature=1.5, top_k=8, top_p=0.95, seed=4)
    want = bundle.translate(SENTENCE, sampling=sampling)
    assert want.text != bundle.translate(SENTENCE).text  # a random tiny model: the draw is not the greedy output
    for _ in range(2):  # fresh sessions, the same link
        at = run(LINK)
        assert f"#### {md(want.text)}" in texts(at)
        assert at.radio(key="decoding").value == "sample" and at.slider(key="temperature").value == 1.5
        assert at.number_input(key="top_k").value == 8 and at.number_input(key="seed").value == 4
        assert "The draw at step 2 — as trained, temperature 1.5, top-k 8, top-p 0.95, seed 4" in chart_titles(at)
        assert {k: at.query_params[k] for k in ("temperature", "top_k", "top_p", "seed")} == {
            "temperature": "1.5",
            "top_k": "8",
            "top_p": "0.95",
            "seed": "4",
        }
    draw = next(s for s in specs(at) if s["layout"]["title"]["text"].startswith("The draw at step 2"))
    every = core.Record(qkv=False, top_k=bundle.config.tgt_vocab_size)  # step 2's whole distribution, sorted
    probs = bundle.teacher_forced(SENTENCE, target_ids=want.output_ids, record=every).trace["output.top_probs"][1]
    shaped = reshaped(torch.tensor(probs)[None], sampling)[0].numpy()
    np.testing.assert_allclose(draw["data"][0]["x"][:10], probs[:10], rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(draw["data"][1]["x"][:10], shaped[:10], rtol=1e-3, atol=1e-6)
    drawn = want.steps[1]
    label = next(y for y in draw["data"][0]["y"] if y.endswith("★ drawn"))
    assert drawn.token.replace("▁", "␣") in label
    said = "\n".join(c.value for c in at.caption)
    assert f"p {drawn.prob:.2f} before" in said or f"p {drawn.prob:.2g} before" in said


def test_temperature_zero_shows_the_greedy_translation(tiny_checkpoint: Path) -> None:
    greedy = core.load(tiny_checkpoint, device="cpu").translate(SENTENCE)
    at = run({"page": "steps", "temperature": "0", "seed": "9"})
    assert f"#### {md(greedy.text)}" in texts(at)
    assert "At temperature 0 sampling takes the model's top choice" in texts(at)


def test_choosing_sample_and_back_to_greedy() -> None:
    at = run({"page": "steps"})
    assert at.radio(key="decoding").value == 1 and "temperature" not in at.query_params
    at.radio(key="decoding").set_value("sample").run(timeout=TIMEOUT)
    ok(at)
    assert at.session_state["temperature"] == 1.0 and at.query_params["temperature"] == "1"
    assert at.session_state["beam"] == 1 and "Sampled: each piece drawn at temperature 1" in texts(at)
    at.radio(key="decoding").set_value(2).run(timeout=TIMEOUT)
    ok(at)
    assert at.session_state["temperature"] is None and at.query_params["beam"] == "2"
    assert "temperature" not in at.query_params and not [t for t in chart_titles(at) if t.startswith("The draw")]


@pytest.mark.parametrize(
    "name, raw", [("temperature", "hot"), ("temperature", "3"), ("top_k", "0"), ("top_p", "1.5"), ("seed", "-1")]
)
def test_bad_sampling_values_fall_back_and_are_named(name: str, raw: str) -> None:
    at = run({"page": "steps", "temperature": "1", name: raw})
    assert f"`{name}={raw}` could not be read" in link_warning(at)
    default = {"temperature": None, "top_k": None, "top_p": None, "seed": 0}[name]
    assert at.session_state[name] == default


def test_a_beam_in_a_sampling_link_is_named() -> None:
    at = run({"page": "steps", "temperature": "1", "beam": "4"})
    assert "`beam=4` is not used while sampling" in link_warning(at)
    assert at.session_state["beam"] == 1 and at.radio(key="decoding").value == "sample"


def test_the_whole_text_line_is_sampled_as_the_page_is(tiny_checkpoint: Path) -> None:
    """Several sentences while sampling: the whole text's line draws each sentence with the page's settings."""
    bundle = core.load(tiny_checkpoint, device="cpu")
    first, second = SENTENCE, "The cat sleeps on the warm chair."
    sampling = Sampling(temperature=1.5, top_k=8, top_p=0.95, seed=4)
    drawn = [bundle.translate(s, sampling=sampling, truncate=True).text for s in (first, second)]
    greedy = [bundle.translate(s, truncate=True).text for s in (first, second)]
    assert drawn != greedy  # a random tiny model: the draws are not the greedy outputs
    at = run({**LINK, "text": f"{first} {second}"})
    line = next(c.value for c in at.caption if c.value.startswith("Whole text, sentence by sentence"))
    assert line.startswith(
        "Whole text, sentence by sentence, each sampled (temperature 1.5, top-k 8, top-p 0.95, seed 4): "
    )
    assert line.endswith(" ".join(md(t) or "∅" for t in drawn))
    at = run({"page": "steps", "text": f"{first} {second}"})
    line = next(c.value for c in at.caption if c.value.startswith("Whole text, sentence by sentence"))
    assert line == "Whole text, sentence by sentence: " + " ".join(md(t) or "∅" for t in greedy)


def test_the_settings_in_words() -> None:
    assert settings(1.3, None, 0.9, 3) == "temperature 1.3, top-p 0.9, seed 3"
    assert settings(0.7, 5, None, 0) == "temperature 0.7, top-k 5, seed 0"
    assert settings(1.0, None, None, 2) == "temperature 1, seed 2"
