"""Model-level invariants: masks, positional encodings, tracing, ablation, configs."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from conftest import tiny_config

from core import InferenceOptions, ModelConfig, Recorder, Transformer
from core.recording.call import Call
from core.sites import layer_input_site
from core.transformer.attention import binder
from core.transformer.blocks import _ffn_sublayer
from core.transformer.positional import sinusoidal_table

DEFAULTS = InferenceOptions()


def run(model, src, tgt, options=DEFAULTS, **recorder_kwargs):
    rec = Recorder(model, **recorder_kwargs)
    logits = model(src, tgt, call=Call(options=options, recorder=rec))
    return logits, rec.freeze()


def batch(seed=0, B=2, Ts=7, Tt=5, vocab=64):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, vocab, (B, Ts), generator=g), torch.randint(4, vocab, (B, Tt), generator=g)


def test_config_validates_itself():
    with pytest.raises(ValueError, match="divisible"):
        tiny_config(d_model=18, n_heads=4)
    with pytest.raises(ValueError, match="norm"):
        tiny_config(norm="sandwich")
    with pytest.raises(ValueError, match="unknown keys"):
        ModelConfig.from_dict({**tiny_config().to_dict(), "flux": 1})
    with pytest.raises(ValueError, match="share_embeddings"):
        tiny_config(tgt_vocab_size=70)
    with pytest.raises(dataclasses.FrozenInstanceError):
        tiny_config().d_model = 32  # frozen


def test_inference_options_validate_and_are_hashable():
    opts = InferenceOptions(ablate=frozenset({("cross", 1, 0)}))
    assert hash(opts) == hash(InferenceOptions(ablate=frozenset({("cross", 1, 0)})))
    assert InferenceOptions.from_dict(opts.to_dict()) == opts
    with pytest.raises(ValueError, match="kind"):
        InferenceOptions(ablate=frozenset({("self", 0, 0)}))
    assert opts.describe() == "1 head ablated"


def test_tracing_does_not_change_logits_and_is_detached_cpu(model):
    src, tgt = batch()
    plain = model(src, tgt)
    traced, trace = run(model, src, tgt, qkv=True, activations=True)
    torch.testing.assert_close(plain, traced, atol=1e-5, rtol=1e-5)
    for kind in ("encoder", "decoder", "cross"):
        a = trace.attention(kind, 1)
        assert isinstance(a, np.ndarray) and a.dtype == np.float32
    model.train()  # grad on: recording keeps detached copies (freezing a tensor that needs grad would raise),
    rec = Recorder(model, qkv=True, activations=True)  # and nothing is kept on the module
    logits = model(src, tgt, call=Call(recorder=rec))
    logits.sum().backward()
    assert model.output.weight.grad is not None  # the recorded call still trains
    trained = rec.freeze()
    assert trained.keys() == trace.keys()
    assert all(isinstance(a, np.ndarray) and not a.flags.writeable for a in trained.arrays.values())
    np.testing.assert_allclose(
        trained["decoder.1.cross.weights"], trace["decoder.1.cross.weights"], atol=1e-6
    )  # dropout is 0
    assert not any(isinstance(v, torch.Tensor) and v.dim() == 4 for m in model.modules() for v in vars(m).values())


def test_rows_sum_to_one_and_masked_entries_are_zero(model):
    src, tgt = batch()
    src[1, 5:] = model.config.pad_id
    keep = src != model.config.pad_id
    _, trace = run(model, src, tgt)
    for b in range(2):
        t = trace.select(b)
        for kind in ("encoder", "decoder", "cross"):
            for layer in range(2):
                w = t.attention(kind, layer)
                np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
                mask = t.mask(kind)
                assert np.all(w[:, ~mask] == 0.0)
                assert np.all(np.isneginf(t.scores(kind, layer)[:, ~mask]))
        if b == 1:
            assert not t.mask("cross")[:, 5:].any() and t.mask("cross")[:, :5].all()
            assert np.all(t.attention("encoder", 0)[:, :, 5:] == 0)
    assert keep[1, 4] and not keep[1, 5]


def test_causal_mask_makes_decoder_attention_lower_triangular(model):
    src, tgt = batch(1)
    _, on = run(model, src, tgt)
    _, off = run(model, src, tgt, InferenceOptions(causal_mask=False))
    upper = np.triu(np.ones((5, 5), dtype=bool), k=1)
    for layer in range(2):
        assert np.all(on.attention("decoder", layer)[:, upper] == 0)
        assert np.all(off.attention("decoder", layer)[:, upper] > 0)
    assert on.mask("decoder")[upper].sum() == 0 and off.mask("decoder").all()


def test_padding_mask_off_lets_queries_see_padding(model):
    src, tgt = batch(2)
    src[0, 4:] = model.config.pad_id
    _, off = run(model, src, tgt, InferenceOptions(padding_mask=False))
    assert np.all(off.attention("encoder", 0)[:, :, 4:] > 0)
    assert off.mask("encoder").all()


def test_positional_encoding_matches_the_formula():
    d = 16
    table = sinusoidal_table(50, d).numpy()
    for pos in (0, 1, 7, 49):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert table[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-6)
    concat = sinusoidal_table(10, d, "concatenated").numpy()
    inc = math.log(10000) / (d // 2 - 1)
    assert concat[3, 2] == pytest.approx(math.sin(3 * math.exp(-2 * inc)), abs=1e-6)
    assert concat[3, d // 2 + 2] == pytest.approx(math.cos(3 * math.exp(-2 * inc)), abs=1e-6)


def test_trace_records_the_pe_added_and_zeros_when_off(model):
    src, tgt = batch(3)
    _, on = run(model, src, tgt)
    _, off = run(model, src, tgt, InferenceOptions(positional_encoding=False))
    np.testing.assert_allclose(on.positional_encoding("src"), sinusoidal_table(7, 16).numpy(), atol=1e-6)
    np.testing.assert_allclose(on.positional_encoding("tgt"), sinusoidal_table(5, 16).numpy(), atol=1e-6)
    assert not off.positional_encoding("src").any()


def test_without_pe_the_encoder_is_permutation_equivariant(model):
    src, _ = batch(4, B=1)
    perm = torch.randperm(src.shape[1], generator=torch.Generator().manual_seed(0))
    opts = InferenceOptions(positional_encoding=False)
    keep = torch.ones_like(src, dtype=torch.bool)
    a = model.encode(src, keep, call=Call(options=opts))
    b = model.encode(src[:, perm], keep, call=Call(options=opts))
    torch.testing.assert_close(a[:, perm], b, atol=1e-5, rtol=1e-5)
    with_pe = model.encode(src[:, perm], keep)
    assert not torch.allclose(model.encode(src, keep)[:, perm], with_pe, atol=1e-4)


def test_the_encoder_resumes_at_a_layer_from_that_layers_input(model):
    src, _ = batch(6, B=2)
    keep = torch.ones_like(src, dtype=torch.bool)
    opts = InferenceOptions(ablate=frozenset({("encoder", 1, 0)}))
    rec = Recorder(model, activations=True)
    with torch.no_grad():
        whole = model.encode(src, keep, call=Call(options=opts, recorder=rec))
        trace = rec.freeze()
        for layer in range(model.config.n_encoder_layers):
            site = layer_input_site("encoder", layer)
            x = torch.stack([torch.from_numpy(np.array(trace.select(b)[site])) for b in range(2)])
            resumed = model.encode(src, keep, call=Call(options=opts), start=(layer, x))
            torch.testing.assert_close(resumed, whole, atol=1e-5, rtol=1e-5)
        later = model.encode(src, keep, call=Call(options=opts), start=(0, x))  # a later layer's input given to layer 0
        assert not torch.allclose(later, whole, atol=1e-3)
    with pytest.raises(ValueError, match="start: layer 9"):
        model.encode(src, keep, start=(9, x))
    with pytest.raises(ValueError, match="wanted"):
        model.encode(src, keep, start=(0, x[:, :3]))


def test_an_ablated_head_contributes_nothing(model):
    src, tgt = batch(5)
    opts = InferenceOptions(ablate=frozenset({("cross", 1, 1), ("encoder", 0, 0), ("decoder", 1, 0)}))
    base = model(src, tgt, call=Call(options=opts))
    tweaked = Transformer(model.config).eval()
    tweaked.load_state_dict(model.state_dict())
    d_head = model.config.d_head
    with torch.no_grad():  # move only the value rows of the ablated heads
        tweaked.decoder_layers[1].cross_attn.v_proj.weight[d_head:] += 3.0
        tweaked.encoder_layers[0].self_attn.v_proj.weight[:d_head] += 3.0
        tweaked.decoder_layers[1].self_attn.v_proj.weight[:d_head] += 3.0
    torch.testing.assert_close(tweaked(src, tgt, Call(options=opts)), base, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(tweaked(src, tgt), model(src, tgt), atol=1e-3)
    assert not torch.allclose(model(src, tgt), base, atol=1e-4)  # the ablation itself changes the output


def test_toggles_never_mutate_the_model(model):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    attrs = {n: {k: id(v) for k, v in vars(m).items()} for n, m in model.named_modules()}
    src, tgt = batch(6)
    run(model, src, tgt, InferenceOptions(False, False, False, frozenset({("encoder", 0, 1)})))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert {n: {k: id(v) for k, v in vars(m).items()} for n, m in model.named_modules()} == attrs  # nothing rebound


def _same_weights(source: Transformer, **overrides) -> Transformer:
    """A model of ``source``'s config with ``overrides``, carrying every weight the two have in common."""
    other = Transformer(tiny_config(**{**source.config.to_dict(), **overrides})).eval()
    shared = {k: v for k, v in source.state_dict().items() if k in other.state_dict()}
    other.load_state_dict(shared, strict=False)
    return other


