"""The sentences about the generation rules a model's folder sets (viz_app/claims_rules.py): one test per branch
of each, on made-up rules and on real traces of a tiny checkpoint decoded with the rules on (and one without)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import build_tiny_checkpoint

import core
from core.decoding.generation_rules import repeating_ids
from viz_app.claims import quote
from viz_app.claims_rules import (
    LISTED,
    Rules,
    eos_banned,
    eos_forced,
    forced_eos_rule,
    min_length_rule,
    ngram_banned,
    ngram_rule,
    rules_in_force,
    rules_of,
    step_limit,
    step_notes,
    tree_notes,
)

ALL = Rules(min_length=6, eos_banned_steps=5, no_repeat_ngram_size=3, forced_eos_id=2)
NAMES = {1: "start", 2: "end", 7: "the", 8: "cat", 9: "sat", 10: "mat"}


def name(i: int) -> str:
    return NAMES.get(i, f"id{i}")


TEXT = "the cat sat on the mat"
MAX_LEN = 8


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, core.Bundle]:
    """The tiny checkpoint with every rule on (eos banned at steps 1-3, no piece twice, eos forced at the last
    step) and the same weights without rules."""
    root = tmp_path_factory.mktemp("rules")
    ruled = build_tiny_checkpoint(root / "ruled", seed=0, min_length=4, no_repeat_ngram_size=1, forced_eos_id=2)
    plain = build_tiny_checkpoint(root / "plain", seed=0)
    return {"ruled": core.load(ruled, device="cpu"), "plain": core.load(plain, device="cpu")}


def test_rules_of_reads_the_meta_and_turns_off_what_it_cannot_read():
    meta = {"generation_rules": {"min_length": 6, "eos_banned_steps": 5, "no_repeat_ngram_size": 3, "forced_eos_id": 2}}
    assert rules_of(meta) == ALL and ALL.on
    assert rules_of({}) == Rules() and not Rules().on
    assert rules_of({"generation_rules": "min_length 6"}) == Rules()
    odd = {"min_length": True, "eos_banned_steps": -1, "no_repeat_ngram_size": 2.5, "forced_eos_id": "2"}
    assert rules_of({"generation_rules": odd}) == Rules()


def test_step_limit_is_the_calls_max_len_when_the_trace_says():
    assert step_limit({"max_len": 20}) == 20
    assert step_limit({}) is None
    assert step_limit({"max_len": "20"}) is None and step_limit({"max_len": 0}) is None


def test_each_rule_in_force_is_named_with_its_setting():
    assert min_length_rule(ALL) == "the end of sentence was not allowed before step 6 (min_length 6)"
    assert min_length_rule(Rules()) is None
    assert ngram_rule(ALL) == "no sequence of 3 pieces is written twice (no_repeat_ngram_size 3)"
    assert ngram_rule(Rules(no_repeat_ngram_size=1)) == "no piece is written twice (no_repeat_ngram_size 1)"
    assert ngram_rule(Rules()) is None
    assert (
        forced_eos_rule(ALL, 20) == "the last step a call allows ends the sentence (forced_eos_token_id, step 20 here)"
    )
    assert forced_eos_rule(ALL, None) == "the last step a call allows ends the sentence (forced_eos_token_id)"
    assert forced_eos_rule(Rules(), 20) is None


def test_the_rules_sentence_lists_the_rules_that_held_and_nothing_without_rules():
    said = rules_in_force(ALL, 20)
    assert said is not None and said.startswith("Generation rules from the model's folder")
    assert said.endswith(
        ": the end of sentence was not allowed before step 6 (min_length 6); no sequence of 3 pieces is written "
        "twice (no_repeat_ngram_size 3); the last step a call allows ends the sentence (forced_eos_token_id, step 20 "
        "here)."
    )
    only = rules_in_force(Rules(no_repeat_ngram_size=2), None)
    assert (
        only is not None
        and "min_length" not in only
        and "forced_eos" not in only
        and "(no_repeat_ngram_size 2)." in only
    )
    assert rules_in_force(Rules(), 20) is None


def test_eos_banned_is_said_at_the_steps_min_length_bans_it():
    assert eos_banned(ALL, 0) == (
        "The end of sentence was not allowed at this step (min_length 6: allowed from step 6 on); its probability "
        "here is set to 0, the other pieces keep the model's own (so the candidates add up to less than 100%)."
    )
    assert eos_banned(ALL, 4) is not None
    assert eos_banned(ALL, 5) is None and eos_banned(Rules(), 0) is None


def test_ngram_banned_names_each_banned_piece_and_what_it_would_repeat():
    # decoder inputs <s> the cat sat the cat: "the cat sat" is written, so after "the cat", "sat" is banned
    inputs = [1, 7, 8, 9, 7, 8]
    assert repeating_ids(inputs, 3) == [9]
    assert ngram_banned(ALL, inputs, name) == (
        "“sat” was not allowed at this step: “the” “cat” “sat” is already written (no_repeat_ngram_size 3); its "
        "probability is set to 0."
    )
    assert ngram_banned(ALL, [1, 7, 8, 9], name) is None  # nothing to repeat
    assert ngram_banned(Rules(), inputs, name) is None  # the rule is off
    several = ngram_banned(Rules(no_repeat_ngram_size=2), [1, 7, 8, 7, 10, 7], name)  # after "the": "cat", "mat"
    assert several == (
        "“cat”, “mat” were not allowed at this step: after “the” each would repeat a sequence of 2 pieces already "
        "written (no_repeat_ngram_size 2); their probabilities are set to 0."
    )
    one = Rules(no_repeat_ngram_size=1)
    assert ngram_banned(one, [1], name) == (
        "“start” was not allowed at this step: it is already written (no_repeat_ngram_size 1); its probability is set "
        "to 0."
    )
    many = ngram_banned(one, list(range(1, 3 + LISTED)), name)
    assert many is not None and many.startswith("“start”, “end”, “id3”, “id4”, “id5” and 2 more were not allowed")
    assert "each would repeat a piece already written (no_repeat_ngram_size 1)" in many


def test_eos_forced_is_said_at_the_calls_last_step_with_the_models_own_choice():
    said = "The end of sentence was forced at this step, the last of the 20 the call allows (forced_eos_token_id)"
    assert eos_forced(ALL, 19, 20, 2, 9, name) == said + "; the model's own first choice was “sat”."
    assert eos_forced(ALL, 19, 20, 2, 2, name) == said + "; the model's own first choice was the end of sentence too."
    assert eos_forced(ALL, 19, 20, 2, None, name) == said + "."
    assert eos_forced(ALL, 18, 20, 2, 9, name) is None  # not the last step
    assert eos_forced(ALL, 19, None, 2, 9, name) is None  # the limit is not known
    assert eos_forced(ALL, 19, 20, 9, 9, name) is None  # not eos written (a finished hypothesis goes on with eos)
    assert eos_forced(Rules(), 19, 20, 2, 9, name) is None


def test_tree_notes_say_what_acts_on_every_hypothesis():
    assert tree_notes(ALL, 0, 20, 9) == [eos_banned(ALL, 0)]
    assert tree_notes(ALL, 19, 20, 2) == [eos_forced(ALL, 19, 20, 2, None, name)]
    assert tree_notes(ALL, 10, 20, 9) == [] and tree_notes(Rules(), 0, 20, 2) == []


def _notes(out: core.Translation) -> list[list[str]]:
    return [step_notes(out.trace, t, out.trace.piece) for t in range(len(out.steps))]


def test_step_notes_agree_with_the_run(bundles):
    bundle = bundles["ruled"]
    out = bundle.translate(TEXT, max_len=MAX_LEN)
    ids, top = out.trace["output.ids"], out.trace["output.top_ids"]
    notes = _notes(out)
    eos = bundle.config.eos_id
    for t in range(3):  # min_length 4: eos banned at steps 1-3 (0-based 0-2), and not among the alternatives
        assert notes[t][0].startswith("The end of sentence was not allowed at this step (min_length 4")
        assert eos not in top[t]
    assert not any("min_length" in n for row in notes[3:] for n in row)
    for t in range(1, len(ids)):  # no_repeat_ngram_size 1: every piece written so far (the start too) is named
        written = [int(i) for i in out.trace["ids.tgt"][: t + 1]]
        banned = next(n for n in notes[t] if "no_repeat_ngram_size 1" in n)
        assert all(quote(out.trace.piece(i)) in banned for i in dict.fromkeys(written[:LISTED]))
    assert len(ids) == MAX_LEN and int(ids[-1]) == eos  # this run reaches the limit: eos forced there
    forced = notes[-1][-1]
    assert forced.startswith(f"The end of sentence was forced at this step, the last of the {MAX_LEN}")
    own = int(top[-1][0])
    assert forced.endswith(f"{quote(out.trace.piece(own))}." if own != eos else "the end of sentence too.")
    assert not any("forced" in n for row in notes[:-1] for n in row)


def test_a_model_without_rules_says_nothing(bundles):
    out = bundles["plain"].translate(TEXT, max_len=MAX_LEN)
    assert "generation_rules" not in out.trace.meta
    assert rules_in_force(rules_of(out.trace.meta), step_limit(out.trace.meta)) is None
    assert all(notes == [] for notes in _notes(out))


def test_a_saved_and_a_recorded_again_trace_say_the_same(bundles, tmp_path: Path):
    """Export / replay keeps the rules and the call's limit (meta), so a replayed trace says the same sentences;
    so does ``record_more``'s teacher-forced pass (the decoding's limit, not its own)."""
    bundle = bundles["ruled"]
    for beam in (1, 3):
        out = bundle.translate(TEXT, max_len=MAX_LEN, beam_size=beam)
        for path in (tmp_path / f"b{beam}.npz", tmp_path / f"b{beam}.json"):
            saved = core.Translation(core.Trace.load(out.trace.save(path)))
            assert saved.trace.meta["generation_rules"] == out.trace.meta["generation_rules"]
            assert _notes(saved) == _notes(out)
        assert _notes(bundle.record_more(out)) == _notes(out)
    tree = bundle.beam_tree(TEXT, beam_size=3, max_len=MAX_LEN)
    assert step_limit(tree.meta) == MAX_LEN and rules_of(tree.meta) == rules_of(out.trace.meta)


def test_a_trace_whose_limit_is_not_a_number_is_refused(bundles, tmp_path: Path):
    out = bundles["ruled"].translate(TEXT, max_len=MAX_LEN)
    path = out.trace.save(tmp_path / "t.json")
    text = path.read_text()
    path.write_text(text.replace('"max_len": 8', '"max_len": "8"'))
    with pytest.raises(ValueError, match="max_len"):
        core.Trace.load(path)
    assert np.array_equal(core.Trace.load(out.trace.save(tmp_path / "ok.json"))["output.ids"], out.trace["output.ids"])


def test_the_encoder_ngram_and_repetition_rules_are_said_when_they_held():
    held = {"encoder_no_repeat_ngram_size": 2, "repetition_penalty": 1.3}
    rules = rules_of({"generation_rules": held})
    assert rules == Rules(encoder_no_repeat_ngram_size=2, repetition_penalty=1.3) and rules.on
    said = rules_in_force(rules, 20)
    assert (
        said is not None and "no 2 pieces in a row of the source are written (encoder_no_repeat_ngram_size 2)" in said
    )
    assert "the start token and the pieces written) is made less likely (repetition_penalty 1.3" in said
    assert "more likely (repetition_penalty 0.8" in str(rules_in_force(Rules(repetition_penalty=0.8), None))
    assert "no piece of the source is written" in str(rules_in_force(Rules(encoder_no_repeat_ngram_size=1), None))
    for odd in ({"repetition_penalty": -1}, {"repetition_penalty": "1.3"}, {"encoder_no_repeat_ngram_size": 1.5}):
        assert rules_of({"generation_rules": odd}) == Rules() and not rules_of({"generation_rules": odd}).on
    banned_eos = eos_banned(Rules(min_length=3, eos_banned_steps=2, repetition_penalty=1.3), 0)
    assert banned_eos is not None and "keep those the repetition penalty left" in banned_eos
    assert "keep the model's own" in str(eos_banned(Rules(min_length=3, eos_banned_steps=2), 0))
