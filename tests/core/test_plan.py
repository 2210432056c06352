"""core.fast.plan: the planned decoding step (``fast=FastWeights(model)``) computes what the decoder modules compute on
the reference path (``fast=None``), and records the same."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config

import core.transformer.model
from core import FastWeights, InferenceOptions, Recorder, Transformer
from core.decoding.search import beam_search, greedy
from core.fast.plan import DecoderState, make_plan
from core.fast.weights import kernel_available
from core.recording.call import Call

needs_kernel = pytest.mark.skipif(not kernel_available(), reason="this torch build has no fbgemm fp16 kernel")


@pytest.fixture
def plan_calls(monkeypatch):
    """Counts the steps that ran on the plan (``core.fast.plan.run_layers`` as ``Transformer.decode`` calls it)."""
    count = {"n": 0}
    real = core.transformer.model.run_layers

    def counting(*args, **kwargs):
        count["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(core.transformer.model, "run_layers", counting)
    return count


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
    for b in range(trace.batch_size):
        t = trace.select(b)
        for kind in t.kinds:
            for layer in range(t.n_layers[kind]):
                out[(b, kind, layer)] = (t.attention(kind, layer), t.scores(kind, layer))
    return out


def traced(model, src, keep, opts, fast, n=12, qkv=False):
    rec = Recorder(model, qkv=qkv)
    out = greedy(model, src, keep, call=Call(options=opts, recorder=rec, fast=fast, max_len=n))
    return out, rec.freeze()


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


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "no kernel"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("opt", OPTIONS)
def test_plan_equals_module_path_tokens_probabilities_and_every_recorded_array(case, opt, kernel, plan_calls):
    if kernel and not kernel_available():
        pytest.skip("this torch build has no fbgemm fp16 kernel")
    model, (src, keep), opts = peaked(**CASES[case]), padded_batch(), OPTIONS[opt]
    fast, fast_trace = traced(model, src, keep, opts, FastWeights(model, kernel=kernel))
    assert plan_calls["n"] == fast.tokens.shape[1] - 1  # every step ran on the plan ...
    slow, slow_trace = traced(model, src, keep, opts, None)
    assert plan_calls["n"] == fast.tokens.shape[1] - 1  # ... and none of the reference path's
    assert torch.equal(fast.tokens, slow.tokens)
    tol = 1e-4 if kernel else 1e-5
    for a, b in zip(fast.steps, slow.steps, strict=True):
        torch.testing.assert_close(a.top_probs, b.top_probs, atol=tol, rtol=1e-4)
    got, want = arrays(fast_trace), arrays(slow_trace)
    assert got.keys() == want.keys() and len(want) == 3 * 6
    for key in want:
        np.testing.assert_allclose(got[key][0], want[key][0], atol=tol, err_msg=str(key))
        blocked = np.isneginf(want[key][1])
        np.testing.assert_array_equal(np.isneginf(got[key][1]), blocked, err_msg=str(key))
        np.testing.assert_allclose(got[key][1][~blocked], want[key][1][~blocked], atol=10 * tol, err_msg=str(key))
    assert fast_trace.keys() == slow_trace.keys()
    for side in ("src", "tgt"):
        np.testing.assert_array_equal(fast_trace.positional_encoding(side), slow_trace.positional_encoding(side))
    for b in range(3):
        for kind in fast_trace.kinds:
            np.testing.assert_array_equal(fast_trace.select(b).mask(kind), slow_trace.select(b).mask(kind))


@torch.no_grad()
def test_padded_untraced_steps_equal_module_path_and_decoder_key_masks_take_the_module_path(plan_calls):
    model, (src, keep) = peaked(), padded_batch()
    opts = InferenceOptions()
    fw = FastWeights(model)
    fast = greedy(model, src, keep, call=Call(options=opts, fast=fw, max_len=12))  # no recorder: SDPA on both paths
    slow = greedy(model, src, keep, call=Call(options=opts, fast=None, max_len=12))
    assert plan_calls["n"] == 12 and torch.equal(fast.tokens, slow.tokens)
    for a, b in zip(fast.steps, slow.steps, strict=True):
        torch.testing.assert_close(a.top_probs, b.top_probs, atol=1e-4, rtol=1e-4)
    memory, state = model.encode(src, keep, call=Call(options=opts, fast=fw)), DecoderState.empty(2)
    start = torch.full((3, 1), model.config.bos_id)
    model.decode(
        start,
        memory,
        keep,
        call=Call(options=opts, fast=fw),
        state=state,
        tgt_keep=torch.tensor([[True], [True], [False]]),
    )
    assert plan_calls["n"] == 12  # a mask on the decoder's own keys: the module path, which applies it


def test_padded_source_positions_get_zero_cross_attention(plan_calls):
    model, (src, keep) = peaked(), padded_batch()
    _, trace = traced(model, src, keep, InferenceOptions(), FastWeights(model))
    assert plan_calls["n"] > 0
    cross = trace.select(2).attention("cross", 1)  # (H, Tq, Ts); item 2 has 3 real source tokens
    assert np.all(cross[..., 3:] == 0.0) and np.allclose(cross.sum(-1), 1.0, atol=1e-5)
    assert np.all(np.isneginf(trace.select(2).scores("cross", 1)[..., 3:]))


def test_recorded_queries_keys_values_equal_module_path(plan_calls):
    model, (src, keep) = peaked(), padded_batch()
    _, fast = traced(model, src, keep, InferenceOptions(), FastWeights(model), qkv=True)
    assert plan_calls["n"] > 0
    _, slow = traced(model, src, keep, InferenceOptions(), None, qkv=True)
    assert [k for k in fast.keys() if k.endswith((".q", ".k", ".v"))] == [
        k for k in slow.keys() if k.endswith((".q", ".k", ".v"))
    ]
    for b in range(3):
        f, s = fast.select(b), slow.select(b)
        for kind in ("decoder", "cross"):
            for layer in range(2):
                for a, e, name in zip(f.qkv(kind, layer), s.qkv(kind, layer), "qkv", strict=True):
                    np.testing.assert_allclose(a, e, atol=1e-4, rtol=1e-4, err_msg=f"{b} {kind} {layer} {name}")
        n = f.attention("decoder", 0).shape[1]
        assert f.qkv("decoder", 0)[1].shape[1] == n  # every step's key, one per decoder input


def test_traced_and_untraced_decoding_pick_the_same_tokens():
    model, (src, keep) = peaked(seed=8), padded_batch()
    fw = FastWeights(model)
    plain = greedy(model, src, keep, call=Call(options=InferenceOptions(), fast=fw, max_len=30))
    recorded, _ = traced(model, src, keep, InferenceOptions(), fw, n=30)
    assert torch.equal(plain.tokens, recorded.tokens)
    for a, b in zip(plain.steps, recorded.steps, strict=True):
        torch.testing.assert_close(a.top_probs, b.top_probs, atol=1e-6, rtol=1e-5)  # (the encoder's SDPA vs softmax)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_search_with_the_plan_equals_module_path(seed, plan_calls, monkeypatch):
    model = peaked(seed=seed)
    src = torch.randint(4, 64, (1, 6), generator=torch.Generator().manual_seed(seed))
    keep = torch.ones_like(src, dtype=torch.bool)
    decodes = {"n": 0}
    real_decode = model.decode

    def counting_decode(*args, **kwargs):
        decodes["n"] += 1
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(model, "decode", counting_decode)
    fast = beam_search(
        model, src, keep, call=Call(options=InferenceOptions(), fast=FastWeights(model), max_len=20, beam_size=4)
    )
    assert decodes["n"] >= len(fast) > 0 and plan_calls["n"] == decodes["n"]  # every beam step ran on the plan
    planned = plan_calls["n"]
    slow = beam_search(model, src, keep, call=Call(options=InferenceOptions(), fast=None, max_len=20, beam_size=4))
    assert plan_calls["n"] == planned and decodes["n"] > planned  # the reference path: the modules
    assert fast == slow


@torch.no_grad()
def test_a_decoding_state_keeps_the_plan_for_its_rows_and_remakes_it_when_they_change(plan_calls):
    model = peaked()
    fw = FastWeights(model)
    src = torch.randint(4, 64, (1, 6), generator=torch.Generator().manual_seed(0))
    opts = InferenceOptions()
    memory = model.encode(src, call=Call(options=opts, fast=fw)).expand(4, -1, -1)
    state = DecoderState.empty(2)
    model.decode(torch.full((4, 1), model.config.bos_id), memory, None, call=Call(options=opts, fast=fw), state=state)
    rows, _, plan = state.plan
    assert rows == 4 and plan is not None and plan_calls["n"] == 1
    model.decode(torch.full((4, 1), 7), memory, None, call=Call(options=opts, fast=fw), state=state)
    assert state.plan[2] is plan and plan_calls["n"] == 2 and state.length == 2  # kept across steps
    state.reorder(torch.tensor([0, 2]), same_source=True)  # two beams finished
    model.decode(torch.full((2, 1), 9), memory[:2], None, call=Call(options=opts, fast=fw), state=state)
    assert state.plan[0] == 2 and state.plan[2] is not plan and plan_calls["n"] == 3
    reference = DecoderState.empty(2)
    model.decode(torch.full((4, 1), model.config.bos_id), memory, None, call=Call(options=opts), state=reference)
    assert reference.plan is None and plan_calls["n"] == 3  # fast=None: the module path, no plan


def test_plan_is_used_only_where_it_may_be(plan_calls):
    model = peaked()
    fw = FastWeights(model)
    with torch.no_grad():
        assert make_plan(model, fw, 1) is not None
        ssru = peaked(decoder_self="ssru")
        assert make_plan(ssru, FastWeights(ssru), 1) is not None  # SSRU decoders run on the plan too
        model.train()
        assert make_plan(model, fw, 1) is None  # dropout would be skipped
        src = torch.randint(4, 64, (1, 6), generator=torch.Generator().manual_seed(0))
        state = DecoderState.empty(2)
        memory = model.encode(src, call=Call(options=InferenceOptions()))
        model.decode(torch.ones(1, 1, dtype=torch.long), memory, None, call=Call(fast=fw), state=state)
        assert state.plan == (1, None, None) and plan_calls["n"] == 0  # asked once, refused: not asked at every step
        model.eval()
    assert make_plan(model, fw, 1) is None  # grad on: autograd must see the modules
    keep = torch.ones_like(src, dtype=torch.bool)
    r = greedy(ssru, src, keep, call=Call(options=InferenceOptions(), fast=FastWeights(ssru), max_len=5))
    assert len(r.steps) == 5 and plan_calls["n"] == 5  # every SSRU step on the plan


SSRU_CASES = {
    "post-norm": dict(decoder_self="ssru"),
    "pre-norm, swish": dict(decoder_self="ssru", norm="pre", activation="swish"),
    "Marian's (zeros start, output bias, concatenated PE)": dict(
        decoder_self="ssru", start="zeros", output_bias=True, pe_layout="concatenated"
    ),
}


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "no kernel"])
@pytest.mark.parametrize("case", SSRU_CASES)
@pytest.mark.parametrize("opt", ["defaults", "no positional encoding", "padding mask off"])
def test_ssru_plan_equals_module_path_tokens_probabilities_gates_and_every_recorded_array(
    case, opt, kernel, plan_calls
):
    if kernel and not kernel_available():
        pytest.skip("this torch build has no fbgemm fp16 kernel")
    model, (src, keep), opts = peaked(**SSRU_CASES[case]), padded_batch(), OPTIONS[opt]
    fast, fast_trace = traced(model, src, keep, opts, FastWeights(model, kernel=kernel), qkv=True)
    assert plan_calls["n"] == fast.tokens.shape[1] - 1 > 0  # every step ran on the plan
    slow, slow_trace = traced(model, src, keep, opts, None, qkv=True)
    assert torch.equal(fast.tokens, slow.tokens)
    tol = 1e-4 if kernel else 1e-5
    for a, b in zip(fast.steps, slow.steps, strict=True):
        torch.testing.assert_close(a.top_probs, b.top_probs, atol=tol, rtol=1e-4)
    assert fast_trace.keys() == slow_trace.keys() and "decoder.1.ssru.gate" in slow_trace.keys()
    for name in slow_trace.keys():
        want, got = slow_trace.arrays[name], fast_trace.arrays[name]
        if want.dtype == np.float32:
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=10 * tol, err_msg=name)  # (-inf == -inf)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)


@pytest.mark.parametrize("seed", [0, 1])
def test_ssru_beam_search_with_the_plan_equals_module_path(seed, plan_calls):
    model = peaked(seed=seed, decoder_self="ssru")
    src = torch.randint(4, 64, (1, 6), generator=torch.Generator().manual_seed(seed))
    keep = torch.ones_like(src, dtype=torch.bool)
    fast = beam_search(
        model, src, keep, call=Call(options=InferenceOptions(), fast=FastWeights(model), max_len=20, beam_size=4)
    )
    assert plan_calls["n"] > 0  # the beams' SSRU cells are reordered with the state
    planned = plan_calls["n"]
    slow = beam_search(model, src, keep, call=Call(options=InferenceOptions(), fast=None, max_len=20, beam_size=4))
    assert plan_calls["n"] == planned and fast == slow


@needs_kernel
@torch.no_grad()
def test_plan_binds_the_float16_kernel_for_few_rows_only():
    model = peaked()
    fw = FastWeights(model)
    few, many = make_plan(model, fw, 1), make_plan(model, fw, 64)
    assert few is not None and many is not None
    assert few.layers[0].ffn.inner[0] is torch.fbgemm_linear_fp16_weight  # float16-valued weights, one row: the kernel
    assert few.layers[1].self_attn.qkv.linears[0][0] is torch.fbgemm_linear_fp16_weight  # the fused Q/K/V matrix too
    assert many.layers[0].ffn.inner[0] is F.linear  # 64 rows of a small matrix: MKL
    model.decoder_layers[0].ffn.linear1.weight[0, 0] += 1e-4  # no longer a float16 number
    assert make_plan(model, FastWeights(model), 1).layers[0].ffn.inner[0] is F.linear


@pytest.mark.parametrize("path", ["plan", "reference"])
@torch.no_grad()
def test_switched_off_heads_stay_off_at_every_decoding_step(path, plan_calls):
    """Without a recorder the options' ablation still applies, step by step: the steps' probabilities are the
    teacher-forced pass's under the same options, not the unablated ones."""
    model, (src, keep) = peaked(), padded_batch()
    opts = InferenceOptions(ablate=frozenset({("decoder", 0, 1), ("cross", 1, 0), ("cross", 0, 1)}))
    fw = FastWeights(model) if path == "plan" else None
    out = greedy(model, src, keep, call=Call(options=opts, fast=fw, max_len=8))
    assert (plan_calls["n"] == 8) == (path == "plan")
    tgt = out.tokens[:, :-1]
    ablated = torch.softmax(model(src, tgt, call=Call(options=opts), src_keep=keep), -1)  # (B, T, V)
    plain = torch.softmax(model(src, tgt, src_keep=keep), -1)
    chosen = out.tokens[:, 1:]
    probs = torch.stack([s.probs for s in out.steps], dim=1)  # (B, T)
    torch.testing.assert_close(probs, ablated.gather(-1, chosen[..., None])[..., 0], atol=1e-4, rtol=1e-4)
    assert not torch.allclose(probs, plain.gather(-1, chosen[..., None])[..., 0], atol=1e-3)


