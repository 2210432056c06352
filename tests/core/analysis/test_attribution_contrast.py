"""Contrastive attribution (why y_t and not c): linear in the two plain attributions, complete, the gradient a
finite difference confirms, and a clear InputError for an alternative that is not one other piece."""

import numpy as np
import pytest
import torch

import core
from core import InputError, Recorder
from core.analysis.attribution import attribute, contrast_id
from core.recording.call import Call
from core.recording.interventions import Patch

TEXT = "The cat sleeps on the warm chair."
POSITION = 2


@pytest.fixture(scope="module")
def bundle(tiny_checkpoint):
    return core.load(tiny_checkpoint, device="cpu")


@pytest.fixture(scope="module")
def ids(bundle):
    out = bundle.translate(TEXT, max_len=6)
    return [int(i) for i in out.trace["ids.src"]], [int(i) for i in out.trace["output.ids"]]


@pytest.fixture(scope="module")
def other(bundle, ids):
    """The alternative piece: '▁warm', a word that encodes to one piece of the tiny vocabulary."""
    c = contrast_id(bundle, "warm", token_id=ids[1][POSITION])
    assert bundle.tokenizer.piece(c) == "\u2581warm"
    return c


def test_logit_diff_is_the_difference_of_the_two_plain_attributions(bundle, ids, other):
    src_ids, out_ids = ids
    contrastive = attribute(bundle, src_ids, out_ids, POSITION, steps=16, contrast="warm")
    plain_y = attribute(bundle, src_ids, out_ids, POSITION, steps=16)
    forced_c = out_ids[:POSITION] + [other] + out_ids[POSITION + 1 :]  # same prefix (causal mask on), c at t
    plain_c = attribute(bundle, src_ids, forced_c, POSITION, steps=16)
    assert contrastive.contrast_id == other and contrastive.contrast_kind == "logit_diff"
    assert contrastive.explained == "log p(y_t) - log p(c)" and plain_y.explained == "log p(y_t)"
    assert contrastive.logprob == pytest.approx(plain_y.logprob, abs=1e-6)
    assert contrastive.contrast_logprob == pytest.approx(plain_c.logprob, abs=1e-6)
    assert contrastive.f_input == pytest.approx(plain_y.logprob - plain_c.logprob, abs=1e-5)
    assert contrastive.f_baseline == pytest.approx(plain_y.f_baseline - plain_c.f_baseline, abs=1e-5)
    # gradient x input and integrated gradients (same baseline, same steps) are linear in f
    for name in ("source_grad_x_input", "target_grad_x_input", "source_ig", "target_ig"):
        expected = getattr(plain_y, name) - getattr(plain_c, name)
        np.testing.assert_allclose(getattr(contrastive, name), expected, atol=2e-5, err_msg=name)
    assert np.abs(contrastive.source_ig).sum() > 0


