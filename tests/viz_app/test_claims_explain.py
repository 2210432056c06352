"""The "Why this word?" page's computed sentences: each branch of each claim."""

from __future__ import annotations

import numpy as np
import pytest

from core.analysis.attribution import Attribution
from core.analysis.rollout import concentration
from viz_app import claims_explain as ce

SRC = ["▁The", "▁cat", ".", "</s>"]
SINK = np.array([[0.2, 0.1, 0.1, 0.6], [0.1, 0.2, 0.1, 0.6], [0.15, 0.15, 0.1, 0.6]])  # </s> takes 60% of every row
WORDS = np.array([[0.9, 0.05, 0.0, 0.05], [0.05, 0.85, 0.05, 0.05], [0.1, 0.1, 0.75, 0.05]])


def test_sink_note_names_the_sink_only_when_it_dominates() -> None:
    said = ce.sink_note(concentration(SINK, (3,)), SRC)
    assert said is not None and "“\\</s\\>” holds 60% of each output row on average, more than any word" in said
    assert ce.sink_note(concentration(WORDS, (3,)), SRC) is None  # 5%: no sink
    assert ce.sink_note(concentration(SINK), SRC) is None  # no special token to blame
    two = ce.sink_note(concentration(SINK, (2, 3)), SRC)
    assert two is not None and "hold 70% of each output row on average, “\\</s\\>” most of all" in two
    sink_not_top = np.array([[0.7, 0.0, 0.0, 0.3], [0.7, 0.0, 0.0, 0.3]])
    other = ce.sink_note(concentration(sink_not_top, (3,)), SRC)
    assert other is not None and "holds 30% of each output row on average." in other


def test_rows_note_says_whether_rows_differ() -> None:
    alike = ce.rows_note(concentration(SINK))
    assert alike.startswith("The rows are nearly alike: a row differs from the average row by 3%")
    differ = ce.rows_note(concentration(WORDS))
    assert differ.startswith("The rows differ: a row differs from the average row by 5") and "alike" not in differ


def test_source_share_note_says_a_constant_share_once() -> None:
    assert "the same share, 0.75," in ce.source_share_note(np.full(5, 0.75))
    spread = ce.source_share_note(np.array([0.5, 0.75]))
    assert "draw 0.50–0.75 of their content" in spread and "same" not in spread


def test_colour_note_quotes_the_range_and_what_was_set_aside() -> None:
    said = ce.colour_note(0.016, 0.252, ["</s>"])
    assert said.startswith("Colours run from 0.016 (lightest) to 0.252 (darkest), the smallest and largest share drawn")
    assert "(“\\</s\\>” set aside, each row renormalised over the other tokens)" in said
    assert ce.colour_note(0.0, 0.5, []).endswith("(every source token).")


def _attribution(logprob: float, f_baseline: float | None, delta: float, steps: int = 32) -> Attribution:
    """An attribution whose source attributions add up to the difference plus ``delta``."""
    f_input = None if f_baseline is None else logprob
    diff = 0.0 if f_baseline is None else logprob - f_baseline
    return Attribution(
        position=0,
        token_id=5,
        logprob=logprob,
        source_grad_x_input=np.zeros(2),
        target_grad_x_input=np.zeros(1),
        source_ig=np.array([diff + delta, 0.0]),
        target_ig=np.zeros(1),
        ig_delta=delta,
        ig_steps=steps,
        baseline="position",
        f_input=f_input,
        f_baseline=f_baseline,
    )


def test_logp_text_keeps_a_certain_word_from_reading_zero() -> None:
    assert ce.logp_text(-3e-6) == "log p = -3.0e-06 (p = 0.999997)"
    assert ce.logp_text(-0.2883) == "log p = -0.2883 (p = 0.7495)"


def test_certainty_note_only_for_a_certain_word() -> None:
    certain = ce.certainty_note(_attribution(-1e-5, -22.5, 0.45))
    assert certain is not None and "p = 0.999990" in certain and "f(input) − f(baseline) = +22.5000" in certain
    assert ce.certainty_note(_attribution(-0.29, -7.9, 0.1)) is None
    old = ce.certainty_note(_attribution(-1e-5, None, 0.45))  # a trace saved before f(baseline) was kept
    assert old is not None and "not log p itself" in old


