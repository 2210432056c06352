"""Tests for core.training.corpus: Ding dictionary parsing, classification, de-duplication and splits."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import FIXTURES

from core.training.corpus import (
    Pair,
    Split,
    classify,
    fetch_ding,
    make_split,
    normalise,
    parse_line,
    prepare,
    read_ding,
    read_split,
    write_split,
)

FIXTURE = FIXTURES / "ding_sample.txt"
REAL_DING = Path(__file__).resolve().parents[3] / "data/ding/usr/share/trans/de-en"


def _key(text: str) -> str:
    return normalise(text).casefold().rstrip(" .?!")


@pytest.fixture(scope="module")
def fixture_pairs() -> list[Pair]:
    return read_ding(FIXTURE)


def _synthetic(n: int = 400) -> list[Pair]:
    """Sentence pairs with deliberate collisions, plus phrases/words equal to some sentences."""
    pairs = [Pair(f"Sentence number {i}.", f"Satz Nummer {i}.", "sentence") for i in range(n)]
    pairs += [Pair(f"Another sentence {i}.", f"Satz Nummer {i}.", "sentence") for i in range(0, n, 7)]
    pairs += [Pair(f"Sentence number {i}!", f"Noch ein Satz {i}.", "sentence") for i in range(0, n, 11)]
    pairs += [Pair(f"sentence number {i}", f"satz nummer {i}", "phrase") for i in range(0, n, 3)]
    pairs += [Pair(f"word{i}", f"Wort{i}", "word") for i in range(50)]
    return pairs


# --------------------------------------------------------------------------- parsing


def test_comments_blank_and_malformed_lines_skipped() -> None:
    assert parse_line("# Version :: devel 2023-01-30") == []
    assert parse_line("   ") == []
    assert parse_line("no separator here") == []


def test_tags_stripped_and_sub_entries_aligned() -> None:
    assert parse_line("Katze {f} [zool.] | Katzen {pl} :: cat | cats") == [
        Pair("cat", "Katze", "word"),
        Pair("cats", "Katzen", "word"),
    ]


def test_alternatives_cross_product_and_max_alts() -> None:
    line = "Auto {n}; Wagen {m} | Autos {pl} :: car; automobile [Am.] | cars"
    assert {(p.de, p.en) for p in parse_line(line)} == {
        ("Auto", "car"),
        ("Auto", "automobile"),
        ("Wagen", "car"),
        ("Wagen", "automobile"),
        ("Autos", "cars"),
    }
    assert [(p.de, p.en) for p in parse_line(line, max_alts=1)] == [("Auto", "car"), ("Autos", "cars")]


def test_mismatched_sub_entry_counts_keep_headword_only() -> None:
    assert parse_line("Hund {m} | Hunde {pl} | Der Hund bellt. :: dog | dogs") == [Pair("dog", "Hund", "word")]


def test_parentheses_angle_abbreviation_and_xref_removed() -> None:
    assert parse_line("(un)glücklich {adj} :: (un)happy") == [Pair("happy", "glücklich", "word")]
    assert parse_line("Farbe {f} <Farben> :: colour [Br.]; color [Am.] <colour <col>>") == [
        Pair("colour", "Farbe", "word"),
        Pair("color", "Farbe", "word"),
    ]
    assert [p.en for p in parse_line("Abfahrt {f} /Abf./; Abreise {f} :: departure /dep./")] == [
        "departure",
        "departure",
    ]
    assert parse_line("Armenrecht {n} ~Prozesskostenhilfe :: poor law ~legal aid") == [
        Pair("poor law", "Armenrecht", "phrase")
    ]
    pairs = parse_line(
        "(gerade) beschäftigt sein {v} | Ich bin (gerade) beschäftigt. :: to be busy | I am busy (right now)."
    )
    assert pairs[1] == Pair("I am busy.", "Ich bin beschäftigt.", "sentence")


def test_slashes_ellipsis_and_placeholders() -> None:
    assert parse_line("Die Chips/Kartoffelchips sind gut. :: The crisps/ chips are good.") == [
        Pair("The crisps are good.", "Die Chips sind gut.", "sentence")
    ]
    assert parse_line("Es ist 24/7 offen. :: It is open 24/7.")[0].en == "It is open 24/7."
    # spaced " / " has unknown scope: that alternative is dropped, the other one is kept
    assert parse_line(
        "Sie ist vergeben / verheiratet.; Sie ist vergeben. :: She is taken / married.; She is taken."
    ) == [Pair("She is taken.", "Sie ist vergeben.", "sentence")]
    # templates/fragments with an ellipsis are dropped
    assert parse_line("eher … als; lieber; Abbau… :: rather … than; rather") == [Pair("rather", "lieber", "word")]
    # placeholders demote a sentence-shaped pair to a phrase
    assert parse_line("Kannst du mir etw. empfehlen? :: Could you recommend sth. for me?")[0].kind == "phrase"


def test_fixture_file(fixture_pairs: list[Pair]) -> None:
    ens = [p.en for p in fixture_pairs]
    assert "Is there any tea left?" in ens
    assert "How's it going?" in ens  # typographic apostrophe mapped to ASCII
    assert not any(ch in p.en + p.de for p in fixture_pairs for ch in "{}[]<>()~|#")
    assert not any("…" in p.en + p.de or " / " in p.en + p.de for p in fixture_pairs)
    kinds = Counter(p.kind for p in fixture_pairs)
    assert kinds["sentence"] == 17 and kinds["word"] >= 15 and kinds["phrase"] >= 5
    assert [p.kind for p in fixture_pairs if p.en == "Help!"] == ["word"]


def test_deduplication(fixture_pairs: list[Pair]) -> None:
    keys = [(normalise(p.en).casefold(), normalise(p.de).casefold()) for p in fixture_pairs]
    assert len(keys) == len(set(keys))
    # "Katze :: cat" appears 3x (once as "katze :: Cat"): the first spelling wins
    assert [(p.en, p.de) for p in fixture_pairs if p.en.casefold() == "cat"] == [("cat", "Katze")]
    assert [p.en for p in fixture_pairs if p.de == "Das ist ein Test."] == ["This is a test."]
    # different English for the same German is not a duplicate
    assert len([p for p in fixture_pairs if p.de == "Es regnet."]) == 2
    assert read_ding(FIXTURE) == fixture_pairs  # deterministic


# --------------------------------------------------------------------------- helpers


def test_normalise() -> None:
    assert normalise("  a \t b\n c  ") == "a b c"
    assert normalise("Tu\u0308r") == "Tür"  # NFD -> NFC
    assert normalise("Groß") == "Groß"  # case preserved


@pytest.mark.parametrize(
    "text,kind",
    [
        ("Is there any tea left?", "sentence"),
        ("I see!", "sentence"),
        ("It is raining.", "sentence"),
        ("'Are you asleep?' 'No.'", "sentence"),
        ("Help!", "word"),
        ("cat", "word"),
        ("to scavenge", "word"),
        ("eel soup", "phrase"),
        ("to lay in sth.", "phrase"),
        ("fraud etc.", "phrase"),
        ("Theft etc.", "phrase"),
        ("the nuts and bolts", "phrase"),
        ("To conclude, …", "phrase"),
        ("Wait...", "word"),
        ("", "word"),
    ],
)
def test_classify(text: str, kind: str) -> None:
    assert classify(text) == kind


# --------------------------------------------------------------------------- splits


def _assert_disjoint(split: Split) -> None:
    held_en = {_key(p.en) for p in split.dev + split.test}
    held_de = {_key(p.de) for p in split.dev + split.test}
    assert all(_key(p.en) not in held_en and _key(p.de) not in held_de for p in split.train)
    dev_en, dev_de = {_key(p.en) for p in split.dev}, {_key(p.de) for p in split.dev}
    assert all(_key(p.en) not in dev_en and _key(p.de) not in dev_de for p in split.test)
    for part in (split.dev, split.test):
        assert len({_key(p.en) for p in part}) == len(part) == len({_key(p.de) for p in part})
        assert all(p.kind == "sentence" for p in part)


def test_split_disjoint_and_sizes() -> None:
    pairs = _synthetic()
    split = make_split(pairs, n_dev=40, n_test=60, seed=7)
    assert (len(split.dev), len(split.test)) == (40, 60)
    _assert_disjoint(split)
    assert any(p.kind == "phrase" for p in split.train)
    # nothing is lost except pairs colliding with held-out texts
    assert len(split.train) + 100 < len(pairs)
    assert len(split.train) > len(pairs) - 100 - 3 * 100


def test_split_on_fixture(fixture_pairs: list[Pair]) -> None:
    split = make_split(fixture_pairs, n_dev=3, n_test=4, seed=1)
    _assert_disjoint(split)


def test_split_deterministic_and_seed_dependent() -> None:
    pairs = _synthetic()
    a = make_split(pairs, n_dev=30, n_test=30, seed=1234)
    assert a == make_split(pairs, n_dev=30, n_test=30, seed=1234)
    assert a.dev != make_split(pairs, n_dev=30, n_test=30, seed=99).dev


def test_split_too_few_sentences() -> None:
    with pytest.raises(ValueError):
        make_split(_synthetic(20), n_dev=15, n_test=15)


def test_write_read_round_trip(tmp_path: Path) -> None:
    split = make_split(_synthetic(), n_dev=20, n_test=25, seed=3)
    write_split(split, tmp_path)
    for name in ("train.en", "train.de", "train.kind", "dev.en", "dev.de", "test.en", "test.de"):
        assert (tmp_path / name).is_file()
    assert read_split(tmp_path) == split
    meta = json.loads((tmp_path / "split.json").read_text(encoding="utf-8"))
    assert meta["counts"] == {"train": len(split.train), "dev": 20, "test": 25}


def test_prepare_reuses_written_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    (cache / "usr/share/trans").mkdir(parents=True)
    (cache / "usr/share/trans/de-en").write_text(FIXTURE.read_text(encoding="utf-8"), "utf-8")
    out = tmp_path / "split"
    first = prepare(out, cache, n_dev=2, n_test=3, seed=5)
    assert json.loads((out / "split.json").read_text())["params"]["seed"] == 5
    (cache / "usr/share/trans/de-en").unlink()  # reuse must not need the source any more
    assert prepare(out, cache, n_dev=2, n_test=3, seed=5) == first
    # other params -> rebuild -> fetch; simulate a machine without apt-get
    monkeypatch.setattr("core.training.corpus.shutil.which", lambda name: None)
    with pytest.raises(RuntimeError, match="apt-get"):
        prepare(out, cache, n_dev=2, n_test=3, seed=6)


def test_a_split_folder_that_cannot_be_made_is_named_before_the_corpus_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`eval --split a_file/split` parsed the whole Ding corpus (a minute here; a download on a fresh machine)
    before it said 'Not a directory'."""
    a_file = tmp_path / "a_file"
    a_file.write_text("x", encoding="utf-8")
    fetched = []
    monkeypatch.setattr("core.training.corpus.fetch_ding", lambda cache_dir: fetched.append(cache_dir))
    with pytest.raises(NotADirectoryError) as raised:
        prepare(a_file / "split", tmp_path / "cache")
    assert raised.value.filename == str(a_file / "split") and not fetched


