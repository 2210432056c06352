"""Value zeroing (``core.analysis.value_zeroing``) against a loop written out by hand: for each layer and each token j,
zero j's value in a float64 copy of the layer's arithmetic, run it from the recorded input, take cosine distances."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import core
from core.analysis.alignment import normalised
from core.analysis.value_zeroing import (
    compose_decoder,
    compose_encoder,
    mean_agreement,
    rank_agreement,
    value_zeroing,
)
from core.config import Record
from core.sites import layer_input_site, memory_site

TEXT = "The cat sleeps on the warm chair."
TRANSLATION = "O gato dorme na cadeira."


@pytest.fixture(scope="module", params=[("attention", "post"), ("attention", "pre"), ("ssru", "post")], ids=str)
def bundle(request, tmp_path_factory):
    from conftest import build_tiny_checkpoint

    decoder_self, norm = request.param
    folder = tmp_path_factory.mktemp("vz") / f"{decoder_self}-{norm}"
    return core.load(build_tiny_checkpoint(folder, seed=5, decoder_self=decoder_self, norm=norm), device="cpu")


def attend_by_hand(attn, xq, xkv, mask, zero=None):
    """One attention block in float64, key ``zero``'s value set to 0 in every head: xq (Tq, D), xkv (Tk, D)."""
    H = attn.n_heads

    def heads(proj, x):
        return F.linear(x, proj.weight, proj.bias).view(x.shape[0], H, -1).transpose(0, 1)  # (H, T, d)

    q, k, v = heads(attn.q_proj, xq), heads(attn.k_proj, xkv), heads(attn.v_proj, xkv)
    if zero is not None:
        v = v.clone()
        v[:, zero] = 0.0
    scores = (q @ k.transpose(1, 2)) * q.shape[-1] ** -0.5
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
    ctx = (weights @ v).transpose(0, 1).reshape(xq.shape[0], -1)
    return F.linear(ctx, attn.out_proj.weight, attn.out_proj.bias)


def sublayer(x, norm, pre, inner):
    """x + inner(norm(x)) with pre-norm, norm(x + inner(x)) with post-norm."""
    return x + inner(norm(x)) if pre else norm(x + inner(x))


def encoder_layer_by_hand(enc, x, pre, last, zero):
    """Encoder layer ``enc`` on x (S, D), source ``zero``'s value zeroed (None: nothing); ``last``: the final norm."""
    everywhere = torch.ones(x.shape[0], x.shape[0], dtype=torch.bool)
    h = sublayer(x, enc.self_attn_norm, pre, lambda y: attend_by_hand(enc.self_attn, y, y, everywhere, zero))
    return last(sublayer(h, enc.ffn_norm, pre, enc.ffn))


def decoder_layer_by_hand(dec, x, memory, causal, pre, last, zero_self, zero_cross):
    """Decoder layer ``dec`` on x (T, D) reading memory (S, D), with the self-attention's (or cross-attention's)
    key ``zero_self`` (``zero_cross``) value zeroed."""
    if dec.ssru is not None:
        h = sublayer(x, dec.self_attn_norm, pre, lambda y: dec.ssru(y[None], None)[0][0])
    else:
        h = sublayer(x, dec.self_attn_norm, pre, lambda y: attend_by_hand(dec.self_attn, y, y, causal, zero_self))
    everywhere = torch.ones(x.shape[0], memory.shape[0], dtype=torch.bool)
    h = sublayer(
        h, dec.cross_attn_norm, pre, lambda y: attend_by_hand(dec.cross_attn, y, memory, everywhere, zero_cross)
    )
    return last(sublayer(h, dec.ffn_norm, pre, dec.ffn))


def distance(changed, original):
    return (1 - F.cosine_similarity(changed, original, dim=-1)).clamp(0, 2).numpy()