def test_ig_sum_line_shows_both_ends_and_their_difference() -> None:
    line = ce.ig_sum_line(_attribution(-1e-5, -22.5, 0.4585))
    assert "f(input) = -1.0e-05" in line and "f(baseline) = -22.5000" in line and "difference +22.5000" in line
    assert "add up to +22.9585: delta +0.4585 (32 steps)" in line
    assert "f(input) = -0.2883 " in ce.ig_sum_line(_attribution(-0.2883, -7.9, 0.1))
    old = ce.ig_sum_line(_attribution(-1e-5, None, 0.4585))
    assert "f(baseline) =" not in old and "delta +0.4585 is how far they miss" in old


@pytest.mark.parametrize(
    ("logprob", "f_baseline", "delta", "trusted", "said"),
    [
        (-1e-5, -22.5, 0.4585, True, "within 2.0% of it"),  # the user's case: tiny log p, large difference
        (-0.2883, -7.9153, -5.4231, False, "miss the difference by 71% of it (more than 5%)"),
        (-1e-5, -0.01, 0.2, False, "hardly differs with and without the tokens (f(input) − f(baseline) = +0.0100)"),
        (-1e-5, -0.02, 0.001, False, "is 5% of that"),
        (-1e-5, None, 0.2, False, "does not hold f(baseline)"),
    ],
)
def test_ig_trust_weighs_the_delta_against_the_difference(
    logprob: float, f_baseline: float | None, delta: float, trusted: bool, said: str
) -> None:
    ok, sentence = ce.ig_trust(_attribution(logprob, f_baseline, delta))
    assert ok is trusted and said in sentence, sentence
    if f_baseline is not None and abs(logprob - f_baseline) < ce.TINY_DIFFERENCE and delta > 0.05:
        assert f"{delta / abs(logprob - f_baseline):.1f}× that" in sentence


# ---- source or prefix? (ALTI+) ----


def test_low_share_threshold_is_the_named_percentile() -> None:
    shares = np.linspace(0.0, 1.0, 101)
    assert ce.low_share_threshold(shares) == pytest.approx(ce.LOW_SHARE_PERCENTILE / 100)


def test_low_share_note_names_the_low_words_or_says_there_are_none() -> None:
    tokens = ["▁O", "▁gato", "."]
    none = ce.low_share_note(tokens, np.array([0.9, 0.8, 0.85]), 0.7)
    assert none.startswith("No output word takes less of its content from the source than 0.70")
    one = ce.low_share_note(tokens, np.array([0.9, 0.6, 0.85]), 0.7)
    assert one.startswith("“▁gato” takes less of its content") and "it may come from the prefix alone" in one
    two = ce.low_share_note(tokens, np.array([0.5, 0.6, 0.85]), 0.7)
    assert two.startswith("“▁O”, “▁gato” take less of their content") and "they may come from the prefix" in two
    assert f"only {ce.LOW_SHARE_PERCENTILE:g}% of the words" in two


def test_sentence_share_note_places_the_sentence_among_the_builtin_ones() -> None:
    builtin = np.array([0.8, 0.85, 0.9, 0.95])
    assert "less than any of this model's translations of 4 built-in sentences (80.0%–95.0%, median 87.5%)" in (
        ce.sentence_share_note(0.7, builtin)
    )
    assert "more than any of this model's" in ce.sentence_share_note(0.99, builtin)
    within = ce.sentence_share_note(0.87, builtin)
    assert within.startswith("This translation takes 87.0% of its content from the source")
    assert "more than 2 of this model's translations of 4 built-in sentences" in within


def test_typed_share_note_compares_with_the_models_own() -> None:
    less = ce.typed_share_note(0.78, 0.94)
    assert less.startswith("Less source:") and "(16.0 points less)" in less
    assert ce.typed_share_note(0.96, 0.94).startswith("More source:")
    assert ce.typed_share_note(0.941, 0.94).startswith("About the same:")


