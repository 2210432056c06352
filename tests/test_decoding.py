"""KV-cached decoding equals recomputation; incremental traces equal teacher-forced ones; beam 1 = greedy."""
import numpy as np
import pytest
import torch

from conftest import tiny_config
from core import InferenceOptions, Recorder, Transformer
from core.decoding import beam_search, greedy, iter_greedy
from core.layers import LayerState

ALL = {"encoder": 2, "decoder": 2, "cross": 2}


@pytest.fixture(params=["attention", "ssru"])
def peaked(request):
    """A random model with large output weights so greedy choices are well separated."""
    torch.manual_seed(11)
    m = Transformer(tiny_config(decoder_self=request.param, tie_output=False)).eval()
    with torch.no_grad():
        m.output.weight.mul_(8.0)
    return m


def src_batch(B=1, T=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 64, (B, T), generator=g)
    return src, torch.ones_like(src, dtype=torch.bool)


def test_kv_cache_equals_full_recomputation(peaked):
    src, keep = src_batch(B=3)
    opts = InferenceOptions()
    cached = greedy(peaked, src, keep, opts, 40)  # longer than the cache's first capacity (16)
    recomputed = greedy(peaked, src, keep, opts, 40, use_cache=False)
    assert torch.equal(cached.tokens, recomputed.tokens)
    for a, b in zip(cached.steps, recomputed.steps):
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


def test_incremental_trace_equals_teacher_forced_trace(peaked):
    src, keep = src_batch(seed=3)
    opts = InferenceOptions()
    rec = Recorder(qkv=True)
    result = greedy(peaked, src, keep, opts, 10, recorder=rec)
    n = len(result.steps)
    dec_in = result.tokens[:, :n]
    kinds = {k: v for k, v in ALL.items() if k != "decoder" or peaked.config.decoder_self == "attention"}
    inc = rec.freeze(opts, [["x"] * 6], [["y"] * n], 2, kinds)
    rec2 = Recorder(qkv=True)
    logits = peaked(src, dec_in, opts, rec2, keep)
    tf = rec2.freeze(opts, [["x"] * 6], [["y"] * n], 2, kinds)
    for kind in inc.kinds:
        for layer in range(2):
            np.testing.assert_allclose(inc.attention(kind, layer), tf.attention(kind, layer), atol=1e-5)
            np.testing.assert_allclose(inc.scores(kind, layer), tf.scores(kind, layer), atol=1e-4)
            for a, b in zip(inc.qkv(kind, layer), tf.qkv(kind, layer)):
                np.testing.assert_allclose(a, b, atol=1e-5)
        np.testing.assert_array_equal(inc.mask(kind), tf.mask(kind))
    np.testing.assert_allclose(inc.positional_encoding("tgt"), tf.positional_encoding("tgt"), atol=1e-6)
    if peaked.config.decoder_self == "ssru":
        np.testing.assert_allclose(inc.gates(0), tf.gates(0), atol=1e-5)
    probs = torch.softmax(logits[0], -1)
    for t, step in enumerate(result.steps):
        assert int(step.token_ids[0]) == int(probs[t].argmax())


def test_beam_size_one_equals_greedy(peaked):
    for seed in range(4):
        src, keep = src_batch(seed=seed)
        g = greedy(peaked, src, keep, InferenceOptions(), 12)
        b = beam_search(peaked, src, keep, InferenceOptions(), 12, beam_size=1)
        assert b == g.tokens[0, 1: 1 + g.lengths[0]].tolist()


@pytest.mark.parametrize("seed", [0, 1, 4])
def test_beam_search_finds_a_sequence_at_least_as_likely_as_greedy(peaked, seed):
    src, keep = src_batch(seed=seed)
    opts = InferenceOptions()

    def logprob(seq):
        tgt = torch.tensor([[peaked.config.bos_id] + seq[:-1]])
        lp = torch.log_softmax(peaked(src, tgt, opts, None, keep)[0], -1)
        return sum(float(lp[t, i]) for t, i in enumerate(seq))

    g = greedy(peaked, src, keep, opts, 12)
    greedy_seq = g.tokens[0, 1: 1 + g.lengths[0]].tolist()
    beam_seq = beam_search(peaked, src, keep, opts, 12, beam_size=4)
    assert len(beam_seq) == len(greedy_seq) == 12  # random weights never emit eos: equal lengths
    assert logprob(beam_seq) >= logprob(greedy_seq) - 1e-4


def test_iter_greedy_yields_one_step_at_a_time_with_topk(peaked):
    src, keep = src_batch()
    steps = iter_greedy(peaked, src, keep, InferenceOptions(), 5, top_k=3)
    first = next(steps)
    assert first.index == 0 and first.top_ids.shape == (1, 3)
    assert torch.all(first.top_probs[:, :-1] >= first.top_probs[:, 1:])
    assert int(first.token_ids[0]) == int(first.top_ids[0, 0])


def test_causal_mask_off_decodes_by_recomputation():
    torch.manual_seed(11)
    m = Transformer(tiny_config()).eval()
    src, keep = src_batch(seed=2)
    rec = Recorder()
    r = greedy(m, src, keep, InferenceOptions(causal_mask=False), 8, recorder=rec)
    t = rec.freeze(InferenceOptions(causal_mask=False), [["x"] * 6], [["y"] * len(r.steps)], 2, ALL)
    n = len(r.steps)
    assert t.attention("decoder", 0).shape == (2, n, n)
    assert n > 1
    assert np.all(t.attention("decoder", 0)[:, 0, 1:] > 0)  # the first position sees later ones


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