def test_prob_diff_gradient_is_the_chain_rule_of_the_two_log_probabilities(bundle, ids, other):
    src_ids, out_ids = ids
    a = attribute(bundle, src_ids, out_ids, POSITION, steps=8, contrast=other, contrast_kind="prob_diff")
    plain_y = attribute(bundle, src_ids, out_ids, POSITION, steps=8)
    plain_c = attribute(bundle, src_ids, out_ids[:POSITION] + [other], POSITION, steps=8)
    p_y, p_c = np.exp(plain_y.logprob), np.exp(plain_c.logprob)
    assert a.explained == "p(y_t) - p(c)" and a.f_input == pytest.approx(p_y - p_c, abs=1e-6)
    # d p = p d log p: gradient x input of p(y) - p(c) weighs each plain one by its probability
    for name in ("source_grad_x_input", "target_grad_x_input"):
        expected = p_y * getattr(plain_y, name) - p_c * getattr(plain_c, name)
        np.testing.assert_allclose(getattr(a, name), expected, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("kind, tolerance", [("logit_diff", 0.01), ("prob_diff", 1e-3)])
def test_integrated_gradients_are_complete_within_the_tolerance(bundle, ids, kind, tolerance):
    """48 steps: the attributions add up to f(input) - f(baseline) within 0.01 in log units (logit_diff) and
    within 0.001 in probability (prob_diff) on the tiny model."""
    src_ids, out_ids = ids
    a = attribute(bundle, src_ids, out_ids, POSITION, steps=48, contrast="warm", contrast_kind=kind)
    total = float(a.source_ig.sum() + a.target_ig.sum())
    assert a.difference is not None and total - a.difference == pytest.approx(a.ig_delta, abs=1e-5)
    assert abs(a.ig_delta) < tolerance, a.ig_delta


def test_gradient_x_input_matches_a_finite_difference(bundle, ids, other):
    """gradient x input at token j is the derivative of f = log p(y_t) - log p(c) along that token's own embedding:
    f with x_j scaled by 1 ± eps, central difference / 2 eps."""
    src_ids, out_ids = ids
    a = attribute(bundle, src_ids, out_ids, POSITION, steps=1, contrast=other)
    model, y = bundle.model, out_ids[POSITION]
    src = torch.tensor([src_ids])
    tgt = torch.tensor([[bundle.config.bos_id] + out_ids[:POSITION]])
    keep = torch.ones_like(src, dtype=torch.bool)
    rec = Recorder(model, record=False, keep_grad=("embed.src", "embed.tgt"))  # the layers' inputs, as leaves
    with torch.enable_grad():
        model(src, tgt, call=Call(recorder=rec), src_keep=keep)
    x_src, x_tgt = rec.leaf("embed.src").detach()[0], rec.leaf("embed.tgt").detach()[0]  # (Ts, D), (t + 1, D)

    def f(site: str, value: torch.Tensor) -> float:
        patched = Recorder(model, record=False, interventions=[Patch(site, value)])
        with torch.no_grad():
            logp = torch.log_softmax(model(src, tgt, call=Call(recorder=patched), src_keep=keep)[0, POSITION], -1)
        return float(logp[y].double() - logp[other].double())

    assert f("embed.src", x_src) == pytest.approx(a.f_input, abs=1e-5)
    eps = 1e-2
    for site, x, gxi in (("embed.src", x_src, a.source_grad_x_input), ("embed.tgt", x_tgt, a.target_grad_x_input)):
        numeric = []
        for j in range(x.shape[0]):
            up, down = x.clone(), x.clone()
            up[j] *= 1 + eps
            down[j] *= 1 - eps
            numeric.append((f(site, up) - f(site, down)) / (2 * eps))
        # values of 0.003-0.09 here; float32 and the eps^2 term leave about 3e-4
        np.testing.assert_allclose(numeric, gxi, atol=5e-4, err_msg=site)


@pytest.mark.parametrize(
    "alternative, message",
    [
        ("gato", "the alternative 'gato' must be one piece of the target vocabulary; it is 4 ('▁', 'g', 'at', 'o')"),
        ("€", "it is 2 ('▁', '<unk>')"),
        (" ", "the alternative is empty"),
        ("\u2581", "the alternative '\u2581' encodes to no piece"),
        (3, "the alternative 3 is the unknown piece '<unk>'"),
        (120, "the alternative piece must be an id from 0 to 119, got 120"),
        (-1, "must be an id from 0 to 119, got -1"),
    ],
)
def test_a_bad_alternative_says_what_is_wrong(bundle, ids, alternative, message):
    src_ids, out_ids = ids
    with pytest.raises(InputError) as err:
        attribute(bundle, src_ids, out_ids, POSITION, contrast=alternative)
    assert message in str(err.value)


def test_the_output_token_itself_is_no_alternative(bundle, ids):
    src_ids, out_ids = ids
    with pytest.raises(InputError, match="is the output token itself: choose another piece"):
        attribute(bundle, src_ids, out_ids, POSITION, contrast=out_ids[POSITION])
    with pytest.raises(InputError, match="contrast_kind must be one of logit_diff, prob_diff, got 'ratio'"):
        attribute(bundle, src_ids, out_ids, POSITION, contrast="warm", contrast_kind="ratio")  # type: ignore[arg-type]


def test_a_trace_holds_the_plain_and_the_contrastive_attribution_of_a_position(bundle, ids, other):
    from core.analysis.attribution import Attribution

    src_ids, out_ids = ids
    plain = attribute(bundle, src_ids, out_ids, 1, steps=4)
    contrast = attribute(bundle, src_ids, out_ids, 1, steps=4, contrast=other)
    arrays, details = plain.to_arrays()
    more, more_details = contrast.to_arrays()
    out = bundle.translate(TEXT, max_len=6)
    saved = core.Trace.load(out.trace.with_analysis({**arrays, **more}, {**details, **more_details}).to_json().encode())
    back_plain, back_contrast = Attribution.from_trace(saved, 1), Attribution.from_trace(saved, 1, contrast=True)
    assert back_plain is not None and back_plain.contrast_id is None
    assert back_contrast is not None and back_contrast.contrast_id == other
    np.testing.assert_allclose(back_contrast.source_ig, contrast.source_ig, atol=1e-4)
    np.testing.assert_allclose(back_plain.source_ig, plain.source_ig, atol=1e-4)
    assert Attribution.from_trace(saved, 2, contrast=True) is None
