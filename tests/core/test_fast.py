"""core.fast.weights.FastWeights: the float16-weight kernel is used only where it changes nothing, and then equals
F.linear;
the fast path (``fast=FastWeights(model)``) decodes and records what the reference path (``fast=None``) does."""

import functools
import gc
import weakref

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config

from core import FastWeights, InferenceOptions, Recorder, Transformer
from core.decoding.search import greedy
from core.fast import weights as fast_weights
from core.fast.weights import LARGE, SPLIT, kernel_available
from core.recording.call import Call

needs_kernel = pytest.mark.skipif(not kernel_available(), reason="this torch build has no fbgemm fp16 kernel")
OPTS = InferenceOptions()


@pytest.fixture
def calls(monkeypatch):
    """Counts calls of the float16 kernel (FastWeights.bind looks it up on torch at each bind)."""
    count = {"n": 0}
    kernel = torch.fbgemm_linear_fp16_weight

    def counting(*args):
        count["n"] += 1
        return kernel(*args)

    monkeypatch.setattr(torch, "fbgemm_linear_fp16_weight", counting)
    return count


def _is_kernel(fn) -> bool:
    return fn is torch.fbgemm_linear_fp16_weight


def _half_model(seed: int = 3, **overrides) -> Transformer:
    """A random model whose weights are float16 numbers (as a float16 checkpoint loads), with well-separated
    greedy choices. FastWeights packs only such weights."""
    torch.manual_seed(seed)
    model = Transformer(tiny_config(tie_output=False, **overrides)).eval()
    with torch.no_grad():
        model.output.weight.mul_(8.0)
        for p in model.parameters():
            p.copy_(p.half().float())
    return model


def _src(B=2, T=7, seed=0):
    src = torch.randint(4, 64, (B, T), generator=torch.Generator().manual_seed(seed))
    return src, torch.ones_like(src, dtype=torch.bool)