@torch.no_grad()
def _pre_norm(m, src, tgt, trace):
    # pre-norm layers leave the residual stream un-normalised (post-norm ends each layer in a LayerNorm)
    stream = trace["encoder.0.out"]  # (Ts, D)
    assert not np.allclose(stream.std(-1), 1.0, atol=0.05)
    post = _same_weights(m, norm="post")
    _, post_trace = run(post, src, tgt, activations=True)
    np.testing.assert_allclose(post_trace["encoder.0.out"].mean(-1), 0.0, atol=1e-5)
    assert not torch.allclose(post(src, tgt), m(src, tgt), atol=1e-3)


@torch.no_grad()
def _learned_positions(m, src, tgt, trace):
    table = m.positions.embedding.weight.numpy()
    np.testing.assert_array_equal(trace.positional_encoding("src"), table[: src.shape[1]])
    np.testing.assert_array_equal(trace.positional_encoding("tgt"), table[: tgt.shape[1]])
    before = m(src, tgt)
    m.positions.embedding.weight[3] += 1.0  # a trained table: its rows are what the model adds
    assert not torch.allclose(m(src, tgt), before, atol=1e-4)
    np.testing.assert_array_equal(run(m, src, tgt)[1].positional_encoding("src")[3], table[3])  # (a view)


