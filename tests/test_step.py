"""core.step: the planned decoding step computes what the decoder modules compute, and records the same."""
import contextlib

import numpy as np
import pytest
import torch

import core.model
from conftest import tiny_config
from core import InferenceOptions, Recorder, Transformer, fastlinear, step
from core.decoding import beam_search, greedy
from core.layers import DecoderState

ALL = {"encoder": 2, "decoder": 2, "cross": 2}


@pytest.fixture
def plan_calls(monkeypatch):
    """Counts the steps that ran on the plan (``core.step.run_layers`` as ``Transformer.decode`` calls it)."""
    count = {"n": 0}
    real = core.model.run_layers

    def counting(*args, **kwargs):
        count["n"] += 1
        return real(*args, **kwargs)
    monkeypatch.setattr(core.model, "run_layers", counting)
    return count


@contextlib.contextmanager
def _modules_only():
    previous = step.set_enabled(False)
    try:
        yield
    finally:
        step.set_enabled(previous)


@pytest.fixture
def module_path():
    """Run a block with the plan switched off (the module path), restoring the setting afterwards."""
    return _modules_only()


def peaked(seed=3, **overrides):
    """A random model (float16-valued weights, as checkpoints store them) with well-separated greedy choices."""
    torch.manual_seed(seed)
    m = Transformer(tiny_config(tie_output=False, **overrides)).eval()
    with torch.no_grad():
        m.output.weight.mul_(8.0)
        for p in m.parameters():
            p.copy_(p.half().float())
    return m


def padded_batch():
    g = torch.Generator().manual_seed(5)
    src = torch.randint(4, 64, (3, 7), generator=g)
    keep = torch.ones_like(src, dtype=torch.bool)
    keep[1, 5:] = False
    keep[2, 3:] = False
    src[~keep] = 0
    return src, keep


def arrays(trace):
    out = {}
    for b in range(len(trace.src_tokens)):
        t = trace.select(b)
        for kind in t.kinds:
            for layer in range(ALL[kind]):
                out[(b, kind, layer)] = (t.attention(kind, layer), t.scores(kind, layer))
    return out


def traced(model, src, keep, opts, n=12, qkv=False):
    rec = Recorder(qkv=qkv)
    out = greedy(model, src, keep, opts, n, recorder=rec)
    trace = rec.freeze(opts, [["s"] * src.shape[1]] * src.shape[0], [["t"] * out.tokens.shape[1]] * src.shape[0],
                       model.config.n_heads, ALL)
    return out, trace, rec