@needs_kernel
@torch.no_grad()
def test_float16_valued_weights_use_the_kernel_and_equal_f_linear(calls):
    model = _half_model()
    fast = FastWeights(model)
    start = calls["n"]
    linears = [model.decoder_layers[0].ffn.linear1, model.encoder_layers[1].ffn.linear2, model.output]
    n = 0
    for lin in linears:
        w, b = lin.weight, lin.bias
        for shape in [(1, w.shape[1]), (2, 1, w.shape[1]), (4, w.shape[1])]:
            x = torch.randn(*shape)
            assert _is_kernel(fast.bind(w, b, x.numel() // x.shape[-1])[0])
            torch.testing.assert_close(fast.linear(x, w, b), F.linear(x, w, b), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(fast.linear(x, w), F.linear(x, w), rtol=1e-5, atol=1e-5)
            n += 2
    x = torch.randn(w.shape[1], 3).t()  # a non-contiguous input
    torch.testing.assert_close(fast.linear(x, w), F.linear(x, w), rtol=1e-5, atol=1e-5)
    assert calls["n"] - start == n + 1


@torch.no_grad()
def test_weights_that_are_not_float16_numbers_are_never_rounded_and_the_model_is_never_changed(calls):
    torch.manual_seed(0)
    model = Transformer(tiny_config()).eval()  # float32 values: float16 would change them
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = {k: id(p) for k, p in model.named_parameters()}
    fast = FastWeights(model)
    assert calls["n"] == 0
    ffn = model.decoder_layers[0].ffn.linear1
    fn, w, b = fast.bind(ffn.weight, ffn.bias, 1)
    assert fn is F.linear and b is ffn.bias
    assert torch.equal(w, ffn.weight) and w.stride() == (1, ffn.weight.shape[0])  # a column-major copy, same values
    enc = model.encoder_layers[0].ffn.linear1
    assert fast.bind(enc.weight, enc.bias, 1)[1] is enc.weight  # the encoder's matrices: read as they are
    x = torch.randn(1, 16)
    torch.testing.assert_close(
        fast.linear(x, ffn.weight, ffn.bias), F.linear(x, ffn.weight, ffn.bias), rtol=1e-6, atol=1e-6
    )
    src, keep = _src()
    a = greedy(model, src, keep, call=Call(options=OPTS, fast=fast, max_len=10))
    b = greedy(model, src, keep, call=Call(options=OPTS, fast=None, max_len=10))
    assert torch.equal(a.tokens, b.tokens) and calls["n"] == 0
    assert {k: id(p) for k, p in model.named_parameters()} == params  # nothing rebound, re-laid-out or written
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]) and v.is_contiguous(), k
    assert model.output.weight is model.tgt_embed.weight


@needs_kernel
@torch.no_grad()
def test_one_weight_off_the_float16_grid_is_left_to_f_linear_the_others_are_packed():
    model = _half_model()
    model.decoder_layers[0].ffn.linear1.weight[0, 0] += 1e-4  # no longer a float16 number
    fast = FastWeights(model)
    off, on = model.decoder_layers[0].ffn.linear1, model.decoder_layers[0].ffn.linear2
    assert fast.bind(off.weight, off.bias, 1)[0] is F.linear
    assert _is_kernel(fast.bind(on.weight, on.bias, 1)[0])
    x = torch.randn(1, 16)
    torch.testing.assert_close(
        fast.linear(x, off.weight, off.bias), F.linear(x, off.weight, off.bias), rtol=1e-6, atol=1e-6
    )


@needs_kernel
@torch.no_grad()
def test_many_rows_of_a_small_matrix_stay_with_f_linear_but_a_large_matrix_does_not(calls):
    vocab = LARGE // 16  # an output matrix (vocab, d_model=16) of LARGE elements
    torch.manual_seed(0)
    model = Transformer(tiny_config(src_vocab_size=vocab, tgt_vocab_size=vocab)).eval()
    for p in model.parameters():
        p.copy_(p.half().float())
    fast = FastWeights(model)
    start = calls["n"]
    small, large = model.decoder_layers[0].ffn.linear1, model.output
    assert large.weight.numel() >= LARGE
    x = torch.randn(3, 20, 16)  # 60 rows
    assert fast.bind(small.weight, small.bias, 60)[0] is F.linear
    torch.testing.assert_close(
        fast.linear(x, small.weight, small.bias), F.linear(x, small.weight, small.bias), rtol=1e-6, atol=1e-6
    )
    assert calls["n"] == start
    torch.testing.assert_close(fast.linear(x, large.weight), F.linear(x, large.weight), rtol=1e-5, atol=1e-5)
    assert calls["n"] == start + 1


@needs_kernel
def test_autograd_gets_f_linear_and_the_same_gradients(calls):
    model = _half_model().train()
    fast = FastWeights(model)
    start = calls["n"]
    lin = model.decoder_layers[0].ffn.linear1
    fn, w, _ = fast.bind(lin.weight, lin.bias, 1)
    assert fn is F.linear and w is lin.weight  # the kernel has no backward: the parameter itself
    src, _ = _src()
    tgt = torch.randint(4, 64, (2, 5), generator=torch.Generator().manual_seed(1))
    grads = []
    for f in (fast, None):
        model.zero_grad()
        model(src, tgt, call=Call(fast=f)).logsumexp(-1).sum().backward()
        grads.append({k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})
    assert calls["n"] == start
    assert grads[0].keys() == grads[1].keys() and "decoder_layers.1.self_attn.q_proj.weight" in grads[0]
    for k in grads[1]:
        torch.testing.assert_close(grads[0][k], grads[1][k], rtol=1e-5, atol=1e-6)


@needs_kernel
@torch.no_grad()
def test_fast_weights_are_a_snapshot_and_say_when_they_are_stale():
    model = _half_model()
    fast = FastWeights(model)
    assert fast.is_current()
    old = model.output.weight.clone()
    src, keep = _src()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["output.weight"] = state["output.weight"] * -1.0  # still float16 numbers; other choices
    model.load_state_dict(state)  # copies in place, as a checkpoint reload or an optimizer step writes
    assert not fast.is_current()
    x = torch.randn(1, 16)
    torch.testing.assert_close(fast.linear(x, model.output.weight), F.linear(x, old), rtol=1e-5, atol=1e-5)
    fresh = FastWeights(model)
    assert fresh.is_current()
    torch.testing.assert_close(
        fresh.linear(x, model.output.weight), F.linear(x, model.output.weight), rtol=1e-5, atol=1e-5
    )
    a = greedy(model, src, keep, call=Call(options=OPTS, fast=fresh, max_len=10))
    b = greedy(model, src, keep, call=Call(options=OPTS, fast=None, max_len=10))
    assert torch.equal(a.tokens, b.tokens)


@needs_kernel
@torch.no_grad()
def test_kernel_false_never_uses_the_kernel(calls):
    model = _half_model()
    fast = FastWeights(model, kernel=False)
    assert not fast.kernel and calls["n"] == 0
    lin = model.decoder_layers[0].ffn.linear1
    assert fast.bind(lin.weight, lin.bias, 1)[0] is F.linear
    src, keep = _src()
    a = greedy(model, src, keep, call=Call(options=OPTS, fast=fast, max_len=10))
    b = greedy(model, src, keep, call=Call(options=OPTS, fast=None, max_len=10))
    assert calls["n"] == 0 and torch.equal(a.tokens, b.tokens)
    for x, y in zip(a.steps, b.steps, strict=True):
        torch.testing.assert_close(x.top_probs, y.top_probs, rtol=1e-5, atol=1e-6)


@torch.no_grad()
def test_column_major_copies_give_the_row_major_result():
    model = _half_model()
    fast = FastWeights(model, kernel=False)
    ffn = model.decoder_layers[0].ffn  # the decoder's path through FastWeights, one row and many
    x = torch.randn(3, 5, 16)
    for rows in (x, x[:1, :1]):
        expected = torch.relu(rows @ ffn.linear1.weight.contiguous().T + ffn.linear1.bias)
        expected = expected @ ffn.linear2.weight.contiguous().T + ffn.linear2.bias
        torch.testing.assert_close(ffn(rows, fast.linear), expected)


def assert_kernel_matches_reference(model, fast, src, keep, opts, calls, *, probs_atol: float) -> None:
    """Greedy with the kernel (which must be called) and without it: the same tokens, top-k probabilities and
    every Trace array (floats within tolerance, -inf == -inf; the rest exactly)."""
    rec_fast, rec_ref = Recorder(model, qkv=True), Recorder(model, qkv=True)
    start = calls["n"]
    a = greedy(model, src, keep, call=Call(options=opts, recorder=rec_fast, fast=fast, max_len=15))
    assert calls["n"] > start
    b = greedy(model, src, keep, call=Call(options=opts, recorder=rec_ref, fast=None, max_len=15))
    assert torch.equal(a.tokens, b.tokens)
    for x, y in zip(a.steps, b.steps, strict=True):
        torch.testing.assert_close(x.top_probs, y.top_probs, rtol=1e-4, atol=probs_atol)
    ta, tb = rec_fast.freeze(), rec_ref.freeze()
    assert ta.keys() == tb.keys()
    for name in tb.keys():
        want, got = tb.arrays[name], ta.arrays[name]
        if want.dtype == np.float32:
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)


