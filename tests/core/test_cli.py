"""The command line under abuse: every bad option, path or file gives one ``error:`` line naming it, never a
traceback (cases a sweep of every subcommand found printing one), and what no command foresaw still gives one
line (``LAB_DEBUG=1`` shows the traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

import core.cli
import core.cli.distill
import core.cli.info
from core.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--beams", "99999"), "error: --beams: each beam size must be between 1 and 16, got 99999"),
        (("--beams", "1,,4"), "error: --beams: '' is not a whole number"),
        (("--beams", "a"), "error: --beams: 'a' is not a whole number"),
        (("--limit", "-3"), "error: --limit must be 0 (all) or more, got -3"),
    ],
)
def test_eval_names_bad_options_before_loading_anything(tmp_path, capsys, extra, message) -> None:
    # the checkpoint does not exist: the options are checked first (a beam of 99,999 once filled 20 GB)
    code, err = _run(capsys, "eval", "--checkpoint", str(tmp_path / "none"), "--split", str(tmp_path), *extra)
    assert code == 2 and err.startswith(message), err


def test_eval_on_an_empty_split_says_there_is_nothing_to_score(tiny_checkpoint, tmp_path, capsys) -> None:
    split = tmp_path / "split"
    split.mkdir()
    for name in ("train.en", "train.de", "train.kind", "dev.en", "dev.de", "test.en", "test.de"):
        (split / name).write_text("", encoding="utf-8")
    code, err = _run(capsys, "eval", "--checkpoint", str(tiny_checkpoint), "--split", str(split), "--beams", "1")
    assert code == 2 and err.startswith("error: nothing to score: 0 outputs for 0 references")


def test_unreadable_files_and_impossible_paths_are_named(tiny_checkpoint, tmp_path, capsys) -> None:
    split = tmp_path / "split"
    split.mkdir()
    for name in ("train.en", "train.de", "train.kind", "dev.en", "dev.de", "test.de"):
        (split / name).write_text("", encoding="utf-8")
    (split / "test.en").write_bytes(b"\xff\xfe not text")
    code, err = _run(capsys, "eval", "--checkpoint", str(tiny_checkpoint), "--split", str(split), "--beams", "1")
    assert code == 2 and err.startswith(f"error: {split / 'test.en'}: not UTF-8 text (invalid start byte at byte 0)")
    a_file = tmp_path / "a_file"
    a_file.write_text("x", encoding="utf-8")
    code, err = _run(capsys, "eval", "--checkpoint", str(tiny_checkpoint), "--split", str(a_file / "split"))
    assert code == 2 and err.startswith(f"error: {a_file / 'split'}: Not a directory"), err
    code, err = _run(capsys, "info", "/")
    assert code == 2 and err.startswith("error: /: the file system's root cannot be a checkpoint folder")
    code, err = _run(capsys, "info", str(a_file))  # it said "checkpoint folder ... does not exist"
    assert code == 2 and err.startswith(f"error: {a_file}: is a file, not a checkpoint folder"), err


def test_train_and_explain_options_out_of_range(tiny_checkpoint, tmp_path, capsys) -> None:
    code, err = _run(capsys, "train", "--task", "copy", "--run-dir", str(tmp_path / "r"), "--log-every", "0")
    assert code == 2 and err.startswith("error: TrainConfig: max_tokens must be >= 16") and "log_every >= 1" in err
    for threads in ("-1", "100000"):  # 100,000 crashed torch (exit 139), 5,000 hung
        code, err = _run(capsys, "train", "--task", "copy", "--run-dir", str(tmp_path / "r"), "--threads", threads)
        assert code == 2 and err.startswith("error: --threads must be 0 (torch's default) to "), err
        assert err.rstrip().endswith(f"got {threads}")
    # NaN passed `<= 0`: every step was skipped as non-finite and the run never ended
    code, err = _run(capsys, "train", "--task", "copy", "--run-dir", str(tmp_path / "r"), "--lr-factor", "nan")
    assert code == 2 and "every rate and time finite" in err
    for option, value in (("--max-steps", "-5"), ("--epochs", "-1")):  # both ran 0 steps without a word
        code, err = _run(capsys, "train", "--task", "copy", "--run-dir", str(tmp_path / "r"), option, value)
        assert code == 2 and "max_steps >= 0 (0: no limit), max_minutes >= 0, epochs >= 1" in err, (option, err)
    argv = ("distill", "--stages", "eval", "--eval-beam", "1000", "--teacher", str(tiny_checkpoint))
    code, err = _run(capsys, *argv)  # it ran on past 120 s
    assert code == 2 and err.startswith("error: --eval-beam must be 0 (skip) to 16, got 1000")
    code, err = _run(capsys, "distill", "--stages", "bogus", "--teacher", str(tiny_checkpoint))
    assert code == 2 and err.startswith("error: distill: unknown stages ['bogus']")
    argv = ("explain", "attribution", "--checkpoint", str(tiny_checkpoint), "--steps", "100000000", "Hello")
    code, err = _run(capsys, *argv)  # once: an attempt to allocate 307 GB
    assert code == 2 and err.startswith("error: --steps must be between 1 and 512, got 100000000")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--phrases", "-5"), "error: --phrases must be 0 or more, got -5"),  # was written to sources.json
        (("--joined", "-1"), "error: --joined must be 0 or more, got -1"),
        (("--dev-per-bucket", "0"), "error: --dev-per-bucket must be at least 1, got 0"),
        (("--stages", "publish", "--per-bucket", "0"), "error: --per-bucket must be at least 1, got 0"),
        (("--max-pieces", "-1"), "error: --max-pieces must be at least 1, got -1"),
        (("--teacher-max-tokens", "-5"), "error: --teacher-max-tokens must be 0 or more, got -5"),
        (("--eval-max-tokens", "-5"), "error: --eval-max-tokens must be 0 or more, got -5"),
    ],
)
def test_distill_long_names_bad_counts_before_loading_anything(tmp_path, capsys, extra, message) -> None:
    # the teacher does not exist: the counts are checked first, and nothing is written
    argv = ("distill-long", "--teacher", str(tmp_path / "none"), "--data-dir", str(tmp_path / "data"), *extra)
    code, err = _run(capsys, *argv)
    assert code == 2 and err.startswith(message), err
    assert not (tmp_path / "data").exists()


def test_one_distill_command_takes_the_recipe_as_an_option(tmp_path, capsys) -> None:
    """distill --recipe long is distill-long: the same checks; each recipe's defaults; the other recipe's options
    refused by name (they were silently unknown to one of two parsers)."""
    none = ("--teacher", str(tmp_path / "none"), "--data-dir", str(tmp_path / "data"))
    for command in (("distill", "--recipe", "long"), ("distill-long",)):
        code, err = _run(capsys, *command, *none, "--phrases", "-5")
        assert code == 2 and err.startswith("error: --phrases must be 0 or more, got -5"), (command, err)
    code, err = _run(capsys, "distill", *none, "--phrases", "5", "--joined", "1")
    assert code == 2 and err == "error: --phrases, --joined: an option of --recipe long, not of --recipe sentences\n"
    code, err = _run(capsys, "distill-long", *none, "--eval-beam", "2")
    assert code == 2 and err == "error: --eval-beam: an option of --recipe sentences, not of --recipe long\n"
    assert not (tmp_path / "data").exists()
    parser = core.cli.build_parser()
    sentences = parser.parse_args(["distill"])
    long, alias = parser.parse_args(["distill", "--recipe", "long"]), parser.parse_args(["distill-long"])
    for args in (sentences, long, alias):
        core.cli.distill.resolve(args)
    assert (sentences.data_dir, sentences.stages, sentences.log_every, sentences.eval_beam) == (
        "data/distill",
        "data,train,eval,publish",
        20,
        4,
    )
    assert {**vars(long), "command": "distill-long"} == vars(alias)  # the same settings under either name
    assert (long.data_dir, long.scope, long.max_pieces, long.log_every, long.phrases) == (
        "data/distill-long",
        "decoder",
        128,
        50,
        100_000,
    )
    given = parser.parse_args(["distill-long", "--data-dir", "d", "--log-every", "7", "--phrases", "3"])
    core.cli.distill.resolve(given)
    assert (given.data_dir, given.log_every, given.phrases) == ("d", 7, 3)  # what is given wins


def test_by_length_per_bucket_and_distill_compare_are_checked(tiny_checkpoint, tmp_path, capsys) -> None:
    argv = ("eval", "--by-length", "--checkpoint", str(tiny_checkpoint), "--teacher", str(tiny_checkpoint))
    code, err = _run(capsys, *argv, "--per-bucket", "0")
    assert code == 2 and err.startswith("error: --per-bucket must be at least 1, got 0"), err
    missing = tmp_path / "nonexistent"  # the side-by-side left it out without a word
    code, err = _run(
        capsys, "distill", "--stages", "publish", "--teacher", str(tiny_checkpoint), "--compare", str(missing)
    )
    assert code == 2 and err.startswith(f"error: --compare {missing}: no such checkpoint folder"), err


def test_what_no_command_foresaw_is_one_line_and_ctrl_c_stops_quietly(monkeypatch, capsys, tmp_path) -> None:
    def failing(args):
        raise KeyError("type")

    monkeypatch.setattr(core.cli.info, "run", failing)
    code, err = _run(capsys, "info", str(tmp_path))
    assert (
        code == 1
        and err == "error: KeyError: 'type' (not expected: please report it; LAB_DEBUG=1 shows where it happened)\n"
    )
    monkeypatch.setenv("LAB_DEBUG", "1")
    with pytest.raises(KeyError):
        main(["info", str(tmp_path)])
    monkeypatch.delenv("LAB_DEBUG")

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(core.cli.info, "run", interrupted)
    assert _run(capsys, "info", str(tmp_path)) == (130, "interrupted\n")

    def unwritable(args):
        Path("/proc/not-here/x").write_text("x")

    monkeypatch.setattr(core.cli.info, "run", unwritable)
    code, err = _run(capsys, "info", str(tmp_path))
    assert code == 2 and err == "error: /proc/not-here/x: No such file or directory\n"


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")  # transformers' tokenizer, in the check
def test_an_output_path_holding_someone_elses_file_or_folder_is_never_replaced(tmp_path, capsys):
    """`export-hf --force OUT` (and every whole-folder writer) swapped away whatever was at OUT: a file, or a
    folder of unrelated files. Only a folder this lab (or a model writer) made, with a config.json, is replaced."""
    from conftest import build_tiny_checkpoint

    checkpoint = build_tiny_checkpoint(tmp_path / "ckpt", pe_layout="concatenated_hf")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine", encoding="utf-8")
    code, err = _run(capsys, "export-hf", "--force", str(checkpoint), str(a_file))
    assert code == 2 and "a file is there, not a folder" in err and a_file.read_text(encoding="utf-8") == "mine"
    folder = tmp_path / "documents"
    folder.mkdir()
    (folder / "thesis.tex").write_text("mine", encoding="utf-8")
    code, err = _run(capsys, "export-hf", "--force", str(checkpoint), str(folder))
    assert code == 2 and "holds files but no config.json" in err
    assert (folder / "thesis.tex").read_text(encoding="utf-8") == "mine"
    assert _run(capsys, "export-hf", str(checkpoint), str(tmp_path / "hf"))[0] == 0
    assert _run(capsys, "export-hf", "--force", str(checkpoint), str(tmp_path / "hf"))[0] == 0  # its own: replaced


def _tiny_split(root: Path) -> Path:
    """The fixture corpus as a split that ``train --task ding`` reads as it is (the parameters it would ask for)."""
    from conftest import FIXTURES

    from core.training.corpus import MAX_ALTS, Pair, Split, write_split

    lines = (FIXTURES / "tiny_corpus.txt").read_text(encoding="utf-8").splitlines()
    pairs = [Pair(en=lines[i], de=lines[i + 1], kind="sentence") for i in range(0, len(lines) - 1, 2)]
    params = {"n_dev": 500, "n_test": 1000, "seed": 1234, "max_alts": MAX_ALTS}
    write_split(Split(train=pairs[:8], dev=pairs[8:11], test=pairs[11:14]), root, params=params)
    return root


@pytest.fixture(scope="module")
def published_run(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A run folder and a split with the files as the training loop writes them, published ONCE (a publish scores
    the dev and test sets and the probes: each case re-publishing took 38-280 s here); each case copies them."""
    import json
    import shutil

    root = tmp_path_factory.mktemp("publish")
    run, split = root / "run", _tiny_split(root / "split")
    shutil.copytree(tiny_checkpoint, run / "best")
    schedule = {"warmup": 1, "lr_factor": 1.0, "max_tokens": 100, "label_smoothing": 0.1, "clip": 1.0, "seed": 1}
    state = {"step": 4, "epoch": 1, "elapsed": 6.0, "tokens_seen": 90, "train_config": schedule}
    (run / "state.json").write_text(json.dumps(state), encoding="utf-8")
    rows = [
        {"type": "train", "step": 2, "loss": 3.0, "tokens_per_s": 10.0},
        {"type": "eval", "step": 4, "dev_loss": 2.0, "dev_bleu": 1.0, "dev_chrf": 5.0},
    ]
    (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["publish", "--run-dir", str(run), "--split", str(split), "--out", str(root / "good")]) == 0
    return run, split