def test_fetch_ding_returns_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "usr/share/trans/de-en"
    target.parent.mkdir(parents=True)
    target.write_text("Katze :: cat\n", encoding="utf-8")
    assert fetch_ding(tmp_path) == target


# --------------------------------------------------------------------------- real corpus


@pytest.mark.slow
@pytest.mark.skipif(not REAL_DING.is_file(), reason=f"real Ding file not present at {REAL_DING}")
def test_real_corpus_ballpark(tmp_path: Path) -> None:
    """Every fifth line of the real dictionary, from all through it (the whole file took 23 s here, 128 s under
    load): 41,248 lines gave 4,513 sentences, 91,543 phrases and 57,163 words (the whole file: 22,343 / 454,610 /
    282,034); the bounds are those of the whole file's test, scaled."""
    lines = REAL_DING.read_text(encoding="utf-8").splitlines(keepends=True)
    sample = tmp_path / "de-en"
    sample.write_text("".join(lines[1::5]), encoding="utf-8")  # line 176,432 holds the pair below
    pairs = read_ding(sample)
    kinds = Counter(p.kind for p in pairs)
    assert kinds["sentence"] >= 3_000
    assert kinds["phrase"] >= 16_000 and kinds["word"] >= 20_000
    assert Pair("Is there any tea left?", "Ist noch Tee übrig?", "sentence") in pairs