@needs_kernel
@pytest.mark.parametrize(
    "opts",
    [InferenceOptions(), InferenceOptions(causal_mask=False), InferenceOptions(ablate=frozenset({("cross", 1, 0)}))],
    ids=["defaults", "causal mask off", "head ablated"],
)
def test_greedy_decoding_and_its_trace_are_the_same_with_and_without_the_kernel(calls, opts):
    model = _half_model()
    fast = FastWeights(model)
    src, keep = _src()
    keep[1, 5:] = False
    src[1, 5:] = model.config.pad_id
    assert_kernel_matches_reference(model, fast, src, keep, opts, calls, probs_atol=1e-6)


@needs_kernel
@torch.no_grad()
def test_fused_qkv_is_one_column_major_packed_matrix_and_a_snapshot():
    model = _half_model()
    fast = FastWeights(model)
    assert sorted(fast.fused_qkv) == [0, 1]
    attn = model.decoder_layers[0].self_attn
    weight, bias = fast.fused_qkv[0]
    D = attn.d_model
    assert weight.shape == (3 * D, D) and weight.stride() == (1, 3 * D)
    torch.testing.assert_close(
        weight, torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]), rtol=0, atol=0
    )
    torch.testing.assert_close(bias, torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]), rtol=0, atol=0)
    assert _is_kernel(fast.bind(weight, bias, 1)[0])
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["decoder_layers.0.self_attn.v_proj.weight"].mul_(2.0)
    model.load_state_dict(state)  # copies in place
    assert not fast.is_current()
    assert torch.equal(fast.fused_qkv[0][0][-D:], attn.v_proj.weight / 2)  # the copy is what the weights were
    again = FastWeights(model).fused_qkv[0][0]
    torch.testing.assert_close(again[-D:], attn.v_proj.weight, rtol=0, atol=0)
    assert FastWeights(_half_model(decoder_self="ssru")).fused_qkv == {}


