"""KV-cached decoding equals recomputation; incremental traces equal teacher-forced ones; beam 1 = greedy."""

import numpy as np
import pytest
import torch
from conftest import tiny_config

import core.transformer.model
from core import FastWeights, InferenceOptions, Recorder, Transformer
from core.decoding.search import beam_search, greedy, iter_greedy
from core.fast.plan import DecoderState
from core.recording.call import Call
from core.transformer.state import LayerState

OPTS = InferenceOptions()


def src_batch(B=1, T=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 64, (B, T), generator=g)
    return src, torch.ones_like(src, dtype=torch.bool)


def test_kv_cache_equals_full_recomputation(peaked):
    src, keep = src_batch(B=3)
    cached = greedy(
        peaked, src, keep, call=Call(options=OPTS, max_len=40)
    )  # longer than the cache's first capacity (16)
    recomputed = greedy(peaked, src, keep, call=Call(options=OPTS, max_len=40, use_cache=False))
    assert cached.tokens.shape[1] == 41 and torch.equal(cached.tokens, recomputed.tokens)
    for a, b in zip(cached.steps, recomputed.steps, strict=True):
        torch.testing.assert_close(a.top_probs, b.top_probs, atol=1e-5, rtol=1e-4)


def test_kv_cache_buffers_grow_and_keep_earlier_views():
    """append_kv writes in place into doubling buffers: the result always equals concatenation, and a view
    handed out earlier (the recorder keeps one) never changes."""
    state, chunks, views = LayerState(), [], []
    g = torch.Generator().manual_seed(0)
    for T in [1, 1, 3, 1, 20, 1, 1, 30]:
        k, v = torch.randn(2, 4, T, 8, generator=g), torch.randn(2, 4, T, 8, generator=g)
        chunks.append((k, v))
        all_k, all_v = state.append_kv(k, v)
        torch.testing.assert_close(all_k, torch.cat([c[0] for c in chunks], dim=2), rtol=0, atol=0)
        torch.testing.assert_close(all_v, torch.cat([c[1] for c in chunks], dim=2), rtol=0, atol=0)
        views.append((all_k, all_k.clone()))
    assert state.self_len == 58
    for view, copy in views:
        assert torch.equal(view, copy)
    state.reorder(torch.tensor([1, 1]))
    kv = state.self_kv
    assert kv is not None and torch.equal(kv[0][0], kv[0][1]) and torch.equal(kv[0][0], views[-1][1][1])


def _compare_traces(inc, tf, layers=2, qkv=True):
    assert inc.kinds == tf.kinds
    for kind in inc.kinds:
        for layer in range(layers):
            np.testing.assert_allclose(inc.attention(kind, layer), tf.attention(kind, layer), atol=1e-5)
            # masked entries are -inf in both (assert_allclose treats equal infinities as equal)
            np.testing.assert_allclose(inc.scores(kind, layer), tf.scores(kind, layer), atol=1e-4)
            # before the mask: the same, except the future keys a cached step never computed (-inf there)
            seen = inc.mask(kind, "causal") if kind == "decoder" else np.ones(inc.mask(kind).shape, bool)
            raw_inc, raw_tf = inc.scores(kind, layer, masked=False), tf.scores(kind, layer, masked=False)
            np.testing.assert_allclose(raw_inc[:, seen], raw_tf[:, seen], atol=1e-4)
            assert np.all(np.isfinite(raw_tf)) and np.all(np.isfinite(raw_inc[:, seen]))
            assert np.all(np.isneginf(raw_inc[:, ~seen]))  # stitched rows: keys not yet seen padded with -inf
            if qkv:
                for a, b in zip(inc.qkv(kind, layer), tf.qkv(kind, layer), strict=True):
                    np.testing.assert_allclose(a, b, atol=1e-5)
        np.testing.assert_array_equal(inc.mask(kind), tf.mask(kind))
        np.testing.assert_array_equal(inc.mask(kind, "padding"), tf.mask(kind, "padding"))
    np.testing.assert_allclose(inc.positional_encoding("tgt"), tf.positional_encoding("tgt"), atol=1e-6)
    if inc.has_gates:
        for layer in range(layers):
            np.testing.assert_allclose(inc.gates(layer), tf.gates(layer), atol=1e-5)