CASES = {
    "post-norm": {},
    "pre-norm, gelu, learned positions": dict(norm="pre", activation="gelu", positional="learned"),
    "output bias, concatenated PE": dict(output_bias=True, pe_layout="concatenated"),
}
OPTIONS = {
    "defaults": InferenceOptions(),
    "heads ablated": InferenceOptions(ablate=(("decoder", 0, 1), ("cross", 1, 0))),
    "no positional encoding": InferenceOptions(positional_encoding=False),
    "padding mask off": InferenceOptions(padding_mask=False),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("opt", OPTIONS)
def test_plan_equals_module_path_tokens_probabilities_and_every_recorded_array(case, opt, module_path, plan_calls):
    model, (src, keep), opts = peaked(**CASES[case]), padded_batch(), OPTIONS[opt]
    fast, fast_trace, _ = traced(model, src, keep, opts)
    assert plan_calls["n"] == fast.tokens.shape[1] - 1  # every step ran on the plan ...
    with module_path:
        slow, slow_trace, _ = traced(model, src, keep, opts)
    assert plan_calls["n"] == fast.tokens.shape[1] - 1  # ... and none of the module path's
    assert torch.equal(fast.tokens, slow.tokens)
    for a, b in zip(fast.steps, slow.steps):
        torch.testing.assert_close(a.top_probs, b.top_probs, atol=1e-5, rtol=1e-4)
    got, want = arrays(fast_trace), arrays(slow_trace)
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_allclose(got[key][0], want[key][0], atol=1e-5, err_msg=str(key))
        blocked = np.isneginf(want[key][1])
        np.testing.assert_array_equal(np.isneginf(got[key][1]), blocked, err_msg=str(key))
        np.testing.assert_allclose(got[key][1][~blocked], want[key][1][~blocked], atol=1e-4, err_msg=str(key))
    for side in ("src", "tgt"):
        np.testing.assert_array_equal(fast_trace.positional_encoding(side), slow_trace.positional_encoding(side))
    for kind in fast_trace.kinds:
        np.testing.assert_array_equal(fast_trace.mask(kind), slow_trace.mask(kind))


@torch.no_grad()
def test_padded_untraced_steps_equal_module_path_and_decoder_key_masks_take_the_module_path(module_path, plan_calls):
    model, (src, keep) = peaked(), padded_batch()
    opts = InferenceOptions()
    fast = greedy(model, src, keep, opts, 12)  # no recorder: the plan's explicit softmax vs the modules' SDPA
    with module_path:
        slow = greedy(model, src, keep, opts, 12)
    assert plan_calls["n"] == 12 and torch.equal(fast.tokens, slow.tokens)
    for a, b in zip(fast.steps, slow.steps):
        torch.testing.assert_close(a.top_probs, b.top_probs, atol=1e-5, rtol=1e-4)
    memory, state = model.encode(src, keep, opts), DecoderState.empty(2)
    start = torch.full((3, 1), model.config.bos_id)
    model.decode(start, memory, keep, opts, None, state, tgt_keep=torch.tensor([[True], [True], [False]]))
    assert plan_calls["n"] == 12  # a mask on the decoder's own keys: the module path, which applies it


def test_padded_source_positions_get_zero_cross_attention():
    model, (src, keep) = peaked(), padded_batch()
    _, trace, _ = traced(model, src, keep, InferenceOptions())
    cross = trace.select(2).attention("cross", 1)  # (H, Tq, Ts); item 2 has 3 real source tokens
    assert np.all(cross[..., 3:] == 0.0) and np.allclose(cross.sum(-1), 1.0, atol=1e-5)


def test_recorded_queries_keys_values_equal_module_path(module_path):
    model, (src, keep) = peaked(), padded_batch()
    _, _, fast = traced(model, src, keep, InferenceOptions(), qkv=True)
    with module_path:
        _, _, slow = traced(model, src, keep, InferenceOptions(), qkv=True)
    assert fast._q.keys() == slow._q.keys() and fast._kv.keys() == slow._kv.keys()
    for key in slow._q:
        torch.testing.assert_close(torch.cat(fast._q[key], 2), torch.cat(slow._q[key], 2), atol=1e-5, rtol=1e-5)
        for a, b in zip(fast._kv[key], slow._kv[key]):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_traced_and_untraced_decoding_pick_the_same_tokens():
    model, (src, keep) = peaked(seed=8), padded_batch()
    plain = greedy(model, src, keep, InferenceOptions(), 30)
    recorded, _, _ = traced(model, src, keep, InferenceOptions(), n=30)
    assert torch.equal(plain.tokens, recorded.tokens)
    for a, b in zip(plain.steps, recorded.steps):
        torch.testing.assert_close(a.top_probs, b.top_probs, atol=1e-6, rtol=1e-5)  # (the encoder's SDPA vs softmax)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_search_with_the_plan_equals_module_path(seed, module_path):
    model = peaked(seed=seed)
    src = torch.randint(4, 64, (1, 6), generator=torch.Generator().manual_seed(seed))
    keep = torch.ones_like(src, dtype=torch.bool)
    fast = beam_search(model, src, keep, InferenceOptions(), 20, beam_size=4)
    with module_path:
        slow = beam_search(model, src, keep, InferenceOptions(), 20, beam_size=4)
    assert fast == slow


def test_plan_is_used_only_where_it_may_be():
    model = peaked()
    with torch.no_grad():
        assert DecoderState.empty(2).step_plan(model, 1) is not None
        assert DecoderState.empty(2).step_plan(peaked(decoder_self="ssru"), 1) is None  # SSRU: module path
        model.train()
        assert DecoderState.empty(2).step_plan(model, 1) is None  # dropout would be skipped
        model.eval()
    assert DecoderState.empty(2).step_plan(model, 1) is None  # grad on: autograd must see the modules
    with _modules_only(), torch.no_grad():
        assert DecoderState.empty(2).step_plan(model, 1) is None


@torch.no_grad()
def test_plan_binds_the_float16_kernel_for_few_rows_only():
    if not fastlinear.available():
        pytest.skip("this torch build has no fbgemm fp16 kernel")
    model = peaked()
    few, many = step.make_plan(model, 1), step.make_plan(model, 64)
    assert few is not None and many is not None
    assert few.layers[0].ffn_in[0] is fastlinear._fp16_linear  # float16-valued weights, one row: the kernel
    assert many.layers[0].ffn_in[0] is torch.nn.functional.linear  # 64 rows of a small matrix: MKL
    with torch.no_grad():
        model.decoder_layers[0].ffn.linear1.weight[0, 0] += 1e-4  # no longer a float16 number
    assert step.make_plan(model, 1).layers[0].ffn_in[0] is torch.nn.functional.linear
