"""The decoder's logit lens (core.analysis.lens): its last layer is the model's own distribution at every step, on
a self-attention and an SSRU decoder and a pre-norm stack (whose final norm the lens applies); ranks and the first
layer agree with the top pieces; a recorded translation gives the same lens as the teacher-forced pass; a given
translation is read too; the shortlist is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import build_tiny_checkpoint

import core
from core.analysis.lens import lens_of, logit_lens
from core.errors import InputError

TEXT = "the cat sleeps on the mat"


@pytest.fixture(scope="module", params=["attention", "ssru", "pre-norm"])
def bundle(request, tmp_path_factory: pytest.TempPathFactory) -> core.Bundle:
    extra = {
        "attention": {},
        "ssru": {"decoder_self": "ssru", "pe_layout": "concatenated", "start": "zeros"},
        "pre-norm": {"norm": "pre"},
    }[request.param]
    return core.load(build_tiny_checkpoint(tmp_path_factory.mktemp("lens") / "tiny", seed=5, **extra))


def test_the_last_layer_is_the_models_own_distribution(bundle: core.Bundle) -> None:
    out = bundle.translate(TEXT)
    lens = logit_lens(bundle, TEXT)
    assert lens.chosen_ids == out.output_ids and not lens.given
    assert lens.n_layers == bundle.config.n_decoder_layers
    for step in out.steps:
        t = step.index
        pieces, probs = zip(*step.top_k[:5], strict=True)
        assert lens.top_pieces[-1][t] == pieces
        np.testing.assert_allclose(lens.top_probs[-1, t], probs, atol=1e-5)
        assert lens.chosen_prob[-1, t] == pytest.approx(step.prob, abs=1e-5)
    assert np.all(lens.chosen_rank[-1] == 1)


def test_ranks_and_the_first_top_layer_agree_with_the_top_pieces(bundle: core.Bundle) -> None:
    lens = logit_lens(bundle, TEXT)
    for layer in range(lens.n_layers):
        for t, piece in enumerate(lens.chosen):
            assert (lens.chosen_rank[layer, t] == 1) == (lens.top_pieces[layer][t][0] == piece)
            if lens.chosen_rank[layer, t] <= 5:
                assert lens.top_pieces[layer][t][lens.chosen_rank[layer, t] - 1] == piece
    for t in range(len(lens.chosen)):
        first = lens.first_top[t]
        assert 0 <= first < lens.n_layers and np.all(lens.chosen_rank[first:, t] == 1)
        assert first == 0 or lens.chosen_rank[first - 1, t] > 1


def test_a_recorded_translation_gives_the_same_lens(bundle: core.Bundle) -> None:
    recorded = bundle.translate(TEXT, record=core.Record(qkv=False, activations=True))
    a, b = lens_of(bundle, recorded), logit_lens(bundle, TEXT)
    np.testing.assert_allclose(a.chosen_prob, b.chosen_prob, atol=1e-5)
    assert a.top_pieces == b.top_pieces and np.array_equal(a.first_top, b.first_top)
    with pytest.raises(InputError, match="activations=True"):
        lens_of(bundle, bundle.translate(TEXT))


def test_a_given_translation_is_read_too(bundle: core.Bundle) -> None:
    lens = logit_lens(bundle, TEXT, translation="die Katze")
    assert lens.given and list(lens.chosen_ids) == bundle.encode_target("die Katze")
    assert lens.to_dict()["steps"][0]["layers"][-1]["layer"] == lens.n_layers


def test_the_shortlist_is_refused_with_its_reason() -> None:
    teacher = Path(__file__).resolve().parents[3] / "checkpoints" / "bergamot-en-pt"  # a model with a shortlist
    if not teacher.is_dir():
        pytest.skip("bergamot-en-pt is not imported (make models)")
    with pytest.raises(InputError, match="the logit lens scores the whole vocabulary"):
        logit_lens(core.load(teacher), TEXT, options=core.InferenceOptions(shortlist=True))


def test_the_lens_travels_in_a_trace_and_comes_back(bundle: core.Bundle) -> None:
    from core.analysis.lens import LogitLens

    lens = logit_lens(bundle, TEXT)
    out = bundle.translate(TEXT)
    assert LogitLens.from_trace(out.trace) is None
    saved = core.Trace.load(out.trace.with_analysis(*lens.to_arrays()).to_json().encode())
    back = LogitLens.from_trace(saved)
    assert back is not None and back.chosen == lens.chosen and back.top_pieces == lens.top_pieces
    np.testing.assert_allclose(back.chosen_prob, lens.chosen_prob, atol=1e-4)  # the JSON keeps 4 decimals
    assert np.array_equal(back.chosen_rank, lens.chosen_rank) and np.array_equal(back.first_top, lens.first_top)


def test_the_causal_mask_off_is_refused_with_its_reason(bundle: core.Bundle) -> None:
    off = core.InferenceOptions(causal_mask=False)
    with pytest.raises(InputError, match="needs the causal mask on"):
        logit_lens(bundle, TEXT, options=off)
    run = bundle.translate(TEXT, off, record=core.Record(qkv=False, activations=True))
    with pytest.raises(InputError, match="needs the causal mask on"):
        lens_of(bundle, run)


def test_rules_that_read_the_prefix_are_applied_step_by_step(tmp_path: Path) -> None:
    """A repetition penalty and a no-repeat rule change each step's distribution by the words before it: the last
    layer's lens is still decoding's own at every step."""
    ruled = core.load(build_tiny_checkpoint(tmp_path / "ruled", seed=5, repetition_penalty=1.5, no_repeat_ngram_size=2))
    out = ruled.translate(TEXT)
    lens = logit_lens(ruled, TEXT)
    for step in out.steps:
        np.testing.assert_allclose(lens.top_probs[-1, step.index], [p for _, p in step.top_k[:5]], atol=1e-5)
        assert lens.chosen_prob[-1, step.index] == pytest.approx(step.prob, abs=1e-5)