@pytest.mark.parametrize("path", ["reference", "fast"])
def test_incremental_trace_equals_teacher_forced_trace(peaked, path):
    """The KV-cached decode (module path, or the step plan with FastWeights) records the same arrays as one
    teacher-forced pass over its output."""
    src, keep = src_batch(seed=3)
    fast = FastWeights(peaked) if path == "fast" else None
    rec = Recorder(peaked, qkv=True)
    result = greedy(peaked, src, keep, call=Call(options=OPTS, recorder=rec, fast=fast, max_len=10))
    n = len(result.steps)
    dec_in = result.tokens[:, :n]
    inc = rec.freeze()
    rec2 = Recorder(peaked, qkv=True)
    with torch.no_grad():
        logits = peaked(src, dec_in, call=Call(options=OPTS, recorder=rec2), src_keep=keep)
    tf = rec2.freeze()
    assert inc.attention("cross", 0).shape == (2, n, 6)
    _compare_traces(inc, tf)
    np.testing.assert_array_equal(inc["ids.tgt"], dec_in[0].numpy())
    np.testing.assert_array_equal(inc["output.ids"], result.tokens[0, 1:].numpy())
    if peaked.config.decoder_self == "attention":
        assert inc.mask("decoder", "causal")[np.triu_indices(n, 1)].sum() == 0
        assert np.all(np.isneginf(inc.scores("decoder", 0)[:, np.triu(np.ones((n, n), bool), 1)]))
    probs = torch.softmax(logits[0], -1)
    for t, step in enumerate(result.steps):
        assert int(step.token_ids[0]) == int(probs[t].argmax())
        assert float(inc["output.probs"][t]) == pytest.approx(float(probs[t].max()), abs=1e-5)


def test_traced_decoding_with_padding_still_equals_teacher_forcing():
    torch.manual_seed(2)
    m = Transformer(tiny_config(tie_output=False)).eval()
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])
    keep = src != 0
    rec = Recorder(m)
    result = greedy(m, src, keep, call=Call(options=OPTS, recorder=rec, max_len=6))
    n = len(result.steps)
    inc = rec.freeze()
    rec2 = Recorder(m)
    with torch.no_grad():  # inference, as decoding ran (padded positions skip the feed-forward)
        m(src, result.tokens[:, :n], call=Call(options=OPTS, recorder=rec2), src_keep=keep)
    tf = rec2.freeze()
    for item in (0, 1):
        _compare_traces(inc.select(item), tf.select(item), qkv=False)
    assert not inc.select(1).mask("cross")[:, 3:].any()  # padded source keys stay masked while decoding
    assert np.all(inc.select(1).attention("cross", 1)[:, :, 3:] == 0.0)
    assert inc.select(1).src_tokens[3:] == ["<pad>", "<pad>"]


def test_a_cached_step_builds_no_mask_and_no_source_mask_equals_all_real(monkeypatch):
    torch.manual_seed(5)
    model = Transformer(tiny_config()).eval()
    src = torch.randint(4, 64, (2, 7))
    keep = torch.ones_like(src, dtype=torch.bool)
    memory = model.encode(src, keep, call=Call(options=OPTS))
    tgt = torch.tensor([[1], [1]])
    expected = model.decode(tgt, memory, keep, call=Call(options=OPTS), state=DecoderState.empty(2))
    calls = []
    real = core.transformer.model.causal_mask
    monkeypatch.setattr(core.transformer.model, "causal_mask", lambda *a, **k: calls.append(a) or real(*a, **k))
    got = model.decode(tgt, memory, None, call=Call(options=OPTS), state=DecoderState.empty(2))
    assert calls == []  # one new position sees every cached key: no causal mask is built
    torch.testing.assert_close(got, expected)
    model.decode(torch.tensor([[1, 5], [1, 6]]), memory, None, call=Call(options=OPTS))
    assert len(calls) == 1  # (a two-position pass does build one: the counter counts)


def test_beam_size_one_equals_greedy(peaked):
    for seed in range(4):
        src, keep = src_batch(seed=seed)
        g = greedy(peaked, src, keep, call=Call(options=OPTS, max_len=12))
        b = beam_search(peaked, src, keep, call=Call(options=OPTS, max_len=12, beam_size=1))
        assert b == g.tokens[0, 1 : 1 + g.lengths[0]].tolist()