def test_nothing_is_kept_beyond_the_model_and_its_fast_weights():
    model = _half_model()
    fast = FastWeights(model)
    refs = weakref.ref(model), weakref.ref(fast), weakref.ref(model.output.weight)
    src, keep = _src()
    greedy(model, src, keep, call=Call(options=OPTS, fast=fast, max_len=4))
    del model, fast
    gc.collect()
    assert all(r() is None for r in refs)  # no module-level cache holds them


@needs_kernel
def test_a_model_built_under_inference_mode_gets_fast_weights():
    """Inference tensors keep no version counter: FastWeights must still be made (core.load may run under
    inference mode) and decode as the reference path does."""
    with torch.inference_mode():
        model = _half_model()
        fast = FastWeights(model)
        lin = model.decoder_layers[0].ffn.linear1
        assert _is_kernel(fast.bind(lin.weight, lin.bias, 1)[0])
        src, keep = _src(B=1, T=6, seed=1)
        a = greedy(model, src, keep, call=Call(options=OPTS, fast=fast, max_len=8))
        b = greedy(model, src, keep, call=Call(options=OPTS, fast=None, max_len=8))
    assert torch.equal(a.tokens, b.tokens)
    for x, y in zip(a.steps, b.steps, strict=True):
        torch.testing.assert_close(x.top_probs, y.top_probs, rtol=1e-4, atol=1e-6)


@needs_kernel
@torch.no_grad()
def test_packing_never_writes_into_the_weight_and_skips_non_finite_values():
    model = _half_model()
    lin = model.decoder_layers[0].ffn.linear1
    lin.weight[0, 0] = 60000.0  # a float16 number near the top of the range
    before = lin.weight.clone()
    fast = FastWeights(model)
    assert torch.equal(lin.weight, before)
    assert _is_kernel(fast.bind(lin.weight, lin.bias, 1)[0])
    x = torch.randn(1, 16)
    torch.testing.assert_close(
        fast.linear(x, lin.weight, lin.bias), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-2
    )
    lin.weight[1, 1] = float("inf")
    fast = FastWeights(model)
    assert fast.bind(lin.weight, lin.bias, 1)[0] is F.linear
    torch.testing.assert_close(
        fast.linear(x, lin.weight, lin.bias), F.linear(x, lin.weight, lin.bias), rtol=1e-6, atol=1e-6
    )


@needs_kernel
@torch.no_grad()
def test_the_single_threaded_kernel_takes_more_rows_only_when_torch_runs_on_few_threads():
    model = _half_model()
    fast = FastWeights(model)
    w = model.decoder_layers[0].ffn.linear1.weight  # a small matrix
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert _is_kernel(fast.bind(w, None, 20)[0])
        torch.set_num_threads(2)
        assert _is_kernel(fast.bind(w, None, 20)[0])  # measured: still as fast on 2 threads
        torch.set_num_threads(4)
        assert fast.bind(w, None, 20)[0] is F.linear  # unmeasured: MKL may spread 20 rows over the threads
        assert _is_kernel(fast.bind(w, None, 1)[0])
    finally:
        torch.set_num_threads(previous)


def _int8_model(seed: int = 3, **overrides) -> Transformer:
    """A random model whose every matrix is integers -127..127 times one float32 scale per matrix, as Marian's int8
    models (the imported Bergamot checkpoints) load: not float16 numbers, but float16 numbers times a scale."""
    torch.manual_seed(seed)
    model = Transformer(tiny_config(tie_output=False, **overrides)).eval()
    with torch.no_grad():
        model.output.weight.mul_(8.0)
        for p in model.parameters():
            if p.dim() == 2:
                scale = torch.tensor(float(p.abs().max()) / 127, dtype=torch.float32)
                p.copy_(torch.round(p / scale) * scale)
            else:
                p.copy_(p.half().float())
    return model


