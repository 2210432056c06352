"""Invented words (core.distill.invented): the rule, the count, the word lists, the card section, the command."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

import core
from core.cli import eval as eval_command  # the `eval` command: what it calls is patched where it looks it up
from core.cli import main
from core.distill import long_card
from core.distill.fidelity import WORDLISTS
from core.distill.invented import (
    Invented,
    InventedTable,
    count_invented,
    dictionary,
    invented_section,
    is_invented,
    output_words,
    total,
)
from core.errors import InputError

PT = frozenset(
    {"o", "velho", "guarda", "chuva", "escreveu", "cartas", "à", "filha", "agitá", "diga", "d", "água", "enganosa"}
)


def test_output_words_strip_punctuation_and_leave_numbers_out() -> None:
    text = "«O velho», disse: 3 cartas em 1990, às 10h — guarda-chuva d'água; 2º lugar!"
    assert output_words(text) == ["O", "velho", "disse", "cartas", "em", "às", "guarda-chuva", "d'água", "lugar"]


@pytest.mark.parametrize(
    ("word", "source", "invented"),
    [
        ("velho", "", False),
        ("VELHO", "", False),  # case-folded
        ("guardeião", "", True),  # the app's first example: in no list
        ("guarda-chuva", "", False),  # every part listed
        ("guarda-xuva", "", True),  # one part not
        ("agitá-lo", "", False),  # a listed verb with an object pronoun after it
        ("lo-agitá", "", True),  # a pronoun first is no verb
        ("d’água", "", False),  # curly apostrophe, parts listed
        ("enganosamente", "", False),  # an adverb of a listed adjective
        ("aplizarmente", "", True),  # of no listed word
        ("mente", "", True),  # the suffix alone is no word (unless listed)
        ("Tom", "Tom wrote letters.", False),  # a capitalised name carried over from the source
        ("Tom", "He wrote letters.", True),  # not in the source: judged like any word
        ("tom", "Tom wrote letters.", True),  # lower-case: not a name, judged like any word
    ],
)
def test_is_invented(word: str, source: str, invented: bool) -> None:
    assert is_invented(word, PT, "pt", source) is invented


def test_pronouns_and_adverbs_count_only_for_their_language() -> None:
    assert not is_invented("agitá-lo", PT, "pt")
    assert is_invented("agitá-lo", PT, "en")  # English has no such pronouns: 'lo' must be listed
    assert is_invented("enganosamente", PT, "en")  # nor adverbs in -mente


def test_count_invented_per_output_word() -> None:
    outputs = ["O velho guardeião escreveu 12 cartas à filha.", "Tom escreveu cartas.", "Bric-abrac!"]
    sources = ["The old keeper wrote 12 letters to his daughter.", "Tom wrote letters.", "Bric-a-brac!"]
    counted = count_invented(outputs, PT, "pt", sources)
    assert counted == Invented(words=11, invented=2, examples=("bric-abrac", "guardeião"))
    assert counted.per_100 == pytest.approx(100 * 2 / 11)
    assert counted.cell() == "18.18 (2 of 11)"
    assert count_invented(outputs, PT, "pt").invented == 3  # without the sources "Tom" is no carried name
    with pytest.raises(InputError, match="aligned"):
        count_invented(outputs, PT, "pt", sources[:1])


def test_no_output_words() -> None:
    empty = count_invented(["", "42 !"], PT, "pt")
    assert empty.words == 0 and empty.cell() == "—"
    assert total([empty, Invented(10, 1, ("x",))]) == Invented(10, 1, ("x",))


def test_dictionary_reads_every_list_of_the_language(tmp_path: Path) -> None:
    lists = tmp_path / "usr" / "share" / "dict"
    lists.mkdir(parents=True)
    (lists / "brazilian").write_text("Guarda\nchuva\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"wportuguese are not installed .*apt-get install wportuguese"):
        dictionary("pt", roots=[tmp_path])
    (lists / "portuguese").write_text("velho\n\n", encoding="utf-8")
    assert dictionary("pt", roots=[tmp_path]) == {"guarda", "chuva", "velho"}
    with pytest.raises(InputError, match="no word list is known for the language 'de'"):
        dictionary("de", roots=[tmp_path])


def test_the_card_section_names_the_rule_the_figures_and_the_command() -> None:
    table = InventedTable(
        "pt",
        teacher=(Invented(100, 0, ()), Invented(300, 3, ("abc",))),
        student=(Invented(100, 2, ("guardeião",)), Invented(300, 9, ("abc", "xyz"))),
    )
    text = invented_section(table, teacher_name="bergamot-en-pt", inputs="some inputs", command="python -m core X")
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[0] == "| model | 1–15 pieces | 16–30 pieces | all | e.g. |"
    assert rows[1] == "| teacher (`bergamot-en-pt`) | 0.00 (0 of 100) | 1.00 (3 of 300) | **0.75 (3 of 400)** | abc |"
    assert rows[2] == (
        "| this student | 2.00 (2 of 100) | 3.00 (9 of 300) | **2.75 (11 of 400)** | abc, guardeião, xyz |"
    )
    assert text.startswith("## Invented words") and "`wbrazilian`, `wportuguese`" in text
    assert "Reproduce: `python -m core X`" in text and "on some inputs" in text
    assert "an adverb in -mente" in text and "object pronouns after a verb" in text
    english = invented_section(
        InventedTable("en", table.teacher, table.student), teacher_name="t", inputs="", command=""
    )
    assert "-mente" not in english and "pronouns" not in english and "`wamerican`, `wbritish`" in english


def test_the_eval_option_counts_both_models(tiny_checkpoint, tmp_path, capsys, monkeypatch) -> None:
    known: list[str] = []
    monkeypatch.setattr(eval_command, "dictionary", lambda language: known.append(language) or frozenset())
    sources = tmp_path / "test.src"
    sources.write_text("Hello there.\nThe cat sleeps.\n", encoding="utf-8")
    argv = ["eval", "--invented-words", "--checkpoint", str(tiny_checkpoint), "--teacher", str(tiny_checkpoint)]
    assert main([*argv, "--sources", str(sources), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert known == ["de"]  # the student's target language
    assert found["teacher"] == found["student"]  # the same model twice: the same outputs, the same count
    assert sum(b["words"] for b in found["student"]) > 0  # a random model writes something; with no list all is odd
    assert all(b["invented"] == b["words"] for b in found["student"])
    assert main([*argv, "--sources", str(sources)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## Invented words") and f"--sources {sources}`" in out


def test_the_eval_option_needs_a_teacher(tiny_checkpoint, capsys) -> None:
    code = main(["eval", "--invented-words", "--checkpoint", str(tiny_checkpoint)])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.startswith("error: --invented-words needs --teacher"), captured.err


@pytest.mark.skipif(
    not all((Path("/") / member).is_file() for lists in WORDLISTS.values() for member in lists.values()),
    reason="Debian's word lists are not installed (make test installs them with apt-get where it can)",
)
def test_the_real_word_lists() -> None:
    pt, en = dictionary("pt"), dictionary("en")
    assert not is_invented("guarda", pt, "pt") and is_invented("guardeião", pt, "pt")
    assert not is_invented("guarda-chuva", pt, "pt") and not is_invented("diga-me", pt, "pt")
    assert not is_invented("lighthouse", en, "en") and not is_invented("don't", en, "en")
    assert is_invented("jewelleaf", en, "en")


def test_the_card_writer_measures_and_words_the_section(tiny_checkpoint, monkeypatch) -> None:
    bundle = core.load(tiny_checkpoint, device="cpu")
    buckets = [["Hello there."], ["The cat sleeps on the warm chair."], [], []]
    assert long_card.measure_invented(bundle.model, bundle.model, bundle.tokenizer, buckets, "de") is None  # no list
    monkeypatch.setattr(long_card, "dictionary", lambda language: frozenset())
    table = long_card.measure_invented(bundle.model, bundle.model, bundle.tokenizer, buckets, "pt")
    assert table is not None and table.teacher == table.student and len(table.student) == 4
    assert table.student[2] == Invented(0, 0, ())  # an empty bucket
    args = argparse.Namespace(data_dir="data/x", teacher="checkpoints/bergamot-en-pt", per_bucket=100)
    first = long_card.invented_card_section(args, table, Path("checkpoints/s"), "100", second=False)
    assert "from the Ding **test** sentences" in first and "translations of" not in first
    command = "python -m core eval --invented-words --teacher checkpoints/bergamot-en-pt --checkpoint checkpoints/s"
    assert f"Reproduce: `{command} --sources data/x/test.src`" in first
    args.per_bucket = 5
    second = long_card.invented_card_section(args, table, Path("checkpoints/s"), "5", second=True)
    assert "from the translations of the Ding **test** sentences" in second and "--per-bucket 5`" in second
