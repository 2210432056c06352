"""The built-in corpora (core.analysis.corpus_sets): the held-out Ding test with references where the model's
languages are Ding's, its English alone for another target, the built-in sentences always; each read by the scan as
an uploaded file is."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.analysis.corpus_sets import builtin_sets, tsv
from core.analysis.scan_input import parse_pairs
from core.analysis.sentences import builtin_sentences
from core.training.corpus import Pair as DingPair
from core.training.corpus import Split, write_split

TEST = [DingPair("The cat sleeps.", "Die Katze schläft.", "sentence"), DingPair("A\ttab.", "Ein Tab.", "sentence")]


@pytest.fixture
def split_dir(tmp_path: Path) -> Path:
    write_split(Split(train=TEST[:1], dev=TEST[:1], test=TEST), tmp_path / "split")
    return tmp_path / "split"


def test_an_english_german_model_gets_the_held_out_test_with_references(split_dir: Path) -> None:
    ding, builtin = builtin_sets("en", "de", split_dir)
    assert ding.key == "ding-test" and "German references" in ding.title and ding.lines == 2
    pairs = parse_pairs(ding.data)
    assert [(p.source, p.translation, p.reference, p.error) for p in pairs] == [
        ("The cat sleeps.", None, "Die Katze schläft.", None),
        ("A tab.", None, "Ein Tab.", None),  # a tab inside a sentence is a space, not a new column
    ]
    backwards = parse_pairs(builtin_sets("de", "en", split_dir)[0].data)
    assert backwards[0].source == "Die Katze schläft." and backwards[0].reference == "The cat sleeps."
    assert builtin.key == "builtin" and parse_pairs(builtin.data)[0].source == builtin_sentences("en")[0][0]


def test_another_target_gets_the_sources_alone_and_another_source_only_the_built_in_sentences(split_dir: Path) -> None:
    ding, _ = builtin_sets("en", "pt", split_dir)
    assert "no references" in ding.title
    assert all(p.reference is None and p.translation is None for p in parse_pairs(ding.data))
    only = builtin_sets("pt", "en", split_dir)
    assert [s.key for s in only] == ["builtin"]
    sentences = builtin_sentences("pt")[0]
    assert [p.source for p in parse_pairs(only[0].data)] == sentences and f"({len(sentences)}," in only[0].title


def test_without_the_split_or_with_a_language_it_has_no_sentences_in(tmp_path: Path) -> None:
    (builtin,) = builtin_sets("en", "de", tmp_path / "missing")
    assert builtin.key == "builtin"
    (other,) = builtin_sets("fi", "en", tmp_path)
    assert "in English: none are written in fi" in other.title
    assert tsv(["a\nb"], ["c"]) == b"a b\t\tc\n" and tsv(["a"]) == b"a\n"
