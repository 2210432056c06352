"""What the performance changes (see benchmarks/RESULTS.md) must never change: values, state_dicts, traces."""
import numpy as np
import pytest
import torch

import core.model
from conftest import tiny_config
from core import InferenceOptions, Recorder, Transformer
from core.decoding import greedy
from core.layers import DecoderState
from core.trace import _stitch


@pytest.fixture
def model():
    torch.manual_seed(5)
    return Transformer(tiny_config()).eval()


def test_decoding_weights_are_column_major_with_the_same_values_and_state_dict(model, monkeypatch):
    out = model.decoder_layers[0].ffn.linear1.weight
    assert out.stride() == (1, out.shape[0])  # (out, in) stored in-major: what a one-token step streams fastest
    assert model.encoder_layers[0].ffn.linear1.weight.is_contiguous()  # encoder: untouched
    assert model.output.weight is model.tgt_embed.weight and model.output.weight.is_contiguous()  # tied: row look-ups
    untied = Transformer(tiny_config(tie_output=False))
    assert untied.output.weight.stride() == (1, untied.output.weight.shape[0])
    with monkeypatch.context() as m:  # the same seed without the layout change: same names, same values
        m.setattr(core.model.Transformer, "_decoding_layout", lambda self: None)
        torch.manual_seed(5)
        plain = Transformer(tiny_config())
    assert plain.decoder_layers[0].ffn.linear1.weight.is_contiguous()  # the layouts really differ ...
    assert model.state_dict().keys() == plain.state_dict().keys()
    for (name, a), (_, b) in zip(model.state_dict().items(), plain.state_dict().items()):
        assert torch.equal(a, b), name  # ... and nothing a checkpoint stores does
    fresh = Transformer(tiny_config())
    fresh.load_state_dict({k: v.contiguous() for k, v in model.state_dict().items()})  # as a checkpoint loads
    w = fresh.decoder_layers[0].ffn.linear1.weight
    assert w.stride() == (1, out.shape[0]) and torch.equal(w, out)


@torch.no_grad()
def test_column_major_linear_gives_the_row_major_result(model):
    x = torch.randn(3, 5, 16)
    ffn = model.decoder_layers[0].ffn  # the model's own path (layout + fastlinear dispatch), one row and many
    for rows in (x, x[:1, :1]):
        expected = torch.relu(rows @ ffn.linear1.weight.contiguous().T + ffn.linear1.bias)
        expected = expected @ ffn.linear2.weight.contiguous().T + ffn.linear2.bias
        torch.testing.assert_close(ffn(rows), expected)


def test_a_cached_step_builds_no_mask_and_no_source_mask_equals_all_real(model, monkeypatch):
    src = torch.randint(4, 64, (2, 7))
    keep = torch.ones_like(src, dtype=torch.bool)
    opts = InferenceOptions()
    memory = model.encode(src, keep, opts)
    tgt = torch.tensor([[1], [1]])
    expected = model.decode(tgt, memory, keep, opts, state=DecoderState.empty(2))
    calls = []
    real = core.model.causal_mask
    monkeypatch.setattr(core.model, "causal_mask", lambda *a, **k: calls.append(a) or real(*a, **k))
    got = model.decode(tgt, memory, None, opts, state=DecoderState.empty(2))
    assert calls == []
    torch.testing.assert_close(got, expected)


def test_ragged_stitching_pads_like_the_reference():
    torch.manual_seed(0)
    chunks = [torch.randn(2, 3, 1, t) for t in range(1, 6)]  # one query row per step, one more key each time
    reference = torch.cat([torch.nn.functional.pad(c, (0, 5 - c.shape[-1]), value=float("-inf")) for c in chunks], dim=-2)
    np.testing.assert_array_equal(_stitch(chunks, float("-inf")), reference.numpy())
    masks = [torch.ones(2, 1, t, dtype=torch.bool) for t in range(1, 4)]
    assert _stitch(masks, False, np.bool_).tolist() == [[[True, False, False], [True, True, False], [True, True, True]]] * 2


def test_traced_decoding_with_padding_still_equals_teacher_forcing():
    torch.manual_seed(2)
    m = Transformer(tiny_config(tie_output=False)).eval()
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])
    keep = src != 0
    opts = InferenceOptions()
    rec = Recorder()
    result = greedy(m, src, keep, opts, 6, recorder=rec)
    n = len(result.steps)
    layers = {"encoder": 2, "decoder": 2, "cross": 2}
    inc = rec.freeze(opts, [["x"] * 5] * 2, [["y"] * n] * 2, 2, layers)
    rec2 = Recorder()
    m(src, result.tokens[:, :n], opts, rec2, keep)
    tf = rec2.freeze(opts, [["x"] * 5] * 2, [["y"] * n] * 2, 2, layers)
    for item in (0, 1):
        a, b = inc.select(item), tf.select(item)
        for kind in ("encoder", "decoder", "cross"):
            np.testing.assert_allclose(a.attention(kind, 1), b.attention(kind, 1), atol=1e-5)
            np.testing.assert_array_equal(a.mask(kind), b.mask(kind))
    assert not inc.select(1).mask("cross")[:, 3:].any()  # padded source keys stay masked while decoding
