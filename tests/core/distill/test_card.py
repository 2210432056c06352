"""core.distill.card: one layout (``compose``) for both recipes' cards, and a ``Card`` missing a part refused."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from core.distill import long_card, sentence_card
from core.distill.card import Card, compose, section
from core.distill.fidelity import BUCKETS, BucketFidelity
from core.distill.long_card import Measured
from core.distill.settings import LongRecipe, SentenceRecipe
from core.errors import InputError
from core.training.train import TrainConfig


def _row(chrf: float) -> dict:
    return {"chrf": chrf, "bleu": 50.0, "identical": 0.5, "seconds": 1.5, "output_tokens": 30}


def _folders(tmp_path: Path) -> dict:
    return {
        "teacher": Path("checkpoints/bergamot-en-pt"),
        "out": tmp_path / "student",
        "split": tmp_path / "split",
        "data_dir": tmp_path / "data",
        "run_dir": tmp_path / "run",
        "stages": frozenset({"publish"}),
        "scope": "decoder",
        "reused_lr_scale": 0.3,
        "init_from": None,
        "max_pieces": 64,
        "max_ratio": 2.0,
        "train": TrainConfig(),
    }


def _sentence_markdown(tmp_path: Path) -> tuple[Card, str]:
    """The sentence recipe's card from a small made-up run: its data folder's statistics, summary and evaluation."""
    recipe = SentenceRecipe(
        **_folders(tmp_path),
        translate_minutes=0,
        max_train=0,
        fortunes=False,
        sentence_weight=3,
        dev_chrf_sentences=2,
        eval_beam=0,
        head_sweep=0,
        compare=None,
        notes=None,
        threads=1,
        progress=False,
    )
    data = recipe.data_dir
    data.mkdir(parents=True)
    (data / "sources.json").write_text(json.dumps({"sentences": 2, "phrases": 1, "heldout": 3}))
    stats = {"threads": 1, "sentences_per_s": 4.0, "output_tokens_per_s": 40.0, "source_tokens_per_s": 30.0}
    (data / "train.stats.json").write_text(json.dumps({**stats, "sentences": 3, "seconds": 6.0}))
    (data / "heldout.stats.json").write_text(json.dumps({"sentences_per_s": 5.0}))
    (data / "train.pt").write_text("um\ndois\ntrês\n")
    evaluation = {
        "n": 3,
        "switches": {"as trained": _row(97.5), "causal mask off": _row(96.0)},
        "zero_init_student": {"chrf": 3.5, "bleu": 0.0},
        "student_sentences_per_s": 7.0,
        "student_output_tokens_per_s": 70.0,
        "teacher_sentences_per_s": 8.0,
        "teacher_output_tokens_per_s": 80.0,
    }
    summary = {"steps": 4, "minutes": 0.5, "best_step": 2, "best_dev_chrf": 99.0, "epochs_completed": 1}
    sbs = {"english": ["Hello."], "teacher": ["Olá."], "student": ["Oi."]}
    card = sentence_card.build_card(
        recipe, summary=summary, evaluation=evaluation, sbs=sbs, size_mb=12.25, notes="Hand-written notes."
    )
    return card, compose(card)


def _long_markdown(tmp_path: Path) -> tuple[Card, str]:
    """The long-sentence recipe's card from a small made-up run: what publish measures and the run's files."""
    recipe = LongRecipe(
        **_folders(tmp_path),
        source_language="en",
        target_language="pt",
        sources_from=None,
        phrases=0,
        joined=0,
        dev_per_bucket=1,
        kd_weight=0.5,
        teacher_max_tokens=0,
        eval_max_tokens=0,
        device=None,
        decoder=None,
        compare_student=None,
        per_bucket=100,
        data_seed=0,
    )
    data = recipe.data_dir
    data.mkdir(parents=True)
    (data / "test.src").write_text("One.\nTwo.\n")
    (data / "dev.src").write_text("Three.\n")
    rows = [BucketFidelity(b, 2, 91.25, 60.0, 0.0, 0, ()) for b in BUCKETS]
    switches = {"as trained": _row(92.5), "all decoder self-attention heads ablated": _row(40.0)}
    measured = Measured(
        rows=rows,
        compare_rows=[],
        switches=switches,
        side={"input": ["Hello."], "teacher": ["Olá."], "student": ["Oi."]},
        alignment="",
        size_mb=12.25,
        n_heads=8,
        has_word_list=True,
        corpus_words=0,
    )
    summary = {"steps": 4, "minutes": 0.5, "device": "cpu", "train_config": {"max_minutes": 1.0, "lr_factor": 1.0}}
    card = long_card.build_card(recipe, summary, {"ding_sentences": 2}, measured, recipe.out)
    return card, compose(card)


def _headings(markdown: str) -> list[str]:
    return re.findall(r"^## (.+)$", markdown, flags=re.MULTILINE)


def test_both_recipes_cards_come_out_of_one_layout(tmp_path: Path) -> None:
    sentences, sentences_md = _sentence_markdown(tmp_path / "sentences")
    long, long_md = _long_markdown(tmp_path / "long")
    frame = ["How it was made", "Data", "Side by side", "Teacher and licence", "Reproduce"]
    for card, markdown in ((sentences, sentences_md), (long, long_md)):
        assert markdown.startswith(f"# {card.title}\n\n") and markdown.endswith("\n") and "\n\n\n" not in markdown
        assert _headings(markdown) == list(card.headings)
        assert [h for h in card.headings if h not in dict(card.results)] == frame  # the same frame, in order
        assert card.headings[-3:] == ("Side by side", "Teacher and licence", "Reproduce")
        # the licence names the teacher's languages and folder; the commands open the last section
        assert f'{card.languages[0]}→{card.languages[1]} "tiny" model' in markdown
        assert f"see `{card.teacher}/card.md`" in markdown and "MPL-2.0" in markdown
        assert f"## Reproduce\n\n```\n{card.commands[0]}\n" in markdown
    assert [h for h, _ in sentences.results] == [
        "Training",
        "Scores: student vs teacher on the 3 held-out Ding-test English sentences",
    ]
    assert [h for h, _ in long.results] == [
        "Fidelity to the teacher by source length",
        "Held-out sentences one by one, and the switches",
    ]
    # the figures are the run's, each under its section
    assert "**12.2 MB** on disk" in sentences_md and "| as trained | 97.5 |" in sentences_md
    assert "Hand-written notes." in sentences_md.split("## Side by side")[1].split("## Teacher and licence")[0]
    assert "12.2 MB on disk" in long_md and "| 1–15 | 2 | 91.25 |" in long_md
    assert "takes chrF from 92.5 to 40.0: the student uses its self-attention" in long_md


def test_a_section_with_its_own_heading_becomes_a_results_pair() -> None:
    assert section("\n## Invented words\n\nPer 100 words.\n") == ("Invented words", "\nPer 100 words.")
    with pytest.raises(ValueError, match="starts with '## '"):
        section("Per 100 words.")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"title": ""}, "title is empty"),
        ({"made": "  \n"}, "made is empty"),
        ({"side_by_side": ""}, "side_by_side is empty"),
        ({"reproduce_note": ""}, "reproduce_note is empty"),
        ({"commands": ()}, "commands is empty"),
        ({"commands": ("python -m core distill", "")}, "commands is empty"),
        ({"languages": ("English", "")}, "languages must be the source and target"),
        ({"results": (("", "text"),)}, "results heading '' is not one line"),
        ({"results": (("## Scores", "text"),)}, "results heading '## Scores' is not one line"),
        ({"results": (("Scores", " "),)}, "results section 'Scores' is empty"),
        ({"results": (("Data", "text"),)}, "results heading 'Data' appears twice"),
        ({"results": (("Scores", "a"), ("Scores", "b"))}, "results heading 'Scores' appears twice"),
    ],
)
def test_a_card_missing_a_part_is_refused(tmp_path: Path, change: dict, message: str) -> None:
    card, _ = _long_markdown(tmp_path)
    with pytest.raises(InputError, match=re.escape(f"Card: {message}")):
        replace(card, **change)
