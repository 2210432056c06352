"""Fidelity to the teacher by source length: bucketed held-out inputs, and the scores on known cases."""

from __future__ import annotations

import core
from core.distill.fidelity import BUCKETS, bucket_of, fidelity, inputs_by_length, words

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