def test_fetch_deb_names_the_failing_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.distill.data import fetch_fortunes
    from core.training.corpus import fetch_deb

    (tmp_path / "fortunes-min_1.0_all.deb").write_bytes(b"not a Debian archive")  # already "downloaded": no network
    with pytest.raises(RuntimeError, match=r"dpkg-deb -x fortunes-min_1\.0_all\.deb"):
        fetch_deb("fortunes-min", tmp_path, tmp_path / "usr/share/games/fortunes/fortunes")
    with pytest.raises(RuntimeError, match=r"dpkg-deb -x fortunes-min_1\.0_all\.deb"):
        fetch_fortunes(tmp_path)  # the fortune cookies go through the same fetcher
    monkeypatch.setattr("core.training.corpus.shutil.which", lambda name: None)
    with pytest.raises(RuntimeError, match="`apt-get` not found.*fortunes-min"):
        fetch_fortunes(tmp_path / "elsewhere")


def test_split_or_prepare_makes_a_missing_split_and_only_reads_one_that_is_there(tmp_path: Path) -> None:
    from core.errors import InputError
    from core.training.corpus import split_or_prepare

    cache = tmp_path / "cache"
    (cache / "usr/share/trans").mkdir(parents=True)
    (cache / "usr/share/trans/de-en").write_text(FIXTURE.read_text(encoding="utf-8"), "utf-8")
    out = tmp_path / "split"
    made = split_or_prepare(out, cache, n_dev=2, n_test=3, seed=5)  # a fresh machine: fetched (here: cached), split
    assert made == prepare(out, cache, n_dev=2, n_test=3, seed=5) and len(made.dev) == 2 and len(made.test) == 3
    (cache / "usr/share/trans/de-en").unlink()
    assert split_or_prepare(out, cache, n_dev=9, n_test=9) == made  # there: read, not rebuilt for other params
    (out / "dev.de").write_text("only one line\n", encoding="utf-8")
    with pytest.raises(InputError, match="dev files are not aligned"):
        split_or_prepare(out, cache)


def test_a_command_on_a_fresh_machine_without_apt_says_what_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`eval` (and the distillation recipes) make the Ding split when it is missing; where fetching fails the
    CLI prints the failing step, not a traceback."""
    from core.cli import main

    monkeypatch.chdir(tmp_path)  # no data/ding here
    monkeypatch.setattr("core.training.corpus.shutil.which", lambda name: None)
    code = main(["eval", "--checkpoint", str(tmp_path / "none"), "--split", str(tmp_path / "split")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: fetch_ding: `apt-get` not found") and "Traceback" not in err