@torch.no_grad()
def _untied(m, src, tgt, trace):
    memory = m.encode(src)
    logits = m(src, tgt)
    m.tgt_embed.weight[4:] += 0.5  # the target table alone: the encoder does not read it
    torch.testing.assert_close(m.encode(src), memory)
    assert not torch.allclose(m(src, tgt), logits, atol=1e-3)
    changed, before = run(m, src, tgt, activations=True)
    m.output.weight.mul_(2.0)  # the output projection is its own matrix: the embeddings stay
    doubled, after = run(m, src, tgt, activations=True)
    np.testing.assert_array_equal(after["embed.tgt"], before["embed.tgt"])
    np.testing.assert_array_equal(after["embed.src"], before["embed.src"])
    torch.testing.assert_close(doubled, 2.0 * changed, atol=1e-4, rtol=1e-4)


@torch.no_grad()
def _gelu_and_output_bias(m, src, tgt, trace):
    ffn = m.encoder_layers[0].ffn
    x = torch.randn(1, 3, 16)
    h = torch.nn.functional.linear(x, ffn.linear1.weight, ffn.linear1.bias)
    assert (h < 0).any()  # negative pre-activations: where GELU and ReLU differ
    expected = torch.nn.functional.linear(torch.nn.functional.gelu(h), ffn.linear2.weight, ffn.linear2.bias)
    torch.testing.assert_close(ffn(x), expected)
    before = m(src, tgt)
    shift = torch.arange(64, dtype=torch.float32)
    m.output.bias += shift
    torch.testing.assert_close(m(src, tgt), before + shift, atol=1e-4, rtol=1e-5)


