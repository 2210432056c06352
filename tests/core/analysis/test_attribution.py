"""Attribution: integrated gradients against a closed form, completeness on the model, gradient x input."""

import numpy as np
import pytest
import torch

import core
from core import InputError, Recorder
from core.analysis.attribution import attribute, integrated_gradients, spearman
from core.recording.call import Call


def test_integrated_gradients_of_a_linear_function_is_gradient_times_input():
    w = torch.tensor([[0.5, -2.0], [3.0, 0.25]])
    x, base = torch.tensor([[1.0, 2.0], [-1.0, 4.0]]), torch.zeros(2, 2)
    ig = integrated_gradients(lambda p: (p * w).sum(dim=(1, 2)), x, base, steps=1)
    torch.testing.assert_close(ig.attributions, w * x)  # exact for a linear function, even with one step
    assert ig.delta == pytest.approx(0.0, abs=1e-6)
    assert ig.f_input == pytest.approx(float((x * w).sum())) and ig.f_baseline == 0.0


def test_integrated_gradients_of_a_quadratic_converges():
    x, base = torch.tensor([1.0, -2.0, 3.0]), torch.zeros(3)
    ig = integrated_gradients(lambda p: (p**2).sum(-1), x, base, steps=64)
    torch.testing.assert_close(ig.attributions, x**2, atol=1e-3, rtol=1e-3)  # ∫ 2αx·x dα = x²
    assert abs(ig.delta) < 1e-2
    # the delta is what the sum misses of f(x) - f(baseline): one midpoint of x³ gives 3/4 of it (15 of 20)
    coarse = integrated_gradients(lambda p: (p**3).sum(-1), x, base, steps=1)
    assert (coarse.f_input, coarse.f_baseline) == (20.0, 0.0)
    assert float(coarse.attributions.sum()) == pytest.approx(15.0) and coarse.delta == pytest.approx(-5.0)
    with pytest.raises(ValueError, match="steps"):
        integrated_gradients(lambda p: p.sum(-1), x, base, steps=0)


@pytest.fixture(scope="module")
def bundle(tiny_checkpoint):
    return core.load(tiny_checkpoint, device="cpu")


def test_attribution_on_the_model(bundle):
    out = bundle.translate("The cat sleeps on the warm chair.", max_len=6)
    src_ids = [int(i) for i in out.trace["ids.src"]]
    out_ids = [int(i) for i in out.trace["output.ids"]]
    position = min(2, len(out_ids) - 1)
    a = attribute(bundle, src_ids, out_ids, position, steps=48)
    assert a.source_ig.shape == (len(src_ids),) and a.target_ig.shape == (position + 1,)
    assert a.logprob == pytest.approx(float(np.log(out.trace["output.probs"][position])), abs=1e-4)
    # completeness: the attributions add up to f(input) - f(baseline): the delta is small with enough steps
    assert abs(a.ig_delta) < 0.05, a.ig_delta
    assert a.baseline == "position"
    # f(input) is the word's log p; the attributions share out f(input) - f(baseline), missing it by the delta
    assert a.f_input == pytest.approx(a.logprob, abs=1e-4) and a.difference is not None
    total = float(a.source_ig.sum() + a.target_ig.sum())
    assert total - a.difference == pytest.approx(a.ig_delta, abs=1e-3)
    assert a.relative_delta == pytest.approx(abs(a.ig_delta) / abs(a.difference))
    # the all-zero baseline meets LayerNorm's jump at 0: the delta says so (the integral misses it)
    z = attribute(bundle, src_ids, out_ids, position, steps=48, baseline="zero")
    assert abs(z.ig_delta) > abs(a.ig_delta)
    assert np.abs(a.source_grad_x_input).sum() > 0 and np.isfinite(a.source_grad_x_input).all()
    # gradient x input is the gradient at the input times the input: check one token against autograd directly
    src = torch.tensor([src_ids])
    tgt = torch.tensor([[bundle.config.bos_id] + out_ids[:position]])
    rec = Recorder(bundle.model, record=False, keep_grad=("embed.src",))
    with torch.enable_grad():
        logits = bundle.model(src, tgt, call=Call(recorder=rec), src_keep=torch.ones_like(src, dtype=torch.bool))
        torch.log_softmax(logits[0, position], -1)[out_ids[position]].backward()
    leaf = rec.leaf("embed.src")
    np.testing.assert_allclose(a.source_grad_x_input, (leaf.grad[0] * leaf.detach()[0]).sum(-1).numpy(), atol=1e-5)
    with pytest.raises(InputError, match="position"):
        attribute(bundle, src_ids, out_ids, 99)


def test_spearman():
    assert spearman(np.array([1.0, 2, 3, 4]), np.array([10.0, 20, 30, 40])) == pytest.approx(1.0)
    assert spearman(np.array([1.0, 2, 3, 4]), np.array([4.0, 3, 2, 1])) == pytest.approx(-1.0)
    assert spearman(np.array([1.0, 2, 2, 3]), np.array([1.0, 2, 3, 4])) == pytest.approx(0.9486833, abs=1e-6)
    assert np.isnan(spearman(np.ones(3), np.arange(3.0)))


def test_with_the_causal_mask_off_every_decoder_input_is_attributed(bundle):
    opts = core.InferenceOptions(causal_mask=False)
    out = bundle.translate("The cat sleeps on the warm chair.", opts, max_len=6)
    src_ids = [int(i) for i in out.trace["ids.src"]]
    out_ids = [int(i) for i in out.trace["output.ids"]]
    a = attribute(bundle, src_ids, out_ids, 0, steps=8, options=opts)
    assert a.target_ig.shape == (len(out_ids),)  # later inputs can change position 0 now
    assert np.abs(a.target_grad_x_input[1:]).sum() > 0
