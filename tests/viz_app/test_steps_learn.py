"""The Step-by-step page's beam-search tree and "what if", and the Learn page's walk from x to W_O: the pure
builders of viz_app/figures/decoding.py and learn.py, then both pages driven with AppTest on tiny checkpoints
(self-attention, SSRU, pre-norm), then one click on the tree in a real browser."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from apptest_helpers import chart_titles as titles
from apptest_helpers import ok, specs, texts
from conftest import build_tiny_checkpoint, plotly_array
from streamlit.testing.v1 import AppTest

import core
from core.decoding.search import BeamStep
from core.results import BeamTree
from viz_app.figures import decoding, learn, style
from viz_app.widgets.markup import marked_words, md

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "viz_app" / "app.py"
TIMEOUT = 90
SENTENCE = "Is there any tea left?"
OPTS = core.InferenceOptions()


# ----------------------------------------------------------------------------- pure builders
# (that viz_app/figures/decoding.py and learn.py never import Streamlit: test_figures.py checks every figure module)
def _step(step, tokens, scores, ids, parents, logp, n_kept, eos=2) -> BeamStep:
    tokens, scores = np.asarray(tokens, dtype=np.int64).reshape(len(scores), step), np.asarray(scores, np.float32)
    ids, parents, logp = np.asarray(ids), np.asarray(parents), np.asarray(logp, np.float32)
    finished = np.zeros(len(ids), dtype=bool)
    finished[:n_kept] = ids[:n_kept] == eos
    cross = np.zeros((len(scores), 1, 2, 3))
    return BeamStep(step, tokens, scores, ids, parents, logp, scores[parents] + logp, n_kept, finished, cross)


@pytest.fixture
def small_tree() -> BeamTree:
    """Two beams, three steps: greedy takes 'a' first, the winner 'b a </s>'; one hypothesis finishes early."""
    steps = (
        _step(0, [], [0.0], [10, 11, 12, 13], [0, 0, 0, 0], [-0.5, -0.7, -2.0, -3.0], 2),
        _step(1, [[10], [11]], [-0.5, -0.7], [2, 10, 11, 12], [0, 1, 0, 1], [-0.2, -0.3, -1.5, -1.6], 2),
        _step(2, [[11, 10]], [-1.0], [2, 11, 12], [0, 0, 0], [-0.1, -2.0, -2.5], 2),
    )
    vocab = {2: "</s>", 10: "▁b", 11: "▁a", 12: "<x>", 13: "▁c"}
    return BeamTree(steps, (11, 10, 2), (10, 2), ("▁src", "</s>"), vocab, 2, 1.0, OPTS, 2)


def test_beam_tree_figure_marks_kept_pruned_winner_and_divergence(small_tree: BeamTree) -> None:
    assert small_tree.winner_path == (1, 1, 0)
    assert small_tree.divergence == 0
    fig = decoding.beam_tree(small_tree, title="Beam search tree — beam 2", selected=(1, 2))
    by_name = {t.name: t for t in fig.data}
    assert set(by_name) >= {"pruned", "kept", "finished (ends with &lt;/s&gt;)", "winner", "selected"}
    assert list(by_name["winner"].x) == [1, 2, 3] and list(by_name["winner"].y) == [2, 2, 1]  # 1-based
    pruned = by_name["pruned"]
    assert len(pruned.x) == 2 + 2 + 1 and set(pruned.text) == {""}  # pruned dots carry no label
    assert [list(c) for c in pruned.customdata][:2] == [[0, 2], [0, 3]]  # [step, candidate], 0-based for clicks
    finished = by_name["finished (ends with &lt;/s&gt;)"]
    assert list(zip(finished.x, finished.y, strict=True)) == [(2, 1), (3, 1)]
    assert "&lt;x&gt;" in "".join(pruned.hovertext)  # pieces are escaped for Plotly's HTML-like labels
    assert list(by_name["selected"].x) == [2] and list(by_name["selected"].y) == [3]
    assert fig.layout.yaxis.range[0] > fig.layout.yaxis.range[1]  # rank 1 on top
    band = [s for s in fig.layout.shapes if s.name == "divergence"]
    assert len(band) == 1 and band[0].x0 == 0.5 and band[0].x1 == 1.5
    assert "␣b" in fig.layout.annotations[0].text
    assert all(t.unselected.marker.opacity == 1.0 for t in fig.data if t.customdata is not None)
    assert isinstance(fig, go.Figure) and fig.layout.title.text == "Beam search tree — beam 2"


def test_beam_tree_text_helpers(small_tree: BeamTree) -> None:
    assert decoding.hypothesis_text(small_tree, [11, 10, 2]) == "a b </s>"
    assert decoding.hypothesis_text(small_tree, []) == "∅"
    assert [decoding.node_status(small_tree, 1, j) for j in range(4)] == ["finished", "kept", "pruned", "pruned"]
    assert "step 1" in decoding.beam_summary(small_tree) and "‘␣b’" in decoding.beam_summary(small_tree)
    agree = BeamTree(small_tree.steps, (11, 10, 2), (11, 10, 2), (), small_tree.vocab, 2, 1.0, OPTS, 2)
    assert "agree" in decoding.beam_summary(agree) and agree.divergence is None
    fig = decoding.beam_tree(agree, title="t")
    assert not [s for s in fig.layout.shapes if s.name == "divergence"]


def test_changed_words_are_marked_on_both_sides() -> None:
    from viz_app.widgets.markup import marked_words

    before, after = marked_words("O gato dorme na cadeira.", "O cão dorme na cadeira quente.")
    assert after == "O :green-background[cão] dorme na :green-background[cadeira] :green-background[quente.]"
    assert before == "O :red-background[gato] dorme na :red-background[cadeira.]"
    assert marked_words("same text", "same text") == ("same text", "same text")
    assert marked_words("", "")[1] == "∅ (the model produced no words)"


def test_percent_never_rounds_a_small_probability_to_zero() -> None:
    assert style.share(0.536) == "53.6%"
    assert style.share(3.2e-5) == "0.0032%"
    assert style.share(0.0) == "0%"


def test_excerpt_layer_norm_and_differences() -> None:
    m = np.arange(300.0).reshape(20, 15)
    part, note = learn.excerpt(m, 8, 8)
    assert part.shape == (8, 8) and note == "its first 8 of 20 rows and 8 of 15 columns"
    assert learn.excerpt(m[:3, :4])[1] == ""
    x = np.random.default_rng(0).normal(size=(5, 16))
    w, b = np.linspace(0.5, 1.5, 16), np.linspace(-1, 1, 16)
    expected = torch.layer_norm(torch.tensor(x), (16,), torch.tensor(w), torch.tensor(b), 1e-5).numpy()
    np.testing.assert_allclose(learn.layer_norm(x, w, b, 1e-5), expected, atol=1e-12)
    assert learn.max_difference(np.ones(3), np.array([1.0, 1.5, 0.75])) == 0.5
    assert learn.max_difference(np.zeros(0), np.zeros(0)) == 0.0


# ----------------------------------------------------------------------------- the pages, in AppTest
@pytest.fixture(scope="module")
def app_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("steps_learn_checkpoints")
    build_tiny_checkpoint(root / "tiny", seed=3)
    build_tiny_checkpoint(root / "tiny-pre", seed=1, norm="pre")
    build_tiny_checkpoint(root / "tiny-ssru", seed=0, decoder_self="ssru", pe_layout="concatenated", start="zeros")
    return root


@pytest.fixture(autouse=True)
def _env(app_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(app_root))
    monkeypatch.setenv("LAB_CHECKPOINT", "tiny")
    torch.set_num_threads(1)


def run(query: dict[str, str]) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update(query)
    return at.run(timeout=TIMEOUT)


def test_what_if_forces_a_candidate_and_walks_the_alternative(app_root: Path) -> None:
    at = ok(run({"page": "steps", "step": "2"}))
    bundle = core.load(app_root / "tiny", device="cpu")
    free = bundle.translate(SENTENCE)
    own = free.trace["output.ids"].tolist()
    picker = at.selectbox(key="whatif_pick")
    assert picker.value is None and "its own choice" in picker.placeholder
    assert picker.label == "What if the model had picked another piece at step 2?"
    candidates = [int(i) for i in free.trace["output.top_ids"][1] if int(i) != own[1]]
    assert len(picker.options) == len(candidates) == 9
    picker.select_index(1).run(timeout=TIMEOUT)
    ok(at)
    prefix = (own[0], candidates[1])
    assert at.session_state["whatif"] == prefix and at.query_params["whatif"] == f"{own[0]}.{candidates[1]}"
    alt = bundle.translate_from(SENTENCE, list(prefix))
    marked = marked_words(free.text, alt.text)[1]  # the alternative, its changed words highlighted
    shown = texts(at)
    assert f"**The model's translation:** {md(free.text)}" in shown
    assert "**What if step 2 were" in shown and marked in shown
    assert "→ next piece, **forced**" in shown and "of the alternative" in shown
    assert at.select_slider(key="step").value == 1 and "(forced)" in at.select_slider(key="step").options[1]
    assert len(at.select_slider(key="step").options) == len(alt.steps)
    assert "Top 10 at step 2 — as trained, what if" in titles(at)
    at.button(key="next").click().run(timeout=TIMEOUT)  # the slider walks the alternative's own attention maps
    ok(at)
    assert "**Step 3 of" in texts(at) and "To branch again" in texts(at)
    assert any(t.startswith("Cross-attention at step 3") and t.endswith("what if") for t in titles(at))
    at.button(key="whatif_back").click().run(timeout=TIMEOUT)
    ok(at)
    assert at.session_state["whatif"] == () and "whatif" not in at.query_params
    assert f"#### {md(free.text)}" in texts(at)


@pytest.mark.parametrize("whatif", ["abc", "", "-3", "1.2.3.4.5.6.7.8.9.10.11.12", "999999"])
def test_a_bad_or_stale_what_if_link_falls_back_to_the_models_own_translation(whatif: str) -> None:
    at = ok(run({"page": "steps", "whatif": whatif}))
    assert at.session_state["whatif"] == () and "**Step 1 of" in texts(at)
    assert "What if step" not in texts(at)
    said = "\n".join(w.value for w in at.warning if "Parts of this link could not be used" in w.value)
    why = "could not be read" if whatif in ("abc", "") else "is not a branch of this translation"
    assert f"`whatif={whatif}` {why}" in said  # named, not dropped without a word


@pytest.mark.parametrize("checkpoint", ["tiny", "tiny-ssru"])
def test_beam_tree_pickers_show_a_hypothesis_and_its_cross_attention(app_root: Path, checkpoint: str) -> None:
    at = ok(run({"page": "steps", "ckpt": checkpoint, "beam": "2"}))
    tree = core.load(app_root / checkpoint, device="cpu").beam_tree(SENTENCE, beam_size=2)
    n = len(tree.steps)
    assert f"Beam search tree: 2 beams, {n} steps — beam 2" in titles(at)
    spec = next(s for s in specs(at) if s["layout"]["title"]["text"].startswith("Beam search tree"))
    winner = next(t for t in spec["data"] if t.get("name") == "winner")
    assert len(winner["x"]) == len(tree.output_ids)
    assert at.selectbox(key="tree_step").options[:2] == ["Step 1", "Step 2"]
    assert at.selectbox(key="tree_node").value == tree.winner_path[0]  # starts on the winner's hypothesis
    at.selectbox(key="tree_step").set_value(2).run(timeout=TIMEOUT)
    at.selectbox(key="tree_node").set_value(3).run(timeout=TIMEOUT)  # a pruned one
    ok(at)
    step = tree.steps[2]
    words = decoding.hypothesis_text(tree, step.path(3))
    assert f"Hypothesis “{md(words)}”: score" in texts(at)
    assert f"= **{float(step.candidate_scores[3]):.3f}**" in texts(at)
    assert "· pruned" in at.selectbox(key="tree_node").options[3]
    cross = next(s for s in specs(at) if "scoring the piece after" in s["layout"]["title"]["text"])
    parent = int(step.candidate_parents[3])
    n_src = len(tree.src_tokens)
    expected = step.cross_attention[parent].reshape(-1, n_src)  # (layers × heads, source tokens)
    np.testing.assert_allclose(plotly_array(cross["data"][0]["z"]), expected, atol=1e-4)
    assert md(decoding.beam_summary(tree)) in texts(at)


def test_greedy_decoding_shows_no_tree_and_changing_the_beam_leaves_what_if() -> None:
    at = ok(run({"page": "steps"}))
    assert not [t for t in titles(at) if t.startswith("Beam search tree")]
    at.selectbox(key="whatif_pick").select_index(0).run(timeout=TIMEOUT)
    assert ok(at).session_state["whatif"] != ()
    at.radio(key="decoding").set_value(2).run(timeout=TIMEOUT)
    ok(at)
    assert at.session_state["whatif"] == () and any(t.startswith("Beam search tree") for t in titles(at))


def _badges(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown if "-badge[" in m.value]


@pytest.mark.parametrize("checkpoint", ["tiny", "tiny-pre", "tiny-ssru"])
def test_learn_page_checks_every_step_against_the_model(checkpoint: str) -> None:
    at = ok(run({"page": "learn", "ckpt": checkpoint}))
    for kind in at.radio(key="kind").options:
        at.radio(key="kind").set_value(kind).run(timeout=TIMEOUT)
        for layer in (0, 1):
            at.selectbox(key="layer").set_value(layer)
            at.selectbox(key="head").set_value(1)
            at.select_slider(key="query").set_value(1).run(timeout=TIMEOUT)
            ok(at)
            badges = _badges(at)
            shown = texts(at)
            assert badges and all(b.startswith(":green-badge[✓ equal]") for b in badges), (kind, layer, badges)
            assert "##### 1 · The input vector x of" in shown and "##### 6 · All 2 heads joined" in shown
            assert "x · W_Q + b equals the query" in "\n".join(badges)
            assert ("embedding + PE equals" in "\n".join(badges)) == (layer == 0 and not kind.startswith("cross"))
            assert "recorded at query 2" in "\n".join(badges)
            assert ("pre-norm" in shown) == (checkpoint == "tiny-pre")
            if kind.startswith("cross") and checkpoint == "tiny-ssru":
                assert "SSRU sub-layer" in shown
    assert "recomputed softmax equals" in at.success[0].value
    assert at.dataframe[3].value.columns[2] == "mask M"


def test_learn_page_with_switches_on_still_matches_the_model() -> None:
    at = ok(run({"page": "learn", "causal": "0", "pe": "0", "ablate": "cross.1.2", "kind": "cross", "head": "2"}))
    badges = _badges(at)
    assert badges and all(b.startswith(":green-badge[") for b in badges), badges
    assert "This head is switched off" in texts(at)
    at.radio(key="kind").set_value("decoder masked self-attention").run(timeout=TIMEOUT)
    assert all(b.startswith(":green-badge[") for b in _badges(ok(at)))


def test_learn_page_on_a_beam_translation() -> None:
    at = ok(run({"page": "learn", "beam": "4", "kind": "decoder", "query": "3"}))
    assert _badges(at) and all(b.startswith(":green-badge[") for b in _badges(at))
    assert any("query 3 — beam 4" in t for t in titles(at))  # 1-based query in the figure title


def test_the_shortlist_switch_appears_for_a_model_that_ships_one(tmp_path: Path, monkeypatch) -> None:
    """A checkpoint with a lexical shortlist gets the sidebar switch; the Steps page says what was scored and the
    translation is the one core makes with the shortlist; a checkpoint without one ignores a shortlist link."""
    import shutil

    from marian_folders import write_marian_shortlist

    from core.decoding.shortlist import FILE_NAME, Shortlist

    root = tmp_path / "root"
    folder = build_tiny_checkpoint(root / "listed", seed=3)
    V = core.load(folder, device="cpu").config.tgt_vocab_size
    lex = write_marian_shortlist(tmp_path / "lex.bin", 4, 3, [[(5 * w + j) % V for j in range(3)] for w in range(V)])
    Shortlist.from_marian(lex, V, shared=True).save(folder / FILE_NAME)
    shutil.copytree(app_root_plain := root / "listed", root / "plain", ignore=shutil.ignore_patterns(FILE_NAME))
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(root))
    monkeypatch.setenv("LAB_CHECKPOINT", "listed")
    at = ok(run({"page": "steps", "shortlist": "1", "text": SENTENCE}))
    assert at.session_state["shortlist"] is True
    assert "Shortlist only (as the production engine)" in [t.label for t in at.sidebar.toggle]
    made = core.load(app_root_plain, device="cpu").translate(SENTENCE, core.InferenceOptions(shortlist=True))
    rows = made.trace.meta["shortlist_rows"]
    assert any(c.value.startswith(f"Shortlist only: each step scored {rows} of the model's {V:,}") for c in at.caption)
    shown = texts(at)
    assert f"#### {md(made.text)}" in shown and "**As trained:**" in shown  # and what the switch changed
    why = ok(run({"page": "explain", "shortlist": "1", "text": SENTENCE}))  # the analyses say what they score
    note = "The shortlist switch is on: these analyses still score every word"
    assert any(c.value.startswith(note) for c in why.caption)
    monkeypatch.setenv("LAB_CHECKPOINT", "plain")
    at = ok(run({"page": "steps", "shortlist": "1", "text": SENTENCE}))
    assert at.session_state["shortlist"] is False
    assert "Shortlist only (as the production engine)" not in [t.label for t in at.sidebar.toggle]
    assert not any("Shortlist only" in c.value for c in at.caption)