def test_publish_of_an_intact_run_writes_its_card(published_run) -> None:
    run, _ = published_run
    card = (run.parent / "good" / "card.md").read_text(encoding="utf-8")
    assert "split deterministically (seed 1234)" in card


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("state.json", '{"step": 10', "state.json: not valid JSON (Expecting ',' delimiter"),
        ("state.json", "[1, 2]", "state.json: must hold a JSON object, got list"),
        ("state.json", '{"epoch": 1, "elapsed": 6, "tokens_seen": 9}', "state.json: missing or not a number: step"),
        ("state.json", '{"step": 1, "epoch": 1, "elapsed": 6, "tokens_seen": 9}', "state.json: train_config must be"),
        ("log.jsonl", '{"type": "train", "loss": 2.5}\n', "log.jsonl: train entry 1: missing or not a number: tokens_"),
        ("log.jsonl", '{"type": "eval", "step": 4, "dev_loss": 2.0}\n', "eval entry 1: missing or not a number: dev_"),
        ("split.json", '{"counts": ', "split.json: not valid JSON (Expecting value"),
        ("split.json", '"text"', "split.json: must hold a JSON object, got str"),
    ],
)
def test_publish_names_a_run_file_broken_by_hand(published_run, tmp_path, capsys, name, text, message) -> None:
    """A state.json, log.jsonl or split.json with fields missing or not JSON was a KeyError or JSONDecodeError
    'not expected' line, after minutes of scoring: now the file and what is wrong, before any scoring. The run and
    split published intact by ``published_run``, copied, with one file broken."""
    import shutil

    run, split = tmp_path / "run", tmp_path / "split"
    shutil.copytree(published_run[0], run)
    shutil.copytree(published_run[1], split)
    (split if name == "split.json" else run).joinpath(name).write_text(text, encoding="utf-8")
    argv = ("publish", "--run-dir", str(run), "--split", str(split), "--out", str(tmp_path / "out"))
    code, err = _run(capsys, *argv)
    assert code == 2 and err.startswith("error: ") and message in err and str(tmp_path) in err, err
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_file_that_is_not_sentencepiece_is_named(tiny_checkpoint, tmp_path, capsys) -> None:
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint, broken)
    (broken / "tokenizer.model").write_bytes(b"garbage\x00\x01")
    code, err = _run(capsys, "translate", "--checkpoint", str(broken), "Hello")
    assert code == 2 and err.startswith(f"error: {broken / 'tokenizer.model'}: not a readable SentencePiece model")
    run = tmp_path / "run"  # a training run's own tokenizer (it resumes with it) was a RuntimeError 'not expected'
    run.mkdir()
    (run / "spm.model").write_bytes(b"garbage\x00\x01")
    argv = ("train", "--run-dir", str(run), "--data-dir", str(_tiny_split(tmp_path / "split")), "--max-steps", "1")
    code, err = _run(capsys, *argv, "--cache-dir", str(tmp_path / "no-cache"))
    assert code == 2 and err.startswith(f"error: {run / 'spm.model'}: not a readable SentencePiece model"), err


