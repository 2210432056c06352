"""Our multi-head attention against PyTorch's, and the invariants of recorded weights."""
import torch
from torch import nn

from core.attention import MultiHeadAttention
from core.masks import causal_mask, to_pytorch_key_padding
from core.trace import Recorder


def _copy_into_pytorch(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(ours.d_model, ours.n_heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ref.eval()


def test_equals_pytorch_multihead_attention_with_padding():
    torch.manual_seed(0)
    ours = MultiHeadAttention(16, 4).eval()
    ref = _copy_into_pytorch(ours)
    x = torch.randn(2, 5, 16)
    mem = torch.randn(2, 7, 16)
    keep = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    rec = Recorder()
    out = ours(x, ours.project_kv(mem), keep[:, None, :], recorder=rec, site=("cross", 0))
    fast = ours(x, ours.project_kv(mem), keep[:, None, :])
    expected, weights = ref(x, mem, mem, key_padding_mask=to_pytorch_key_padding(keep), average_attn_weights=False)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast, expected, atol=1e-5, rtol=1e-5)
    trace = rec.freeze(__import__("core").InferenceOptions(), [["a"]] * 2, [["b"]] * 2, 4, {"cross": 1})
    for b in range(2):
        torch.testing.assert_close(torch.from_numpy(trace.select(b).attention("cross", 0)), weights[b], atol=1e-5, rtol=1e-5)


def test_equals_pytorch_with_causal_mask():
    torch.manual_seed(1)
    ours = MultiHeadAttention(8, 2).eval()
    ref = _copy_into_pytorch(ours)
    x = torch.randn(3, 6, 8)
    ours_out = ours(x, ours.project_kv(x), causal_mask(6)[None])
    ref_out, _ = ref(x, x, x, attn_mask=~causal_mask(6))  # PyTorch bool attn_mask: True = blocked
    torch.testing.assert_close(ours_out, ref_out, atol=1e-5, rtol=1e-5)


def test_fully_masked_row_gives_zero_weights_not_nan():
    torch.manual_seed(2)
    att = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 3, 8)
    mask = torch.tensor([[[True, True, False], [False, False, False], [True, False, False]]])
    rec = Recorder()
    out = att(x, att.project_kv(x), mask, recorder=rec)
    w = rec._weights[("encoder", 0)][0]
    assert torch.isfinite(out).all()
    assert torch.equal(w[0, :, 1], torch.zeros(2, 3))
    assert torch.equal(w[~mask[:, None].expand_as(w)], torch.zeros(int((~mask[:, None].expand_as(w)).sum())))


def test_head_keep_zeroes_a_head():
    torch.manual_seed(3)
    att = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 4, 8)
    keep = torch.tensor([1.0, 0.0])
    base = att(x, att.project_kv(x), None, head_keep=keep)
    with torch.no_grad():  # change head 1's value projection: output must not move
        att.v_proj.weight[4:] += 1.0
    again = att(x, att.project_kv(x), None, head_keep=keep)
    torch.testing.assert_close(base, again)
    changed = att(x, att.project_kv(x), None)
    assert not torch.allclose(base, changed)