@pytest.mark.parametrize("seed", [0, 1, 4])
def test_beam_search_finds_a_sequence_at_least_as_likely_as_greedy(peaked, seed):
    src, keep = src_batch(seed=seed)

    @torch.no_grad()
    def logprob(seq):
        tgt = torch.tensor([[peaked.config.bos_id] + seq[:-1]])
        lp = torch.log_softmax(peaked(src, tgt, call=Call(options=OPTS), src_keep=keep)[0], -1)
        return sum(float(lp[t, i]) for t, i in enumerate(seq))

    g = greedy(peaked, src, keep, call=Call(options=OPTS, max_len=12))
    greedy_seq = g.tokens[0, 1 : 1 + g.lengths[0]].tolist()
    beam_seq = beam_search(peaked, src, keep, call=Call(options=OPTS, max_len=12, beam_size=4))
    assert len(beam_seq) == len(greedy_seq) == 12  # random weights never emit eos: equal lengths
    assert logprob(beam_seq) >= logprob(greedy_seq) - 1e-4


def test_iter_greedy_yields_one_step_at_a_time_with_topk(peaked):
    src, keep = src_batch()
    steps = iter_greedy(peaked, src, keep, call=Call(options=OPTS, max_len=5, top_k=3))
    first = next(steps)
    assert first.index == 0 and first.top_ids.shape == (1, 3)
    assert torch.all(first.top_probs[:, :-1] >= first.top_probs[:, 1:])
    assert int(first.token_ids[0]) == int(first.top_ids[0, 0])
    assert next(steps).index == 1
    assert len(list(steps)) == 3  # max_len=5 steps in all


def test_causal_mask_off_decodes_by_recomputation_and_keeps_each_steps_rows():
    torch.manual_seed(11)
    m = Transformer(tiny_config()).eval()
    src, keep = src_batch(seed=2)
    opts = InferenceOptions(causal_mask=False)
    rec = Recorder(m)
    r = greedy(m, src, keep, call=Call(options=opts, recorder=rec, max_len=8))
    t = rec.freeze()
    n = len(r.steps)
    assert n > 1
    assert t.attention("decoder", 0).shape == (2, n, n)  # the last full pass, over the final decoder inputs
    assert np.all(t.attention("decoder", 0)[:, 0, 1:] > 0)  # the first position sees later ones
    assert t.mask("decoder").all() and t.mask("decoder", "causal").all()
    for kind in ("decoder", "cross"):
        rows = t.step_rows(kind, 0)  # (H, steps, Tk): what each step itself computed
        assert rows is not None and rows.shape[:2] == (2, n)
        np.testing.assert_allclose(rows[:, -1], t.attention(kind, 0)[:, -1], atol=1e-6)
        for i in range(n):  # step i ran one pass over the first i + 1 decoder inputs; its last row
            rec_i = Recorder(m)
            m(src, r.tokens[:, : i + 1], call=Call(options=opts, recorder=rec_i), src_keep=keep)
            want = rec_i.freeze().attention(kind, 0)[:, -1]  # (H, Tk)
            np.testing.assert_allclose(rows[:, i, : want.shape[-1]], want, atol=1e-5)
            if kind == "decoder":
                assert np.all(rows[:, i, i + 1 :] == 0.0)  # keys this step had not seen yet
    cached = Recorder(m)
    greedy(m, src, keep, call=Call(options=OPTS, recorder=cached, max_len=8))
    assert cached.freeze().step_rows("decoder", 0) is None  # with the cache the rows are the trace's own


def test_reorder_keeps_shared_source_keys_unless_the_number_of_beams_changes():
    state = LayerState(cross_kv=(torch.randn(4, 2, 5, 8), torch.randn(4, 2, 5, 8)))
    state.append_kv(torch.randn(4, 2, 3, 8), torch.randn(4, 2, 3, 8))
    keys, self_k = state.cross_kv[0], state.self_kv[0].clone()
    state.cross_flat = (keys, keys)
    state.reorder(torch.tensor([2, 2, 0, 1]), same_source=True)
    assert state.cross_kv[0] is keys and state.cross_flat is not None  # same rows for every beam: untouched
    assert torch.equal(state.self_kv[0], self_k[[2, 2, 0, 1]])  # the beams' own keys do move
    state.reorder(torch.tensor([3, 0]), same_source=True)  # two beams finished: fewer rows
    assert state.cross_kv[0].shape[0] == 2 and state.cross_flat is None
    other = LayerState(cross_kv=(keys, keys))
    other.reorder(torch.tensor([1, 0, 3, 2]))  # different sources (a batch): rows follow the index
    assert torch.equal(other.cross_kv[0], keys[[1, 0, 3, 2]])