def test_train_refuses_a_vocabulary_sentencepiece_cannot_make(tmp_path, capsys) -> None:
    split = _tiny_split(tmp_path / "split")
    argv = ("train", "--run-dir", str(tmp_path / "run"), "--data-dir", str(split), "--cache-dir", str(tmp_path / "c"))
    for size in ("0", "-3", "2147483648"):  # SentencePiece's C++ errors, a 'not expected' line
        code, err = _run(capsys, *argv, "--vocab-size", size)
        assert (
            code == 2
            and err
            == f"error: --vocab-size must be from 5 (the 4 special pieces and a character) to 1,000,000, got {size}\n"
        ), err
        assert not (tmp_path / "run").exists()
    code, err = _run(capsys, *argv, "--vocab-size", "20")  # fewer than the corpus's characters
    assert code == 2 and err.startswith(
        "error: --vocab-size 20: too few pieces for this text: its characters and the 4 special pieces need at least "
    ), err


def test_the_current_folder_or_one_holding_it_is_never_an_output(tiny_checkpoint, tmp_path, capsys, monkeypatch):
    """`export-hf --force CKPT .` (or publish --out .) inside a model folder said 'Device or resource busy'."""
    import shutil

    here = tmp_path / "model"
    shutil.copytree(tiny_checkpoint, here)
    (here / "sub").mkdir()
    listing = sorted(here.iterdir())
    monkeypatch.chdir(here)
    teacher = str(tiny_checkpoint)  # refused before the teacher is read, before hours of training
    for argv in (
        ("export-hf", "--force", str(tiny_checkpoint), "."),
        ("publish", "--run-dir", "r", "--out", "."),
        ("import-hf", "--force", "any-folder", "--out", "."),
        ("distill", "--stages", "train,publish", "--teacher", teacher, "--out", "."),
        ("distill-long", "--stages", "train,publish", "--teacher", teacher, "--out", "."),
    ):
        code, err = _run(capsys, *argv)
        assert (
            code == 2
            and err == "error: .: is the current folder, which cannot be replaced; choose another output path\n"
        ), (argv, err)
    monkeypatch.chdir(here / "sub")
    code, err = _run(capsys, "export-hf", "--force", str(tiny_checkpoint), "..")
    assert code == 2 and err.startswith("error: ..: is a folder that holds the current folder, which cannot be")
    assert sorted(here.iterdir()) == listing  # nothing swapped away, nothing left beside it