@pytest.mark.parametrize("case", ["post-norm", "pre-norm, gelu, learned positions", "ssru"])
def test_plan_records_the_activations_the_module_path_records(case, plan_calls):
    """One layer function on both paths: each block's input x, the stream after each sub-layer, the layers' outputs
    and each head's output come out of the cached step as out of the modules."""
    overrides = dict(decoder_self="ssru") if case == "ssru" else CASES[case]
    model, (src, keep) = peaked(**overrides), padded_batch()

    def run(fast):
        rec = Recorder(model, qkv=True, activations=True)
        greedy(model, src, keep, call=Call(options=InferenceOptions(), recorder=rec, fast=fast, max_len=8))
        return rec.freeze()

    fast, slow = run(FastWeights(model)), run(None)
    assert plan_calls["n"] == 8  # every step on the plan
    assert fast.keys() == slow.keys()
    new = {"decoder.1.cross.x", "decoder.1.cross.out", "encoder.1.self.x", "encoder.out"}
    new |= {"decoder.0.ssru.x", "decoder.0.ssru.out"} if case == "ssru" else {"decoder.0.self.x", "decoder.0.self.out"}
    assert new <= set(slow.keys())
    for name in slow.keys():
        want, got = slow.arrays[name], fast.arrays[name]
        if want.dtype == np.float32:
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)
