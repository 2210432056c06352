"""Fidelity to the teacher by source length: bucketed held-out inputs, and the scores on known cases."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import core
import core.training.corpus
from core.cli import eval as eval_command  # the `eval` command: what it calls is patched where it looks it up
from core.cli import main
from core.distill.fidelity import (
    BUCKETS,
    bucket_fidelity,
    bucket_of,
    corpus_words,
    fidelity,
    heldout_sentences,
    inputs_by_length,
    is_known,
    source_sentences,
    word_list,
    words,
)
from core.training.corpus import Pair, Split, write_split

SENTENCES = [
    "The cat sleeps.",
    "Where is the station?",
    "My sister bought a red bicycle for her young son last week.",
    "We will visit our grandparents in the mountains next summer if the weather is good.",
    "The children played football in the park after school today.",
    "Please close the window before you leave the house tonight.",
] * 6


def test_buckets_and_words() -> None:
    assert [bucket_of(n) for n in (0, 1, 15, 16, 60, 61, 120, 121)] == [None, 0, 0, 1, 2, 3, 3, None]
    assert words("Olá, mundo! O pão-de-ló custa 3 €.") == ["olá", "mundo", "o", "pão-de-ló", "custa"]


def test_inputs_fall_in_their_buckets(tiny_checkpoint) -> None:
    bundle = core.load(tiny_checkpoint, device="cpu")
    buckets = inputs_by_length(SENTENCES, bundle.tokenizer, per_bucket=4)
    assert [len(b) for b in buckets] == [4, 4, 4, 4]
    for (lo, hi), inputs in zip(BUCKETS, buckets, strict=True):
        for text in inputs:
            assert lo <= len(bundle.tokenizer.encode(text)) <= hi, (lo, hi, text)
    assert buckets == inputs_by_length(SENTENCES, bundle.tokenizer, per_bucket=4)  # deterministic


def test_a_student_identical_to_its_teacher_is_perfectly_faithful(tiny_checkpoint) -> None:
    bundle = core.load(tiny_checkpoint, device="cpu")
    found = inputs_by_length(SENTENCES, bundle.tokenizer, per_bucket=2)
    buckets = [found[0], found[1][:1], [], []]  # the short ones: a random model writes up to its length limit
    rows = fidelity(bundle.model, bundle.model, bundle.tokenizer, buckets)
    assert [r.n for r in rows] == [2, 1, 0, 0]
    assert all(r.short_share == 0 and r.non_words == 0 for r in rows[:2])
    assert all(r.chrf == 100.0 for r in rows[:2] if r.chrf > 0)  # identical outputs
    other = core.load(tiny_checkpoint, device="cpu")
    import torch

    with torch.no_grad():
        for p in other.model.parameters():
            p.mul_(-1.0)  # a different student: its outputs differ from the teacher's
    rows = fidelity(other.model, bundle.model, bundle.tokenizer, buckets)
    assert any(r.chrf < 100 for r in rows[:2]) and rows[0].row().startswith("| 1–15 | 2 |")
    flagged = fidelity(other.model, bundle.model, bundle.tokenizer, buckets, word_list={"x"})
    assert flagged[0].non_words == rows[0].non_words  # a word list only ever removes non-words


DEV = ["Yes.", "No.", "Is there tea?"]
TEST = ["Tea.", "yes", "The cat.", "Good night."]  # "yes" is a dev sentence again (same leak key): not held out


@pytest.fixture
def split_dir(tmp_path: Path) -> Path:
    """A small Ding-style split: a few training pairs, 3 dev and 4 test sentences."""
    pair = lambda en, kind="sentence": Pair(en=en, de="x", kind=kind)  # noqa: E731
    train = [pair("The dog runs."), pair("A cup of coffee", "phrase")]
    write_split(Split(train=train, dev=[pair(t) for t in DEV], test=[pair(t) for t in TEST]), tmp_path / "split")
    return tmp_path / "split"


def test_held_out_test_sentences_leave_dev_out(split_dir: Path) -> None:
    assert heldout_sentences(split_dir) == ["Tea.", "The cat.", "Good night."]  # the default: test only
    assert heldout_sentences(split_dir, "test") == ["Tea.", "The cat.", "Good night."]
    assert heldout_sentences(split_dir, "all") == DEV + ["Tea.", "The cat.", "Good night."]
    with pytest.raises(core.InputError, match="dev"):
        heldout_sentences(split_dir, "dev")


def _by_length_counts(capsys, checkpoint: Path, *extra: str) -> list[int]:
    code = main(
        ["eval", "--by-length", "--checkpoint", str(checkpoint), "--teacher", str(checkpoint), "--json"]
        + ["--per-bucket", "20", *extra]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return [row["n"] for row in json.loads(captured.out)]


def test_by_length_scores_test_sentences_by_default(tiny_checkpoint, split_dir, capsys, monkeypatch) -> None:
    languages: list[str] = []
    monkeypatch.setattr(eval_command, "word_list", lambda language: languages.append(language) or set())
    tokenizer = core.load(tiny_checkpoint, device="cpu").tokenizer
    expected = {
        which: [len(b) for b in inputs_by_length(heldout_sentences(split_dir, which), tokenizer, per_bucket=20)]
        for which in ("test", "all")
    }
    assert expected["test"] != expected["all"]  # else this test could not tell them apart
    for extra, which in [((), "test"), (("--held-out", "test"), "test"), (("--held-out", "all"), "all")]:
        assert _by_length_counts(capsys, tiny_checkpoint, "--split", str(split_dir), *extra) == expected[which], extra
    assert languages == ["de"] * 3  # the word list of the student's target language (the tiny one says "de")


def test_by_length_reads_sources_from_a_file(tiny_checkpoint, split_dir, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(eval_command, "word_list", lambda language: set())
    sources = tmp_path / "test.src"
    sources.write_text("Olá.\n\n  Bom dia.  \nO gato dorme.\nObrigado.\n", encoding="utf-8")
    assert source_sentences(sources) == ["Olá.", "Bom dia.", "O gato dorme.", "Obrigado."]
    tokenizer = core.load(tiny_checkpoint, device="cpu").tokenizer
    expected = [len(b) for b in inputs_by_length(source_sentences(sources), tokenizer, per_bucket=20)]
    counts = _by_length_counts(capsys, tiny_checkpoint, "--split", str(split_dir), "--sources", str(sources))
    assert counts == expected and sum(counts) == 4  # one input per sentence of the file, none from the split
    counts = _by_length_counts(capsys, tiny_checkpoint, "--split", str(tmp_path / "none"), "--sources", str(sources))
    assert counts == expected  # no Ding split needed


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        (None, (), "error: --sources {path}: no such file"),
        ("\n  \n", (), "error: --sources {path}: the file holds no sentence"),
        (b"\xff\xfe bad", (), "error: --sources {path}: cannot be read as UTF-8"),
        ("Olá.\n", ("--held-out", "all"), "error: --held-out chooses among the Ding English"),
    ],
)
def test_by_length_sources_errors(tiny_checkpoint, tmp_path, capsys, content, extra, message) -> None:
    path = tmp_path / "sources.txt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    argv = ["eval", "--by-length", "--checkpoint", str(tiny_checkpoint), "--teacher", str(tiny_checkpoint)]
    code = main([*argv, "--split", str(tmp_path / "none"), "--sources", str(path), *extra])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.startswith(message.format(path=path)), captured.err
    assert "Traceback" not in captured.err and captured.out == ""


def test_by_length_refuses_a_teacher_of_another_language_pair(tiny_checkpoint, split_dir, tmp_path, capsys) -> None:
    teacher = tmp_path / "pt-en"
    shutil.copytree(tiny_checkpoint, teacher)
    config = json.loads((teacher / "config.json").read_text(encoding="utf-8"))
    assert (config["source_language"], config["target_language"]) == ("en", "de")  # the student's pair
    config.update(source_language="pt", target_language="en")
    (teacher / "config.json").write_text(json.dumps(config), encoding="utf-8")
    argv = ["eval", "--by-length", "--checkpoint", str(tiny_checkpoint), "--teacher", str(teacher)]
    code = main([*argv, "--split", str(split_dir)])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.startswith(
        f"error: --teacher {teacher} translates pt->en but the student {tiny_checkpoint} translates en->de"
    ), captured.err
    assert "Traceback" not in captured.err and captured.out == ""


def test_word_list_by_target_language(tmp_path, monkeypatch) -> None:
    fetched: list[str] = []

    def fake_fetch(package: str, cache_dir: Path, produces: Path) -> None:  # stands in for apt-get: no network
        fetched.append(package)
        produces.parent.mkdir(parents=True, exist_ok=True)
        produces.write_text(f"{package}\nColour\n\n", encoding="utf-8")

    monkeypatch.setattr("core.distill.fidelity.fetch_deb", fake_fetch)  # word_list fetches through it
    assert word_list("en", tmp_path) == {"wamerican", "wbritish", "colour"}
    assert fetched == ["wamerican", "wbritish"]
    assert (tmp_path / "usr/share/dict/british-english").is_file()
    assert word_list("en", tmp_path) == {"wamerican", "wbritish", "colour"} and len(fetched) == 2  # cached
    assert word_list("pt", tmp_path) == {"wbrazilian", "wportuguese", "colour"}
    assert fetched[2:] == ["wbrazilian", "wportuguese"]
    assert word_list("de", tmp_path) == set() and len(fetched) == 4  # no list for other languages


def test_a_known_verb_with_object_pronouns_after_it_is_a_word() -> None:
    """Debian's Portuguese lists hold "agitá" and "diga" but no "agitá-lo" or "diga-me" (verb + pronouns, as a
    spell checker judges them part by part): such words are known; invented verbs and other compounds are not."""
    known = {"agitá", "diga", "dá", "casa", "joelho"}
    for word in ("agitá-lo", "diga-me", "dá-se-lhe", "casa-a"):
        assert is_known(word, known, "pt") and not is_known(word, known, "") and not is_known(word, known, "de")
    for word in ("belisá-lo", "joelho-jerk", "-me", "agitá-", "agitá-lo-x", "diga-mesa"):
        assert not is_known(word, known, "pt"), word
    hyps, reference = ["Diga-me se vai agitá-lo, arrameia."], ["Diga se vai."]
    known = {"agitá"} | {w for w in words(reference[0])}
    assert bucket_fidelity((1, 15), hyps, reference, known, "pt").non_words == 1  # arrameia
    counted = bucket_fidelity((1, 15), hyps, reference, known)  # no language: no pronoun rule
    assert counted.non_words == 3 and counted.examples == ("agitá-lo", "arrameia", "diga-me")


def test_corpus_words_and_the_teacher_corpus_option(tiny_checkpoint, split_dir, tmp_path, capsys, monkeypatch):
    corpus = tmp_path / "train.tgt"
    corpus.write_text("Ele vai agitá-lo.\nO pão-de-ló, 3 €\n", encoding="utf-8")
    assert corpus_words(corpus) == {"ele", "vai", "agitá-lo", "o", "pão-de-ló"}
    seen: dict = {}

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return []

    monkeypatch.setattr(eval_command, "word_list", lambda language: {"debian"})
    monkeypatch.setattr(eval_command, "fidelity", spy)
    argv = ["eval", "--by-length", "--checkpoint", str(tiny_checkpoint), "--teacher", str(tiny_checkpoint)]
    assert main([*argv, "--split", str(split_dir), "--teacher-corpus", str(corpus)]) == 0
    assert seen["word_list"] == {"debian"} | corpus_words(corpus) and seen["language"] == "de"
    missing = tmp_path / "none.tgt"
    assert main([*argv, "--split", str(split_dir), "--teacher-corpus", str(missing)]) == 2
    assert capsys.readouterr().err.startswith(f"error: --teacher-corpus {missing}: no such file")
