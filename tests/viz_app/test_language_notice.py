"""The page says when the text does not look like the model's source language (core.text.language): never on a
sentence the app itself offers, for any checkpoint; once, naming both languages, on a German sentence typed into
an English model."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from apptest_helpers import ok
from conftest import build_tiny_checkpoint
from streamlit.testing.v1 import AppTest

import core
from core.analysis.sentences import builtin_sentences
from core.analysis.survey import gold_pairs
from core.storage.checkpoint import read_config
from core.text.language import check_language
from core.training.recipes import PROBE_SENTENCES
from viz_app.session.selection import EXAMPLES

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "viz_app" / "app.py"
COMMITTED = {"distilled-en-pt", "distilled-pt-en", "ding-en-de"}
TIMEOUT = 90


def word_order_pairs() -> dict[str, list[tuple[str, str]]]:
    """WORD_ORDER of the Positional page, read from its source (importing a page runs it)."""
    tree = ast.parse((REPO / "viz_app" / "views" / "positional.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "WORD_ORDER" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("viz_app/views/positional.py has no WORD_ORDER")


def offered(source: str, target: str) -> list[str]:
    """Every sentence the app or core offers in ``source``: examples, word-order pairs, the head-statistics set,
    the training probes (English), the source side of the gold alignments."""
    found = list(EXAMPLES.get(source, [])) + [s for pair in word_order_pairs().get(source, []) for s in pair]
    sentences, used = builtin_sentences(source)
    found += sentences if used == source else []
    found += PROBE_SENTENCES if source == "en" else []
    found += [g.source for g in gold_pairs(source, target) or []]
    return sorted(set(found))


def test_no_sentence_the_app_offers_raises_a_language_warning_for_any_checkpoint() -> None:
    folders = {p.name: p for p in core.list_checkpoints(REPO / "checkpoints")}
    assert COMMITTED <= set(folders), sorted(folders)
    for name, folder in sorted(folders.items()):
        config = read_config(folder)
        source, target = config["source_language"], config["target_language"]
        sentences = offered(source, target)
        checks = [check_language(s, source, target) for s in sentences]
        alarms = [(c.source, s, c.probabilities) for s, c in zip(sentences, checks, strict=True) if c.warns]
        assert not alarms, (name, alarms)
        judged = [c for c in checks if c.verdict == "source language"]
        assert len(sentences) > 250 and len(judged) > 0.9 * len(sentences), (name, len(judged), len(sentences))


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("language_checkpoints")
    build_tiny_checkpoint(folder / "tiny", seed=3)  # English → German
    return folder


def language_warnings(at: AppTest) -> list[str]:
    return [w.value for w in ok(at).warning if "this model translates" in w.value]


def test_a_german_sentence_in_an_english_model_is_named_an_english_one_is_not(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(root))
    monkeypatch.setenv("LAB_CHECKPOINT", "tiny")
    torch.set_num_threads(1)
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run(timeout=TIMEOUT)
    assert language_warnings(at) == []  # the first English example
    at.text_input(key="text").input("Sie wusste nicht, dass der letzte Zug schon abgefahren war.").run(timeout=TIMEOUT)
    said = language_warnings(at)
    assert len(said) == 1 and said[0].startswith("This text looks like German; this model translates English → German")
    at.text_input(key="text").input("She did not know that the last train had already left.").run(timeout=TIMEOUT)
    assert language_warnings(at) == []