def test_agreement_note_names_the_best_and_says_when_none_agrees() -> None:
    said = ce.agreement_note({"cross-attention": 0.6, "rollout": 0.2})
    assert "cross-attention 0.60; rollout 0.20." in said and said.endswith("cross-attention agrees best.")
    weak = ce.agreement_note({"cross-attention": 0.1, "rollout": float("nan")})
    assert "rollout undefined (a constant row)" in weak and "every ρ below 0.3" in weak
    assert ce.agreement_note({"rollout": float("nan")}).endswith("undefined (a constant row).")


def test_step_share_note_with_and_without_a_threshold() -> None:
    plain = ce.step_share_note(0.9, None)
    assert plain.startswith("Source share at this step (ALTI+): 90.0%") and "threshold" not in plain
    assert "may come from the prefix alone" in ce.step_share_note(0.6, 0.7)
    assert ce.step_share_note(0.9, 0.7).endswith("Not below the low-share threshold (0.70).")


def test_each_source_share_says_which_measure_it_is_and_how_the_others_differ() -> None:
    for shown, (name, what) in ce.SHARE_MEASURES.items():
        said = ce.share_measures_note(shown)
        assert said.startswith(f"This share is {name}: {what}.")
        others = [n for key, (n, _) in ce.SHARE_MEASURES.items() if key != shown]
        assert all(f"{n}:" in said.split("measure otherwise")[1] for n in others) and len(others) == 2


def test_lens_note() -> None:
    chosen = ["▁O", "▁gato", "</s>"]
    assert ce.lens_note(chosen, np.array([1, 0, 1]), 2) == (
        "1 piece of 3 is already the top choice before the last layer (of 2); 2 become it only there."
    )
    assert ce.lens_note(chosen, np.array([-1, 1, -1]), 2).endswith(
        "2 pieces are the top choice at no layer (forced or tied)."
    )
    assert ce.lens_note(chosen, np.array([-1, -1, -1]), 2).startswith("No layer's lens ranks")
    assert ce.lens_note(chosen, np.array([0, 1, -1]), 2) == (
        "1 piece of 3 is already the top choice before the last layer (of 2); 1 becomes it only there. 1 piece is "
        "the top choice at no layer (forced or tied)."
    )
    assert ce.lens_note(chosen, np.array([1, 1, 1]), 2) == (
        "None of the 3 pieces is the top choice before the last layer (of 2): the output layer reads each of them "
        "only from there."
    )


def test_value_zeroing_notes() -> None:
    assert ce.zeroing_alti_note(None).startswith("Value zeroing and ALTI+ cannot be compared")
    assert "closely alike (mean Spearman ρ 0.80" in ce.zeroing_alti_note(0.8)
    assert "hardly alike" in ce.zeroing_alti_note(0.1) and "loosely alike" in ce.zeroing_alti_note(0.5)
    assert ce.zeroing_attention_note("cross-attention", [None]).startswith("In cross-attention, no row has two keys")
    assert ce.zeroing_attention_note("enc", [0.5]) == (
        "In enc, value zeroing ranks the keys as the heads' mean attention does by a mean Spearman ρ of layer 1: 0.50."
    )
    assert ce.zeroing_attention_note("enc", [0.5, 0.2, None]).endswith(
        "layer 1: 0.50; layer 2: 0.20 — least alike in layer 2, where attention is the weakest guide to what the "
        "layer uses."
    )


# ---- why this word and not that one? (contrastive attribution) ----


def _contrast(
    source_ig: list[float],
    target_ig: list[float],
    f_input: float | None,
    kind: str = "logit_diff",
    baseline: str = "position",
) -> Attribution:
    """A contrastive attribution of '▁gato' against '▁cão' with these integrated gradients (f(baseline) 0.5)."""
    return Attribution(
        position=1,
        token_id=5,
        logprob=-0.01,
        source_grad_x_input=np.zeros(len(source_ig)),
        target_grad_x_input=np.zeros(len(target_ig)),
        source_ig=np.array(source_ig),
        target_ig=np.array(target_ig),
        ig_delta=float(sum(source_ig) + sum(target_ig)) - (0.0 if f_input is None else f_input - 0.5),
        ig_steps=32,
        baseline=baseline,
        f_input=f_input,
        f_baseline=None if f_input is None else 0.5,
        contrast_id=7,
        contrast_kind=kind,
        contrast_logprob=-9.0,
    )


