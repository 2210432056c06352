"""Each sentence that states an outcome, on both of its branches (viz_app/claims.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import core
from viz_app import claims


def test_what_if_marks_names_the_words_the_alternative_highlights_or_says_there_are_none():
    said = claims.what_if_marks("O velho guardeião do farol", "O antigo guardei do farol escreveu")
    assert said == (
        "the words that differ from the model's translation are highlighted in green: “antigo”, “guardei”, “escreveu”"
    )
    assert claims.what_if_marks("O velho farol", "O  velho farol") == "it has the same words as the model's translation"
    assert "“\\*a\\*”" in claims.what_if_marks("O b", "O *a*")  # model text made literal, as the page shows it


def test_first_changed_word_and_output_change():
    assert claims.first_changed_word("O velho guarda", "O velho guarda") is None
    assert claims.output_change("O velho guarda", "O velho guarda") == "the same words"
    assert claims.first_changed_word("O velho guarda do farol", "O velho guardei do") == 2
    assert (
        claims.output_change("O velho guarda", "O velho guardei") == "other words from word 3 on (“guarda” → “guardei”)"
    )
    assert claims.first_changed_word("a b", "a b c") == 2  # one is the other plus more words
    assert claims.output_change("a b", "a b c") == "other words from word 3 on (the end → “c”)"
    assert claims.output_change("a *b*", "a [c](x)") == "other words from word 2 on (“\\*b\\*” → “\\[c\\](x)”)"


@pytest.mark.parametrize(
    ("options", "as_trained", "switched", "label"),
    [
        (
            core.InferenceOptions(),
            core.InferenceOptions(),
            core.InferenceOptions(positional_encoding=False),
            "without PE",
        ),
        (
            core.InferenceOptions(encoder_pe=False),  # the sidebar's "encoder only" (the reported bug)
            core.InferenceOptions(),
            core.InferenceOptions(encoder_pe=False),
            "without PE on the encoder",
        ),
        (
            core.InferenceOptions(decoder_pe=False, causal_mask=False),
            core.InferenceOptions(causal_mask=False),  # other switches kept, positions back on
            core.InferenceOptions(decoder_pe=False, causal_mask=False),
            "without PE on the decoder",
        ),
        (
            core.InferenceOptions(positional_encoding=False),
            core.InferenceOptions(),
            core.InferenceOptions(positional_encoding=False),
            "without PE",
        ),
    ],
)
def test_pe_comparison_compares_as_trained_with_the_switched_side(options, as_trained, switched, label):
    runs = claims.pe_comparison(options)
    assert runs.as_trained == as_trained and runs.as_trained.pe_on("src") and runs.as_trained.pe_on("tgt")
    assert runs.switched == switched
    assert runs.switched_label == label


def test_maps_change_says_no_change_only_when_nothing_changed():
    a = [np.full((2, 3, 3), 1 / 3, dtype=np.float32)]
    assert claims.maps_change(a, [x.copy() for x in a]).startswith("No change")
    b = [a[0].copy()]
    b[0][1, 2] = [0.1, 0.2, 0.7]
    said = claims.maps_change(a, b)
    assert "up to 0.37" in said and "No change" not in said


def test_causal_off_says_whether_the_output_changed():
    same = claims.causal_off("O velho guarda", "O velho guarda")
    assert "the same as with the mask" in same and "still changes" not in same
    changed = claims.causal_off("O velho guarda do farol", "O velho guardei do farestou")
    assert "still changes (from word 3 on)" in changed and "the same as with the mask" not in changed


def test_order_comparison_matches_pieces_and_judges_the_set():
    pieces_a = ["▁The", "▁dog", "▁bit", "▁the", "▁man", "</s>"]
    pieces_b = ["▁The", "▁man", "▁bit", "▁the", "▁dog", "</s>"]
    rng = np.random.default_rng(0)
    mem_a = rng.normal(size=(6, 4))
    order = [0, 4, 2, 3, 1, 5]  # where each of a's pieces sits in b
    mem_b = np.empty_like(mem_a)
    mem_b[order] = mem_a
    same = claims.order_comparison(pieces_a, mem_a, pieces_b, mem_b)
    assert same is not None and same.largest_difference == 0 and claims.same_set(same)
    moved = claims.order_comparison(pieces_a, mem_a, pieces_b, mem_b + 0.5)
    assert moved is not None and moved.largest_difference == pytest.approx(0.5) and not claims.same_set(moved)
    assert claims.order_comparison(pieces_a, mem_a, pieces_a[:-1] + ["."], mem_b) is None  # not a reordering

    pair = ("The dog bit the man.", "The man bit the dog.")
    told = claims.word_order(pair, moved, same, "without PE on the encoder")
    assert "the same set of vectors" in told and "differ by up to 0.5" in told
    told = claims.word_order(pair, moved, moved, "without PE on the decoder")
    assert "still differ by up to 0.5" in told and "the same set" not in told


def test_own_choice_reads_the_models_own_ids():
    class Pieces:
        def piece(self, i: int) -> str:
            return {7: "▁guard", 9: "▁far"}[i]

    assert claims.own_choice(Pieces(), (5, 7), 1) == "▁guard"  # not the forced piece of the alternative
    assert claims.own_choice(Pieces(), (5, 7), 2) is None  # past the model's own translation


def test_switches_effect_reads_both_runs(tiny_checkpoint):
    bundle = core.load(tiny_checkpoint, device="cpu")
    text = "the cat sat"
    target = bundle.translate(text, record=core.Record(qkv=False)).text or "the"

    def run(options: core.InferenceOptions) -> core.Translation:  # the same words by construction
        return bundle.teacher_forced(text, target, options, record=core.Record(qkv=False))

    trained = run(core.InferenceOptions())
    same = run(core.InferenceOptions(padding_mask=False))  # one sentence: nothing is padded
    assert "change nothing in this run" in claims.switches_effect(trained, same, "padding mask off")
    off = run(core.InferenceOptions(ablate=frozenset({("encoder", 0, 0)})))
    said = claims.switches_effect(trained, off, "1 head ablated")
    assert "change the attention (a weight moves by up to" in said and "nothing" not in said
    assert "probabilities" in claims.switches_effect(trained, trained, "shortlist only", shortlist_only=True)


@pytest.mark.parametrize(("alpha", "rank"), [(1.0, "score ÷ length"), (0.0, "score"), (0.6, "score ÷ length^0.6")])
def test_the_beam_caption_names_the_models_own_ranking(alpha: float, rank: str) -> None:
    for policy in ("lab", "transformers"):
        assert claims.beam_rule(4, policy, alpha)[1] == rank


def test_the_beam_caption_says_how_hypotheses_finish_for_each_policy() -> None:
    lab, _ = claims.beam_rule(3, "lab", 1.0)
    hf, _ = claims.beam_rule(3, "transformers", 1.0)
    assert "3 best extensions" in lab and "finished instead and not extended" in lab and "pool" not in lab
    assert "narrows" not in lab  # every step keeps 3 again (core.decoding.beam_finish.LabFinish.width)
    assert "do not end the sentence" in hf and "pool of the 3 best finished" in hf and "narrows" not in hf


def test_a_beam_tree_records_the_policy_it_was_searched_with(tiny_checkpoint: Path) -> None:
    bundle = core.load(tiny_checkpoint, device="cpu")
    tree = bundle.beam_tree("A small test.", beam_size=3, max_len=8)
    assert tree.meta["beam"] == bundle.config.beam == "lab"


def test_bias_off_and_pe_off_only_when_the_trace_added_nothing():
    zeros, some = np.zeros((2, 3, 3)), np.zeros((2, 3, 3))
    some[1, 0, 2] = -0.5
    assert claims.bias_off("encoder", zeros) == (
        "The relative position bias is switched off for the encoder in this run: 0 was added to every score."
    )
    assert claims.bias_off("encoder", some) is None
    assert claims.pe_off("source", np.zeros((4, 8))) == (
        "Positional encoding is switched off for the source tokens in this run: zeros were added."
    )
    assert claims.pe_off("source", np.eye(4, 8)) is None


def test_the_what_if_placeholder_names_the_forced_piece_where_one_is_forced() -> None:
    assert claims.what_if_placeholder("me", "mes") == (
        "forced here: “mes” (its own choice: “me”) — pick another to see what follows"
    )
    assert claims.what_if_placeholder(None, "mes").startswith("forced here: “mes” — ")
    assert claims.what_if_placeholder("me", None) == "its own choice: “me” — pick another to see what follows"
    assert claims.what_if_placeholder(None, None) == "pick a piece to see what follows"


def test_the_causal_leak_sentence_counts_the_pieces_each_way_and_says_why() -> None:
    down = claims.causal_leak_effect([0.9, 0.8, 0.5], [0.5, 0.7, 0.5])
    assert "2 of the 3 pieces became less likely, 0 more likely" in down and "never learned to use" in down
    up = claims.causal_leak_effect([0.5, 0.5, 0.9], [0.9, 0.99, 0.9])
    assert "0 of the 3 pieces became less likely, 2 more likely" in up and "the later pieces help" in up


def test_the_empty_translation_legend_is_said_only_where_one_is_empty() -> None:
    assert claims.empty_legend(["O gato dorme.", "O cão dorme."]) is None
    assert (
        claims.empty_legend(["O gato dorme.", ""])
        == "∅: the model wrote nothing (it ended the sentence at its first step)."
    )