@torch.no_grad()
def _concatenated_pe_zero_start(m, src, tgt, trace):
    np.testing.assert_allclose(
        trace.positional_encoding("src"), sinusoidal_table(7, 16, "concatenated").numpy(), atol=1e-6
    )
    other = tgt.clone()
    other[:, 0] = 9  # the first decoder input is a zero vector whatever the token
    torch.testing.assert_close(m(src, other), m(src, tgt))
    bos = _same_weights(m, start="bos")
    assert not torch.allclose(bos(src, other), bos(src, tgt), atol=1e-4)  # with a <s> embedding it does matter


VARIANTS = {
    "pre-norm": (dict(norm="pre"), _pre_norm),
    "learned positions": (dict(positional="learned"), _learned_positions),
    "untied embeddings": (dict(share_embeddings=False, tie_output=False), _untied),
    "gelu, output bias": (dict(activation="gelu", output_bias=True), _gelu_and_output_bias),
    "concatenated PE, zero start": (dict(pe_layout="concatenated", start="zeros"), _concatenated_pe_zero_start),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_variants_run_trace_and_do_what_they_say(variant):
    overrides, check = VARIANTS[variant]
    torch.manual_seed(0)
    m = Transformer(tiny_config(**overrides)).eval()
    src, tgt = batch(7)
    plain = m(src, tgt)
    traced, trace = run(m, src, tgt, activations=True)
    torch.testing.assert_close(plain, traced, atol=1e-5, rtol=1e-5)
    assert plain.shape == (2, 5, 64) and torch.isfinite(plain).all()
    for kind in trace.kinds:
        np.testing.assert_allclose(trace.attention(kind, 1).sum(-1), 1.0, atol=1e-5)
    check(m, src, tgt, trace)


def test_ssru_decoder_records_gates_and_no_self_attention():
    torch.manual_seed(0)
    m = Transformer(tiny_config(decoder_self="ssru")).eval()
    src, tgt = batch(8)
    logits, trace = run(m, src, tgt)
    assert trace.kinds == ("encoder", "cross") and trace.has_gates
    assert "mask.decoder" not in trace.keys()
    assert not any(k.startswith(("decoder.0.self", "decoder.1.self")) for k in trace.keys())
    g = trace.gates(1)
    assert g.shape == (5, 16) and np.all((g > 0) & (g < 1))
    torch.testing.assert_close(logits, m(src, tgt), atol=1e-5, rtol=1e-5)
    # the SSRU is causal: changing a later target token leaves earlier logits alone
    tgt2 = tgt.clone()
    tgt2[:, 3] = 5
    torch.testing.assert_close(m(src, tgt2)[:, :3], logits[:, :3], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_the_feed_forward_runs_on_the_real_positions_alone_with_gradients_off(norm):
    """A padded batch's feed-forward: with gradients off only the real positions go through it (the same values
    there; a padded position keeps its stream); with gradients on every position does, as in training."""
    torch.manual_seed(1)
    w = Transformer(tiny_config(norm=norm)).eval().encoder_layers[0].weights(binder(torch.nn.functional.linear))
    x = torch.randn(2, 5, 16)
    real = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    with torch.no_grad():
        every = _ffn_sublayer(x, w.ffn, w.ffn_norm, w.pre, 0.0)
        packed = _ffn_sublayer(x, w.ffn, w.ffn_norm, w.pre, 0.0, real)
    torch.testing.assert_close(packed[real], every[real], rtol=1e-6, atol=1e-6)
    assert torch.equal(packed[~real], x[~real]) and not torch.allclose(every[~real], x[~real])
    with torch.enable_grad():
        trained = _ffn_sublayer(x.requires_grad_(), w.ffn, w.ffn_norm, w.pre, 0.0, real)
    torch.testing.assert_close(trained.detach(), every)