SRC2, PREFIX2 = ["▁The", "▁cat", "</s>"], ["<s>", "▁O"]


def test_contrast_explained_names_both_pieces_and_the_kind() -> None:
    assert ce.contrast_explained(_contrast([1.0], [], 8.98), "▁gato", "▁cão") == "log p(gato) − log p(cão)"
    assert ce.contrast_explained(_contrast([1.0], [], 0.4, "prob_diff"), "▁gato", "▁cão") == "p(gato) − p(cão)"


def test_contrast_note_names_the_pieces_that_pushed_each_way() -> None:
    a = _contrast([0.5, 8.3, -1.2], [0.1, 0.9], 8.98)
    assert ce.contrast_note(a, "▁gato", "▁cão", SRC2, PREFIX2) == (
        "“gato” rather than “cão”: the source piece “cat” pushed most towards “gato” (+8.30), the source piece "
        "“\\</s\\>” most towards “cão” (-1.20); log p(gato) − log p(cão) = 8.98."
    )
    by_prefix = ce.contrast_note(
        _contrast([0.1, 0.2, 0.0], [-0.3, 0.9], 0.41, "prob_diff"), "▁gato", "▁cão", SRC2, PREFIX2
    )
    assert "the decoder input “O” pushed most towards “gato” (+0.900), the decoder input “\\<s\\>” most towards" in (
        by_prefix
    )
    assert by_prefix.endswith("p(gato) − p(cão) = 0.410.")
    one_way = ce.contrast_note(_contrast([0.5, 2.0, 0.0], [0.0, 0.0], 3.0), "▁gato", "▁cão", SRC2, PREFIX2)
    assert "(+2.00), none towards “cão”;" in one_way
    other_way = ce.contrast_note(_contrast([-0.5, -2.0, 0.0], [0.0, 0.0], -2.0), "▁gato", "▁cão", SRC2, PREFIX2)
    assert other_way.startswith("“gato” rather than “cão”: no piece pushed towards “gato”, the source piece “cat”")
    assert other_way.endswith(
        "= -2.00. Below 0: over the whole vocabulary the model finds “cão” the likelier piece here."
    )


def test_contrast_sum_line_with_and_without_both_ends() -> None:
    line = ce.contrast_sum_line(_contrast([8.0, 0.4], [0.0], 8.98), "▁gato", "▁cão")
    assert line.startswith(
        "Integrated gradients of f = log p(gato) − log p(cão) should add up to f(input) − f(baseline)"
    )
    assert "f(input) = 8.9800 (the real tokens), f(baseline) = 0.5000 (tokens removed, positions kept)" in line
    assert line.endswith("difference +8.4800; the attributions add up to +8.4000: delta -0.0800 (32 steps).")
    zero = ce.contrast_sum_line(_contrast([1.0], [0.0], 1.5, baseline="zero"), "▁gato", "▁cão")
    assert "(all-zero embeddings)" in zero
    assert ce.contrast_sum_line(_contrast([1.0], [0.0], None), "▁gato", "▁cão") == (
        "The attributions of log p(gato) − log p(cão) add up to +1.0000: delta +1.0000 (32 steps)."
    )


def test_contrast_trust_says_a_difference_next_to_zero_as_such() -> None:
    tiny_ok, tiny = ce.contrast_trust(_contrast([0.01], [0.0], 0.52))
    assert not tiny_ok and tiny.startswith("The difference hardly changes with and without the tokens")
    assert "log p" not in tiny and "(f(input) − f(baseline) = +0.0200)" in tiny
    ok, said = ce.contrast_trust(_contrast([8.4], [0.0], 8.98))  # delta -0.08 of 8.48: within 1%
    assert ok and said == ce.ig_trust(_contrast([8.4], [0.0], 8.98))[1]
