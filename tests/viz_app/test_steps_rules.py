"""The pages say which generation rules of an imported folder shaped the output (issue #33): a tiny BART folder
whose eos is likely (without rules its translation ends at once), imported once as it is and once with min_length 5
and no_repeat_ngram_size 2 in its generation_config.json. The Steps page names the rules, and at each step says
what they did there, in agreement with the run; a replayed trace says the same; the folder without rules says
nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from apptest_helpers import ok, texts
from hf_bart_folders import build_bart_folder
from hf_beam import make_eos_likely
from streamlit.testing.v1 import AppTest

import core
from core.cli import main
from viz_app.claims import quote
from viz_app.figures.style import token_text

pytest.importorskip("transformers", reason="transformers is a test extra: pip install -e '.[test]'")
APP = Path(__file__).resolve().parents[2] / "viz_app" / "app.py"
TIMEOUT = 120
TEXT = "Is there any tea left?"  # the app's first example: what the pages translate
RULES = (
    "Generation rules from the model's folder (applied as transformers' generate applies them): the end of sentence "
    "was not allowed before step 5 (min_length 5); no sequence of 2 pieces is written twice (no_repeat_ngram_size 2)."
)
EOS_BANNED = "The end of sentence was not allowed at this step (min_length 5: allowed from step 5 on)"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    root, work = tmp_path_factory.mktemp("rules"), tmp_path_factory.mktemp("hf")
    folder = build_bart_folder(work / "bart", seed=2)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    make_eos_likely(model, [tok([TEXT], return_tensors="pt")], 2, gap=-1.0, rounds=3)  # eos above the best
    model.save_pretrained(folder, safe_serialization=True)
    assert main(["import-hf", str(folder), "--out", str(root / "plain")]) == 0
    path = folder / "generation_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "min_length": 5, "no_repeat_ngram_size": 2}))
    assert main(["import-hf", str(folder), "--out", str(root / "ruled")]) == 0
    return root


@pytest.fixture(autouse=True)
def _env(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(root))
    monkeypatch.setenv("LAB_CACHE_DIR", str(root / ".cache"))
    torch.set_num_threads(1)


def _page(name: str, page: str, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("LAB_CHECKPOINT", name)
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update({"page": page})
    return ok(at.run(timeout=TIMEOUT))


def _rule_notes(at: AppTest) -> list[str]:
    return [i.value for i in at.info if "allowed at this step" in i.value or "was forced" in i.value]


def _repeats(inputs: list[int]) -> set[int]:
    """The ids that would repeat a bigram of ``inputs`` next (what no_repeat_ngram_size 2 bans), counted here."""
    return {b for a, b in zip(inputs, inputs[1:], strict=False) if a == inputs[-1]} if len(inputs) > 1 else set()


def _walk(at: AppTest, out: core.Translation) -> list[list[str]]:
    """The rule sentences the Steps page shows at each step of ``out`` (the run it shows), checked against it."""
    trace, eos = out.trace, 2
    seen = []
    for step in range(len(out.steps)):
        at.select_slider(key="step").set_value(step)
        ok(at.run(timeout=TIMEOUT))
        assert f"**Step {step + 1} of {len(out.steps)}.**" in texts(at)
        notes = _rule_notes(at)
        banned = _repeats([int(i) for i in trace["ids.tgt"][: step + 1]])
        said = [n for n in notes if "no_repeat_ngram_size 2" in n]
        assert bool(said) is bool(banned), (step, notes)
        for i in banned:  # each banned piece is named, is not written here and has no probability
            assert quote(token_text(trace.piece(i))) in said[0], (step, said)
            assert int(trace["output.ids"][step]) != i
        probs = dict(zip(trace["output.top_ids"][step].tolist(), trace["output.top_probs"][step].tolist(), strict=True))
        assert all(probs.get(i, 0.0) == 0.0 for i in banned)
        assert any(EOS_BANNED in n for n in notes) is (step < 4), (step, notes)
        assert (eos in probs and probs[eos] > 0) is (step >= 4), step  # the run: eos is a candidate from step 5 on
        seen.append(notes)
    return seen


def test_the_steps_page_says_the_rules_and_what_they_did_at_each_step(root: Path, monkeypatch: pytest.MonkeyPatch):
    at = _page("ruled", "steps", monkeypatch)
    assert RULES in texts(at), texts(at)
    out = core.load(root / "ruled", device="cpu").translate(TEXT)
    plain = core.load(root / "plain", device="cpu").translate(TEXT)
    assert len(plain.steps) < 5 <= len(out.steps)  # without the rule the translation ends before step 5
    seen = _walk(at, out)
    assert any("no_repeat_ngram_size 2" in n for notes in seen for n in notes)  # the rule banned a piece somewhere


def test_the_beam_tree_names_the_rules_and_the_steps_where_eos_was_banned(root: Path, monkeypatch):
    at = _page("ruled", "steps", monkeypatch)
    at.radio(key="decoding").set_value(4)
    ok(at.run(timeout=TIMEOUT))
    said = texts(at)
    assert RULES + " They act on every hypothesis." in said, said
    at.select_slider(key="step").set_value(4)  # the steps above the tree: step 5, where eos is allowed
    for step in (0, 3, 4):
        at.selectbox(key="tree_step").set_value(step)
        ok(at.run(timeout=TIMEOUT))
        assert any(EOS_BANNED in i.value for i in at.info) is (step < 4), step


def test_a_replayed_trace_says_the_same(root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    out = core.load(root / "ruled", device="cpu").translate(TEXT)
    live = _walk(_page("ruled", "steps", monkeypatch), out)
    saved = core.Translation(core.Trace.load(out.trace.save(tmp_path / "ruled.npz")))
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(tmp_path / "empty"))  # nothing to load: the trace alone
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state["_replay"] = saved
    at.query_params.update({"page": "steps"})
    ok(at.run(timeout=TIMEOUT))
    assert RULES in texts(at)
    assert _walk(at, saved) == live


def test_a_model_without_rules_shows_none(monkeypatch: pytest.MonkeyPatch):
    for page in ("steps", "overview"):
        at = _page("plain", page, monkeypatch)
        said = texts(at)
        assert "Generation rules" not in said and "not allowed" not in said and not _rule_notes(at), said
    assert "Generation rules from the model's folder" in texts(_page("ruled", "overview", monkeypatch))