def brute_force(bundle, trace):
    """kind -> (L, Tq, Tk) cosine distances, one hand-run layer per (layer, token)."""
    model = copy.deepcopy(bundle.model).double()
    pre = model.config.norm == "pre"

    def get(name):
        return torch.tensor(np.asarray(trace[name]), dtype=torch.float64)

    memory = get(memory_site())
    S, T = memory.shape[0], trace.mask("cross").shape[0]
    causal = torch.tensor(np.asarray(trace.mask("decoder"), bool)) if "decoder" in trace.kinds else None
    widths = {"encoder": (S, S), "cross": (T, S), "decoder": (T, T)}
    out = {kind: np.zeros((trace.n_layers[kind], *widths[kind])) for kind in trace.kinds}
    identity = torch.nn.Identity()
    with torch.no_grad():
        for layer, enc in enumerate(model.encoder_layers):
            x = get(layer_input_site("encoder", layer))
            last = model.encoder_norm if layer == len(model.encoder_layers) - 1 else identity
            original = encoder_layer_by_hand(enc, x, pre, last, None)
            for j in range(S):
                out["encoder"][layer, :, j] = distance(encoder_layer_by_hand(enc, x, pre, last, j), original)
        for layer, dec in enumerate(model.decoder_layers):
            x = get(layer_input_site("decoder", layer))
            last = model.decoder_norm if layer == len(model.decoder_layers) - 1 else identity
            original = decoder_layer_by_hand(dec, x, memory, causal, pre, last, None, None)
            for j in range(S):
                changed = decoder_layer_by_hand(dec, x, memory, causal, pre, last, None, j)
                out["cross"][layer, :, j] = distance(changed, original)
            if "decoder" in out:
                for j in range(T):
                    changed = decoder_layer_by_hand(dec, x, memory, causal, pre, last, j, None)
                    out["decoder"][layer, :, j] = distance(changed, original) * causal[:, j].numpy()
    return out


def test_value_zeroing_equals_the_loop_written_out(bundle):
    result = value_zeroing(bundle, TEXT, translation=TRANSLATION)
    trace = bundle.teacher_forced(TEXT, TRANSLATION, record=Record(qkv=False, activations=True)).trace
    expected = brute_force(bundle, trace)
    assert set(result.distances) == set(expected) == set(trace.kinds)
    for kind, distances in expected.items():
        assert distances.max() > 1e-4  # zeroing changed something
        np.testing.assert_allclose(result.distances[kind], distances, rtol=1e-3, atol=2e-6, err_msg=kind)
        np.testing.assert_allclose(result.layers[kind], normalised(distances), atol=1e-3, err_msg=kind)
        np.testing.assert_allclose(result.layers[kind].sum(-1), 1.0, atol=1e-9)
    if "decoder" in expected:  # causal: a later token cannot matter
        assert np.all(np.triu(result.distances["decoder"], k=1) == 0)
        assert result.notes == ()
    else:
        assert result.notes and np.all(result.target == 0)
    np.testing.assert_allclose(result.source.sum(-1) + result.target.sum(-1), 1.0, atol=1e-9)
    assert result.source_pieces == tuple(trace.src_tokens) and result.prefix_pieces == tuple(trace.tgt_tokens)


def test_the_models_own_translation_is_scored_by_default(bundle):
    result = value_zeroing(bundle, TEXT)
    out = bundle.translate(TEXT)
    assert result.target_pieces == tuple(out.tgt_tokens[1:]) + (bundle.tokenizer.piece(out.output_ids[-1]),)
    assert result.layers["cross"].shape[1:] == (len(out.output_ids), len(out.src_tokens))


def test_options_reach_every_run(tmp_path_factory):
    from conftest import build_tiny_checkpoint

    bundle = core.load(build_tiny_checkpoint(tmp_path_factory.mktemp("vz-options") / "m", seed=6), device="cpu")
    heads = range(bundle.config.n_heads)
    options = core.InferenceOptions(causal_mask=False, ablate=frozenset(("cross", 0, h) for h in heads))
    result = value_zeroing(bundle, TEXT, translation=TRANSLATION, options=options)
    assert result.distances["cross"][0].max() < 1e-12  # every head off: no value of that block reaches the output
    assert result.distances["cross"][1].max() > 1e-4
    assert np.triu(result.distances["decoder"], k=1).max() > 1e-4  # no causal mask: later tokens matter