def test_a_text_too_long_is_cut_or_named_without_api_wording(tiny_checkpoint, tmp_path, capsys) -> None:
    """'pass truncate=True' reached the command line, which has no such option."""
    long = " ".join(["hello world"] * 200)  # past the tiny model's 255 source tokens
    code, err = _run(capsys, "explain", "importance", "--checkpoint", str(tiny_checkpoint), "--top", "1", long)
    assert code == 0  # it explains the translation as cut (it refused the text its translation had cut)...
    assert "note: Truncated: the text was " in err  # ...and says so, as translate does
    code, err = _run(capsys, "heads", "--checkpoint", str(tiny_checkpoint), "--no-cache", long)
    assert code == 0 and "note: Truncated: the text was " in err
    gold = tmp_path / "gold.tsv"
    gold.write_text(f"{long}\thallo welt\t0-0\n", encoding="utf-8")
    code, err = _run(capsys, "heads", "--checkpoint", str(tiny_checkpoint), "--gold", str(gold))
    assert code == 2 and err.startswith(f"error: --gold {gold}: a pair cannot be used: The text is "), err
    assert "the limit is 255" in err and "pass truncate=True" not in err


def test_distill_compare_refuses_a_folder_that_is_not_a_checkpoint(tiny_checkpoint, tmp_path, capsys) -> None:
    folder = tmp_path / "documents"  # the side-by-side left it out without a word
    folder.mkdir()
    (folder / "notes.txt").write_text("mine", encoding="utf-8")
    for compare in (folder, folder / "notes.txt"):
        argv = ("distill", "--stages", "publish", "--teacher", str(tiny_checkpoint), "--compare", str(compare))
        code, err = _run(capsys, *argv)
        assert (
            code == 2
            and err == f"error: --compare {compare}: not a checkpoint folder (a checkpoint folder holds config.json)\n"
        ), err
