"""Our multi-head attention against PyTorch's, and the invariants of recorded weights."""

import numpy as np
import torch
from conftest import tiny_config
from torch import nn

from core import InferenceOptions, Recorder, ScaleHeads, Transformer
from core.transformer.attention import MultiHeadAttention, attend, tap
from core.transformer.masks import causal_mask, to_pytorch_key_padding


def _model(d_model: int, n_heads: int, seed: int) -> Transformer:
    """A tiny model: its attention blocks are the ones under test, and a Recorder is made from it."""
    torch.manual_seed(seed)
    return Transformer(tiny_config(d_model=d_model, n_heads=n_heads, d_ff=2 * d_model)).eval()


def _recorder(model: Transformer, **kwargs) -> Recorder:
    rec = Recorder(model, **kwargs)
    rec.begin(InferenceOptions())  # what a model call does first: the options the call runs with
    return rec


def _copy_into_pytorch(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(ours.d_model, ours.n_heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ref.eval()


@torch.no_grad()
def test_equals_pytorch_multihead_attention_with_padding():
    model = _model(16, 4, seed=0)
    ours = model.decoder_layers[0].cross_attn
    ref = _copy_into_pytorch(ours)
    x = torch.randn(2, 5, 16)
    mem = torch.randn(2, 7, 16)
    keep = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    rec = _recorder(model)
    out = ours(x, ours.project_kv(mem), keep[:, None, :], tap(rec, "decoder.0.cross"))
    fast = ours(x, ours.project_kv(mem), keep[:, None, :], tap(None, "decoder.0.cross"))  # the fused SDPA path
    expected, weights = ref(x, mem, mem, key_padding_mask=to_pytorch_key_padding(keep), average_attn_weights=False)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast, expected, atol=1e-5, rtol=1e-5)
    trace = rec.freeze()
    recorded = trace.arrays["decoder.0.cross.weights"]  # (B, H, Tq, Tk): both batch items
    assert recorded.shape == (2, 4, 5, 7)
    np.testing.assert_allclose(recorded, weights.numpy(), atol=1e-5, rtol=1e-5)
    assert np.all(recorded[1, :, :, 4:] == 0.0)  # padded keys: exactly 0


@torch.no_grad()
def test_equals_pytorch_with_causal_mask():
    model = _model(8, 2, seed=1)
    ours = model.encoder_layers[0].self_attn
    ref = _copy_into_pytorch(ours)
    x = torch.randn(3, 6, 8)
    ours_out = ours(x, ours.project_kv(x), causal_mask(6)[None], tap(None, "encoder.0.self"))
    ref_out, _ = ref(x, x, x, attn_mask=~causal_mask(6))  # PyTorch bool attn_mask: True = blocked
    torch.testing.assert_close(ours_out, ref_out, atol=1e-5, rtol=1e-5)
    rec = _recorder(model)
    traced = ours(x, ours.project_kv(x), causal_mask(6)[None], tap(rec, "encoder.0.self"))
    torch.testing.assert_close(traced, ref_out, atol=1e-5, rtol=1e-5)
    w = rec.freeze().arrays["encoder.0.self.weights"]
    assert np.all(w[..., ~causal_mask(6).numpy()] == 0.0)


@torch.no_grad()
def test_fully_masked_row_gives_zero_weights_and_zero_output_not_nan():
    model = _model(8, 2, seed=2)
    att = model.encoder_layers[0].self_attn
    x = torch.randn(1, 3, 8)
    mask = torch.tensor([[[True, True, False], [False, False, False], [True, False, False]]])
    q, (k, v) = att.project_q(x), att.project_kv(x)
    rec = _recorder(model)
    recorded = attend(q, k, v, mask, tap(rec, "encoder.0.self"))
    plain = attend(q, k, v, mask, tap(None, "encoder.0.self"))  # F.scaled_dot_product_attention
    for ctx in (recorded, plain):
        assert torch.isfinite(ctx).all()
        assert torch.equal(ctx[0, :, 1], torch.zeros(2, 4))  # the fully masked query: zero output per head
    torch.testing.assert_close(recorded, plain, atol=1e-6, rtol=1e-5)
    trace = rec.freeze()
    w = trace.arrays["encoder.0.self.weights"][0]  # (H, Tq, Tk)
    blocked = ~mask[0].numpy()
    assert np.array_equal(w[:, 1], np.zeros((2, 3), dtype=np.float32))
    assert np.all(w[:, blocked] == 0.0)
    assert np.all(np.isneginf(trace.arrays["encoder.0.self.scores"][0][:, blocked]))
    assert np.all(np.isfinite(trace.arrays["encoder.0.self.scores_raw"][0]))  # before the mask: every score
    np.testing.assert_allclose(w[:, [0, 2]].sum(-1), 1.0, atol=1e-6)
    assert torch.isfinite(att(x, att.project_kv(x), mask, tap(None, "encoder.0.self"))).all()


@torch.no_grad()
def test_scale_heads_zeroes_a_head():
    model = _model(8, 2, seed=3)
    att = model.encoder_layers[0].self_attn
    x = torch.randn(1, 4, 8)

    def run(**kwargs):
        rec = Recorder(model, record=False, **kwargs)
        return att(x, att.project_kv(x), None, tap(rec, "encoder.0.self"))

    off = [ScaleHeads("encoder.0.self", heads=(1,))]
    base = run(interventions=off)
    att.v_proj.weight[4:] += 1.0  # change head 1's value projection: the output must not move
    again = run(interventions=off)
    torch.testing.assert_close(base, again)
    assert not torch.allclose(base, run(), atol=1e-3)  # without the intervention head 1 does contribute
    other = run(interventions=[ScaleHeads("decoder.0.self", heads=(1,))])  # another site: not this block
    torch.testing.assert_close(other, run())
    half = run(interventions=[ScaleHeads("encoder.0.self", heads=(1,), factor=0.5)])
    bias = att.out_proj.bias
    # linear in the factor: half way between switched off and untouched
    torch.testing.assert_close(half - bias, (base - bias + run() - bias) / 2, atol=1e-5, rtol=1e-5)