def test_composition_follows_the_authors_rollout():
    rng = np.random.default_rng(0)
    layers = normalised(rng.random((3, 4, 4)))
    joint = layers[0]  # compute_joint_attention(att_mat, res=False) of hmohebbi/ValueZeroing, written out
    for layer in layers[1:]:
        joint = layer.dot(joint)
    np.testing.assert_allclose(compose_encoder(layers), joint)
    cross, own = rng.random((2, 3, 4)), np.tril(rng.random((2, 3, 3)))
    source, target = compose_decoder(cross, own, joint)
    first = normalised(np.concatenate([cross[0], own[0]], -1))  # layer 0: sources through the encoder, inputs
    second = normalised(np.concatenate([cross[1], own[1]], -1))
    expected_target = second[:, 4:] @ first[:, 4:]
    expected_source = second[:, :4] @ joint + second[:, 4:] @ (first[:, :4] @ joint)
    np.testing.assert_allclose(target, expected_target)
    np.testing.assert_allclose(source, expected_source)
    np.testing.assert_allclose(source.sum(-1) + target.sum(-1), 1.0)
    source, target = compose_decoder(cross, None, joint)  # an SSRU decoder: the last layer's cross rows
    np.testing.assert_allclose(source, normalised(cross[1]) @ joint)
    assert np.all(target == 0)


def test_rank_agreement_is_spearman_with_mean_ranks_for_ties():
    a = np.array([[1.0, 2.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0], [5.0, 5.0, 5.0, 5.0]])
    b = np.array([[1.0, 3.0, 2.0, 4.0], [4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    rho = rank_agreement(a, b)
    expected = np.corrcoef([0, 1.5, 1.5, 3], [0, 2, 1, 3])[0, 1]  # the ranks, ties sharing their mean
    np.testing.assert_allclose(rho[:2], [expected, -1.0])
    assert np.isnan(rho[2])  # a constant row has no ranking
    keep = np.array([True, True, False, False])
    np.testing.assert_allclose(rank_agreement(a[1], b[1], keep), -1.0)
    assert np.isnan(rank_agreement(a[1], b[1], np.array([True, False, False, False])))


def test_value_zeroing_travels_in_a_trace_and_comes_back(tiny_checkpoint) -> None:
    import core
    from core.analysis.value_zeroing import ValueZeroing, value_zeroing

    bundle = core.load(tiny_checkpoint)
    found = value_zeroing(bundle, "the cat sleeps")
    out = bundle.translate("the cat sleeps")
    assert ValueZeroing.from_trace(out.trace) is None
    back = ValueZeroing.from_trace(core.Trace.load(out.trace.with_analysis(*found.to_arrays()).to_json().encode()))
    assert back is not None and back.source_pieces == found.source_pieces and set(back.layers) == set(found.layers)
    np.testing.assert_allclose(back.source, found.source, atol=1e-4)  # the JSON keeps 4 decimals
    for kind in found.layers:
        np.testing.assert_allclose(back.layers[kind], found.layers[kind], atol=1e-4)
        assert np.array_equal(back.keys[kind], found.keys[kind])
    assert back.options == found.options and back.notes == found.notes


def test_a_block_split_over_several_runs_gives_the_same_scores(tiny_checkpoint, monkeypatch) -> None:
    import importlib

    import core

    vz = importlib.import_module("core.analysis.value_zeroing")  # the module (core.analysis exports the function)

    bundle = core.load(tiny_checkpoint)
    whole = vz.value_zeroing(bundle, "the cat sleeps on the mat")
    monkeypatch.setattr(vz, "BATCH_ROWS", 4)  # a baseline row and 3 zeroed tokens a run: every block takes several
    split = vz.value_zeroing(bundle, "the cat sleeps on the mat")
    assert len(whole.source_pieces) > 3  # more tokens than a run takes: the loop goes round
    for kind in whole.layers:
        np.testing.assert_allclose(split.distances[kind], whole.distances[kind], atol=1e-6)


def test_the_mean_agreement_skips_rows_without_one() -> None:
    assert mean_agreement(np.array([0.5, np.nan, 1.0])) == pytest.approx(0.75)
    assert mean_agreement(np.array([np.nan, np.nan])) is None