@needs_kernel
@torch.no_grad()
def test_int8_numbers_times_a_scale_take_the_kernel_times_the_scale_and_equal_f_linear(calls):
    model = _int8_model(decoder_self="ssru")
    w = model.decoder_layers[0].ffn.linear1.weight
    assert not torch.equal(w.half().float(), w)  # float16 would round these weights
    fast = FastWeights(model)
    start = calls["n"]
    n = 0
    for lin in (model.decoder_layers[0].ffn.linear1, model.encoder_layers[1].self_attn.q_proj, model.output):
        fn, packed, _ = fast.bind(lin.weight, lin.bias, 1)
        assert fn is not F.linear and not _is_kernel(fn)  # the kernel, then the scale
        for shape in [(1, 16), (2, 1, 16), (4, 16)]:
            x = torch.randn(*shape)
            torch.testing.assert_close(fast.linear(x, lin.weight, lin.bias), F.linear(x, lin.weight, lin.bias))
            torch.testing.assert_close(fast.linear(x, lin.weight), F.linear(x, lin.weight))
            n += 2
    assert calls["n"] - start == n
    model.decoder_layers[0].ffn.linear2.weight[0, 0] += 1e-4  # off the grid: no scale reproduces it
    off = model.decoder_layers[0].ffn.linear2
    assert FastWeights(model).bind(off.weight, off.bias, 1)[0] is F.linear


@needs_kernel
@torch.no_grad()
def test_the_fused_ssru_matrix_keeps_each_part_s_scale_and_equals_its_parts():
    model = _int8_model(decoder_self="ssru")
    fast = FastWeights(model)
    ssru = model.decoder_layers[1].ssru
    weight, bias = fast.fused_ssru[1]
    D = ssru.W.weight.shape[0]
    assert weight.shape == (2 * D, D) and weight.stride() == (1, 2 * D)
    assert torch.equal(weight, torch.cat([ssru.W.weight, ssru.W_f.weight]))
    assert torch.equal(bias, torch.cat([torch.zeros(D), ssru.W_f.bias]))  # W has no bias: zeros change nothing
    fn = fast.bind(weight, bias, 1)[0]
    assert fn is not F.linear  # two scales (one per part): one per row
    x = torch.randn(3, D)
    torch.testing.assert_close(fast.linear(x, weight, bias), torch.cat([ssru.W(x), ssru.W_f(x)], dim=1))


@needs_kernel
@pytest.mark.parametrize("decoder_self", ["ssru", "attention"])
def test_greedy_decoding_and_its_trace_are_the_same_on_int8_weights_with_and_without_the_kernel(calls, decoder_self):
    model = _int8_model(decoder_self=decoder_self)
    fast = FastWeights(model)
    src, keep = _src()
    with torch.no_grad():
        assert_kernel_matches_reference(model, fast, src, keep, OPTS, calls, probs_atol=1e-5)


@needs_kernel
@torch.no_grad()
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("grid", ["float16", "int8 times a scale"])
@pytest.mark.parametrize("whole", [True, False])
def test_a_matrix_of_split_elements_runs_in_two_halves_and_equals_f_linear(calls, threads, grid, whole, monkeypatch):
    """A matrix of SPLIT elements or more is packed as two halves of its rows (run at once on two threads when
    torch has two; up to WHOLE_MAX elements it is packed whole too, which one thread runs in one call instead of
    two joined by a copy): its product equals F.linear's, for one row (a decoding step) and several, with and
    without a bias, on the float16 grid and on Marian's int8 grid (integers times one scale)."""
    if not whole:
        monkeypatch.setattr(fast_weights, "WHOLE_MAX", SPLIT)  # the matrix below is larger: halves only
    out, d_in = SPLIT // 64 + 3, 64  # an odd number of rows: halves of 32769 and 32770
    g = torch.Generator().manual_seed(0)
    if grid == "float16":
        weight = (torch.randn(out, d_in, generator=g) * 0.05).half().float()
    else:
        weight = torch.randint(-127, 128, (out, d_in), generator=g).float() * 0.0123
    layer = torch.nn.Linear(d_in, out)
    layer.weight.copy_(weight)
    model = Transformer(tiny_config()).eval()
    model.output = layer  # FastWeights reads the output projection like any other matrix
    fast = FastWeights(model)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    one_call = threads == 1 and whole
    try:
        fn, _, _ = fast.bind(layer.weight, layer.bias, 1)
        halves = isinstance(fn, functools.partial) and fn.func.__name__ == "_in_halves"
        assert halves != one_call  # one packed matrix (times its scale on the int8 grid), or the halves
        for rows in (1, 5):
            x = torch.randn(rows, d_in, generator=g)
            for bias in (None, layer.bias):
                start = calls["n"]
                got = fast.linear(x, layer.weight, bias)
                assert calls["n"] - start == (1 if one_call else 2)  # one kernel call per half
                torch.testing.assert_close(got, F.linear(x, layer.weight, bias), rtol=1e-5, atol=1e-5)
    finally:
        torch.set_num_threads(before)
