"""core.fastlinear: the float16-weight kernel is used only where it changes nothing, and then equals F.linear."""
import gc

import pytest
import torch
import torch.nn.functional as F

from conftest import tiny_config
from core import InferenceOptions, Recorder, Transformer, fastlinear
from core.decoding import greedy

pytestmark = pytest.mark.skipif(not fastlinear.available(), reason="this torch build has no fbgemm fp16 kernel")


@pytest.fixture
def calls(monkeypatch):
    """Counts calls of the float16 kernel."""
    count = {"n": 0}
    kernel = fastlinear._fp16_linear

    def counting(*args):
        count["n"] += 1
        return kernel(*args)
    monkeypatch.setattr(fastlinear, "_fp16_linear", counting)
    return count


def half_valued(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 0.1).half().float()


@torch.no_grad()
def test_float16_valued_weights_use_the_kernel_and_equal_f_linear(calls):
    w, b = half_valued(96, 64), half_valued(96, seed=1)
    for rows in [(1, 64), (2, 1, 64), (4, 64)]:
        x = torch.randn(*rows)
        torch.testing.assert_close(fastlinear.linear(x, w, b), F.linear(x, w, b), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fastlinear.linear(x, w), F.linear(x, w), rtol=1e-5, atol=1e-5)
    assert calls["n"] == 6
    col_major = w.t().contiguous().t()  # the decoder's layout
    x = torch.randn(1, 64)
    torch.testing.assert_close(fastlinear.linear(x, col_major, b), F.linear(x, w, b), rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_weights_that_are_not_float16_numbers_are_never_rounded(calls):
    w = torch.randn(96, 64) * 0.1  # float32 values: float16 would change them
    x = torch.randn(1, 64)
    assert fastlinear.packed(w) is None
    assert torch.equal(fastlinear.linear(x, w), F.linear(x, w))
    assert calls["n"] == 0


@torch.no_grad()
def test_many_rows_of_a_small_matrix_stay_with_f_linear_but_a_large_matrix_does_not(calls):
    small, large = half_valued(64, 64), half_valued(fastlinear.LARGE // 64, 64)
    x = torch.randn(3, 20, 64)
    assert torch.equal(fastlinear.linear(x, small), F.linear(x, small))
    assert calls["n"] == 0
    torch.testing.assert_close(fastlinear.linear(x, large), F.linear(x, large), rtol=1e-5, atol=1e-5)
    assert calls["n"] == 1


def test_autograd_gets_f_linear(calls):
    w = torch.nn.Parameter(half_valued(8, 4))
    y = fastlinear.linear(torch.randn(1, 4), w)
    y.sum().backward()
    assert w.grad is not None and calls["n"] == 0


@torch.no_grad()
def test_a_weight_written_in_place_is_packed_again(calls):
    w, x = half_valued(32, 16), torch.randn(1, 16)
    first = fastlinear.linear(x, w)
    w.mul_(2.0)  # still float16 values
    torch.testing.assert_close(fastlinear.linear(x, w), 2 * first, rtol=1e-5, atol=1e-5)
    w.add_(torch.randn(32, 16) * 1e-3)  # no longer float16 values: back to F.linear, exactly
    assert torch.equal(fastlinear.linear(x, w), F.linear(x, w))
    assert calls["n"] == 2


def test_set_enabled_switches_the_kernel_off(calls):
    w, x = half_valued(32, 16), torch.randn(1, 16)
    previous = fastlinear.set_enabled(False)
    try:
        with torch.no_grad():
            assert torch.equal(fastlinear.linear(x, w), F.linear(x, w))
    finally:
        fastlinear.set_enabled(previous)
    assert calls["n"] == 0


def _half_model() -> Transformer:
    torch.manual_seed(3)
    model = Transformer(tiny_config(tie_output=False)).eval()
    with torch.no_grad():
        model.output.weight.mul_(8.0)  # well-separated greedy choices
        for p in model.parameters():
            p.copy_(p.half().float())  # as a float16 checkpoint loads
    return model


def test_greedy_decoding_and_its_trace_are_the_same_with_and_without_the_kernel(calls):
    model = _half_model()
    src = torch.randint(4, 64, (2, 7), generator=torch.Generator().manual_seed(0))
    keep = torch.ones_like(src, dtype=torch.bool)
    opts = InferenceOptions()
    rec_fast = Recorder()
    fast = greedy(model, src, keep, opts, 15, recorder=rec_fast)
    assert calls["n"] > 0
    previous = fastlinear.set_enabled(False)
    try:
        rec_slow = Recorder()
        slow = greedy(model, src, keep, opts, 15, recorder=rec_slow)
    finally:
        fastlinear.set_enabled(previous)
    assert torch.equal(fast.tokens, slow.tokens)
    for a, b in zip(fast.steps, slow.steps):
        torch.testing.assert_close(a.top_probs, b.top_probs, rtol=1e-4, atol=1e-6)
    assert rec_fast._weights.keys() == rec_slow._weights.keys()
    for key, chunks in rec_fast._weights.items():
        for a, b in zip(chunks, rec_slow._weights[key], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@torch.no_grad()
def test_fused_qkv_is_kept_until_a_weight_changes_and_memo_entries_die_with_the_model():
    model = _half_model()
    attn = model.decoder_layers[0].self_attn
    first = attn.fused_qkv()
    assert attn.fused_qkv()[0] is first[0]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["decoder_layers.0.self_attn.v_proj.weight"].mul_(2.0)
    model.load_state_dict(state)  # copies in place
    second = attn.fused_qkv()
    assert second[0] is not first[0]
    torch.testing.assert_close(second[0][-attn.d_model:], attn.v_proj.weight, rtol=0, atol=0)
    fastlinear.linear(torch.randn(1, attn.d_model), second[0], second[1])
    before = len(fastlinear._packed) + len(fastlinear._derived)
    del model, attn, first, second, state
    gc.collect()
    assert len(fastlinear._packed) + len(fastlinear._derived) < before


def test_models_built_under_inference_mode_are_never_memoised(calls):
    """Inference tensors keep no version counter: a reload in place must not leave stale packed copies."""
    with torch.inference_mode():
        model = _half_model()
        src = torch.randint(4, 64, (1, 6), generator=torch.Generator().manual_seed(1))
        keep = torch.ones_like(src, dtype=torch.bool)
        greedy(model, src, keep, InferenceOptions(), 8)
        state = {k: (v * 2).half().float() for k, v in model.state_dict().items()}
        model.load_state_dict(state)
        fast = greedy(model, src, keep, InferenceOptions(), 8)
        previous = fastlinear.set_enabled(False)
        try:
            slow = greedy(model, src, keep, InferenceOptions(), 8)
        finally:
            fastlinear.set_enabled(previous)
    assert torch.equal(fast.tokens, slow.tokens)
    for a, b in zip(fast.steps, slow.steps):
        torch.testing.assert_close(a.top_probs, b.top_probs, rtol=1e-4, atol=1e-6)


@torch.no_grad()
def test_packing_never_writes_into_the_weight_and_skips_non_finite_values():
    w = half_valued(16, 8)
    w[0, 0] = 60000.0  # a float16 number near the top of the range
    before = w.clone()
    assert fastlinear.packed(w) is not None and torch.equal(w, before)
    w[1, 1] = float("inf")
    assert fastlinear.packed(w) is None
    x = torch.randn(1, 8)
    assert torch.equal(fastlinear.linear(x, w), F.linear(x, w))


def test_fused_qkv_stays_differentiable_when_autograd_needs_it():
    model = Transformer(tiny_config()).train()
    attn = model.decoder_layers[0].self_attn
    weight, bias = attn.fused_qkv()
    (weight.sum() + bias.sum()).backward()
    assert attn.q_proj.weight.grad is not None and attn.v_proj.bias.grad is not None


@torch.no_grad()
def test_the_single_threaded_kernel_takes_more_rows_only_when_torch_runs_on_few_threads():
    w = half_valued(64, 64)
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert fastlinear.bind(w, None, 20)[0] is fastlinear._fp16_linear
        torch.set_num_threads(2)
        assert fastlinear.bind(w, None, 20)[0] is fastlinear._fp16_linear  # measured: still as fast on 2 threads
        torch.set_num_threads(4)
        assert fastlinear.bind(w, None, 20)[0] is F.linear  # unmeasured: MKL may spread 20 rows over the threads
        assert fastlinear.bind(w, None, 1)[0] is fastlinear._fp16_linear
    finally:
        torch.set_num_threads(previous)
