"""The configuration T5 / Flan-T5 / mT5 need, in core itself (no transformers here): a head size of its own (d_kv),
unscaled attention, the relative position bias (buckets, bidirectional / causal, once per stack, recorded), RMSNorm,
the gated FFN, gelu_new, the d_model**-0.5 rescale of a tied head; the fast path equal to the textbook one, and
every switch, site and intervention working on them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import build_tiny_checkpoint, tiny_config
from hf_folders import T5_V10, T5_V11

import core
from core import InferenceOptions, ModelConfig, Recorder, Transformer
from core.decoding.search import beam_search, greedy
from core.fast.weights import FastWeights
from core.recording.call import Call
from core.recording.interventions import Patch, ScaleHeads
from core.recording.trace import Trace
from core.transformer.layers import make_norm
from core.transformer.positional import relative_bucket

T5_IDS = dict(pad_id=0, bos_id=0, eos_id=1, unk_id=2)  # <pad> is also the decoder's start
VERSIONS = {"v1.0": dict(T5_V10, **T5_IDS), "v1.1": dict(T5_V11, **T5_IDS)}


def t5_model(version: str, seed: int = 0) -> Transformer:
    """A random T5-shaped model; norms and biases random too (1 and 0 would hide a mistake)."""
    torch.manual_seed(seed)
    model = Transformer(tiny_config(**VERSIONS[version])).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.3)
            elif "_bias.embedding" in name:
                p.normal_(0.0, 1.0)
    return model


def source() -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 1], [12, 13, 14, 1, 0, 0, 0, 0]])
    return src, src != 0


def test_the_new_fields_validate_survive_json_and_leave_old_configs_alone():
    cfg = tiny_config(**VERSIONS["v1.1"])
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.d_head == 5 and tiny_config().d_head == 8  # d_kv, else d_model / n_heads
    old = tiny_config().to_dict()
    for name in ("d_kv", "attention_scale", "norm_kind", "gated_ffn", "linear_bias", "relative_buckets"):
        old.pop(name)
    assert ModelConfig.from_dict(old) == tiny_config()  # a config.json written before these fields loads the same
    assert tiny_config(d_model=16, n_heads=3, d_kv=4).d_head == 4  # heads need not divide d_model with d_kv
    for bad, message in (
        (dict(n_heads=3), "must be divisible by n_heads"),
        (dict(d_kv=0), "d_kv must be null or a whole number"),
        (dict(norm_kind="batch"), "norm_kind must be one of"),
        (dict(gated_ffn=1), "gated_ffn must be true or false"),
        (dict(relative_buckets=2), "relative_buckets must be a whole number"),
        (dict(relative_buckets=32, relative_max_distance=16), "must exceed half of relative_buckets"),
        (dict(activation="gelu_fast"), "activation must be one of"),
    ):
        with pytest.raises(ValueError, match=message):
            tiny_config(**bad)


def test_relative_buckets_are_t5s():
    rel = torch.tensor([0, 1, -1, 7, -7, -8, -20, 30, -200])
    # bidirectional, 32 buckets, max distance 128: 16 per direction, 8 exact, then log-spaced to 128
    both = relative_bucket(rel, True, 32, 128).tolist()
    log = [8 + int(math.log(d / 8) / math.log(128 / 8) * 8) for d in (8, 20, 30)]
    assert both == [0, 17, 1, 16 + 7, 7, log[0], log[1], 16 + log[2], 15]
    # causal: keys after the query share bucket 0; 16 exact, then log-spaced to 128
    causal = relative_bucket(rel, False, 32, 128).tolist()
    assert causal == [0, 0, 1, 0, 7, 8, 16 + int(math.log(20 / 16) / math.log(128 / 16) * 16), 0, 31]


@torch.no_grad()
def test_rmsnorm_gated_ffn_gelu_new_and_unscaled_heads_do_what_they_say():
    model = t5_model("v1.1")
    cfg = model.config
    norm = make_norm(cfg)
    x = torch.randn(2, 3, cfg.d_model)
    torch.testing.assert_close(norm(x), x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    assert isinstance(make_norm(tiny_config()), torch.nn.LayerNorm)
    ffn = model.encoder_layers[0].ffn
    assert ffn.linear1.bias is None and ffn.linear_up is not None
    expected = ffn.linear2(F.gelu(ffn.linear1(x), approximate="tanh") * ffn.linear_up(x))
    torch.testing.assert_close(ffn(x), expected)
    attn = model.encoder_layers[0].self_attn
    assert attn.q_proj.weight.shape == (cfg.n_heads * 5, cfg.d_model) and attn.out_proj.weight.shape == (16, 10)
    recorder = Recorder(model, qkv=True)
    src, keep = source()
    model.encode(src, keep, Call(recorder=recorder))
    trace = recorder.freeze()
    q, k = trace.arrays["encoder.0.self.q"], trace.arrays["encoder.0.self.k"]  # (B, H, T, 5)
    bias = trace.arrays["pe.src.bias"]  # (H, Ts, Ts)
    raw = np.einsum("bhqd,bhkd->bhqk", q, k) + bias[None]  # no 1/sqrt(d_kv)
    np.testing.assert_allclose(trace.arrays["encoder.0.self.scores_raw"], raw, atol=1e-5)


@torch.no_grad()
def test_the_bias_is_made_once_per_stack_bidirectional_in_the_encoder_and_causal_in_the_decoder():
    model = t5_model("v1.0")
    assert model.encoder_bias is not None and model.decoder_bias is not None
    assert not any("bias.embedding" in name for name, _ in model.encoder_layers.named_parameters())  # per stack
    src, keep = source()
    recorder = Recorder(model)
    out = greedy(model, src, keep, Call(recorder=recorder, max_len=6))
    trace = recorder.freeze()
    table = model.encoder_bias.embedding.weight  # (buckets, H)
    enc = trace.arrays["pe.src.bias"]  # (H, Ts, Ts)
    # 8 buckets: 4 per direction; one key after the query is bucket 4 + 1, one before it bucket 1
    assert enc[0, 2, 3] == pytest.approx(float(table[5, 0])) and enc[1, 3, 2] == pytest.approx(float(table[1, 1]))
    dec = trace.arrays["pe.tgt.bias"]  # (H, Tt, Tt), stitched from one row per step
    n = out.tokens.shape[1] - 1
    assert dec.shape == (2, n, n)
    full = model.decoder_bias(n, n)[0].numpy()
    lower = np.tril(np.ones((n, n), dtype=bool))
    np.testing.assert_allclose(dec[:, lower], full[:, lower], atol=1e-6)  # the keys each step saw
    bucket0 = model.decoder_bias.embedding.weight[0].numpy()  # (H,)
    np.testing.assert_allclose(full[:, ~lower], np.repeat(bucket0[:, None], (~lower).sum(), 1))  # later keys: bucket 0


@pytest.mark.parametrize("version", list(VERSIONS))
@torch.no_grad()
def test_the_fast_path_equals_the_textbook_path(version):
    model = t5_model(version)
    src, keep = source()
    textbook = greedy(model, src, keep, Call(recorder=Recorder(model), max_len=8))
    fast = greedy(model, src, keep, Call(fast=FastWeights(model), max_len=8))  # fused attention, step plan
    assert torch.equal(textbook.tokens, fast.tokens)
    for a, b in zip(textbook.steps, fast.steps, strict=True):
        torch.testing.assert_close(a.top_probs, b.top_probs, atol=1e-5, rtol=1e-4)
    # a recorded run on the step plan records what the module path records
    rec_fast, rec_ref = Recorder(model, qkv=True), Recorder(model, qkv=True)
    greedy(model, src, keep, Call(recorder=rec_fast, fast=FastWeights(model), max_len=8))
    greedy(model, src, keep, Call(recorder=rec_ref, max_len=8))
    a, b = rec_fast.freeze(), rec_ref.freeze()
    assert a.keys() == b.keys() and "pe.tgt.bias" in a.keys()
    for name in b.keys():
        if b.arrays[name].dtype == np.float32:
            np.testing.assert_allclose(a.arrays[name], b.arrays[name], atol=1e-5, rtol=1e-4, err_msg=name)
    # incremental decoding equals one teacher-forced pass over the same output
    tgt = textbook.tokens[:, :-1]
    logits = model(src, tgt, Call(), src_keep=keep)  # (B, T, V)
    probs = torch.softmax(logits, -1)
    for t, step in enumerate(textbook.steps[: tgt.shape[1]]):
        torch.testing.assert_close(probs[:, t].gather(1, step.top_ids), step.top_probs, atol=1e-5, rtol=1e-4)


@torch.no_grad()
def test_the_tied_head_is_rescaled_and_the_untied_one_is_not():
    h = torch.randn(1, 3, 16)
    v10, v11 = t5_model("v1.0"), t5_model("v1.1")
    assert v10.output.weight is v10.tgt_embed.weight and v11.output.weight is not v11.tgt_embed.weight
    torch.testing.assert_close(v10.logits(h), F.linear(h * 16**-0.5, v10.tgt_embed.weight))
    torch.testing.assert_close(v11.logits(h), F.linear(h, v11.output.weight))
    vocab = torch.tensor([1, 4, 9])
    torch.testing.assert_close(v10.logits(h, Call(vocab=vocab)), v10.logits(h)[..., vocab])


@pytest.mark.parametrize("version", list(VERSIONS))
@torch.no_grad()
def test_switches_and_interventions_work_on_t5(version):
    model = t5_model(version)
    src, keep = source()
    tgt = torch.tensor([[0, 5, 6, 7], [0, 8, 9, 1]])

    def run(options=InferenceOptions(), **recording):
        recorder = Recorder(model, **recording)
        logits = model(src, tgt, Call(options=options, recorder=recorder), src_keep=keep)
        return logits, recorder.freeze()

    base, trace = run(activations=True)
    # PE off: the bias is what T5 has for positions; it is gone (recorded as zeros) and the output changes
    off, off_trace = run(InferenceOptions(positional_encoding=False))
    assert not off_trace.arrays["pe.src.bias"].any() and not off_trace.arrays["pe.tgt.bias"].any()
    assert trace.arrays["pe.src.bias"].any() and not torch.allclose(base, off, atol=1e-4)
    _, enc_trace = run(InferenceOptions(encoder_pe=False))
    assert not enc_trace.arrays["pe.src.bias"].any() and enc_trace.arrays["pe.tgt.bias"].any()
    # absolute positions: none (zeros), as the Positional-encoding page should say
    assert not trace.arrays["pe.src"].any()
    # masks
    no_causal, nc_trace = run(InferenceOptions(causal_mask=False))
    assert nc_trace.arrays["mask.decoder"].all() and not torch.allclose(base[:, 0], no_causal[:, 0], atol=1e-5)
    assert (trace.arrays["encoder.0.self.weights"][1, :, :, 4:] == 0).all()  # padding gets no weight
    # a head switched off: its output is zero, the logits change
    ablated, ab_trace = run(InferenceOptions(ablate=frozenset({("decoder", 1, 0)})), activations=True)
    assert not ab_trace.arrays["decoder.1.self.heads"][:, 0].any() and not torch.allclose(base, ablated)
    # scale a head and patch the residual stream through the recorder
    rec = Recorder(model, interventions=[ScaleHeads("decoder.0.cross", (1,), 0.0)])
    torch.testing.assert_close(model(src, tgt, Call(recorder=rec), src_keep=keep), ablated_cross(model, src, tgt, keep))
    moved = torch.from_numpy(trace.arrays["encoder.1.out"][1].copy()) + 1.0  # (Ts, D)
    rec = Recorder(model, interventions=[Patch("encoder.1.out", moved, rows=(1,))])
    patched = model(src, tgt, Call(recorder=rec), src_keep=keep)
    torch.testing.assert_close(patched[0], base[0])
    assert not torch.allclose(patched[1], base[1], atol=1e-4)
    # gradients at the embeddings (attribution) flow through the bias, RMSNorm and the gated FFN
    with torch.enable_grad():
        rec = Recorder(model, record=False, keep_grad=("embed.src",))
        model(src, tgt, Call(recorder=rec), src_keep=keep)[:, -1].logsumexp(-1).sum().backward()
        grad = rec.leaf("embed.src").grad
    assert grad is not None and grad[keep].abs().sum(-1).gt(0).all() and not grad[~keep].any()  # padding: none


def ablated_cross(model: Transformer, src, tgt, keep) -> torch.Tensor:
    return model(src, tgt, Call(options=InferenceOptions(ablate=frozenset({("cross", 0, 1)}))), src_keep=keep)


@torch.no_grad()
def test_beam_search_runs_on_t5_and_width_one_is_greedy():
    model = t5_model("v1.1", seed=3)
    src = torch.tensor([[5, 6, 7, 8, 1]])
    keep = torch.ones_like(src, dtype=torch.bool)
    fast = FastWeights(model)
    one = beam_search(model, src, keep, Call(fast=fast, beam_size=1, max_len=8))
    assert one == greedy(model, src, keep, Call(fast=fast, max_len=8)).tokens[0, 1:].tolist()[: len(one)]
    four = beam_search(model, src, keep, Call(fast=fast, beam_size=4, max_len=8))
    assert four == beam_search(model, src, keep, Call(beam_size=4, max_len=8))  # fast path == textbook


def test_a_t5_checkpoint_saves_and_loads_with_every_tensor(tmp_path):
    overrides = dict(T5_V11, pad_id=0, bos_id=0, eos_id=2, unk_id=3)  # the test tokenizer's ids
    path = build_tiny_checkpoint(tmp_path / "t5", **overrides)
    bundle = core.load(path, device="cpu")
    assert bundle.config.gated_ffn and bundle.config.positional == "relative"
    assert bundle.model.decoder_bias is not None and bundle.model.decoder_bias.embedding.weight.shape == (8, 2)
    out = bundle.translate("The cat sleeps.", max_len=6)
    assert out.trace["pe.src.bias"].shape[0] == 2
    again = Trace.load(out.trace.save(tmp_path / "trace.npz"))  # the bias passes the trace's shape checks
    for side in ("src", "tgt"):
        np.testing.assert_array_equal(again[f"pe.{side}.bias"], out.trace[f"pe.{side}.bias"])


@torch.no_grad()
def test_keys_and_values_of_their_own_size_run_the_papers_table_3_row_b():
    from core.anatomy.parameters import check_parameters, parameter_table

    cfg = tiny_config(d_kv=4, d_v=12)  # d_k 4 and d_v 12 with d_model 16 over 2 heads: neither is d_model / h
    assert (cfg.d_head, cfg.d_value) == (4, 12) and tiny_config(d_kv=5).d_value == 5
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    assert check_parameters(parameter_table(cfg), model).ok
    src, keep = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]]), torch.tensor([[1] * 5, [1, 1, 1, 0, 0]]).bool()
    textbook, fast = Recorder(model, qkv=True), Recorder(model, qkv=True)
    a = greedy(model, src, keep, Call(recorder=textbook, max_len=6))
    b = greedy(model, src, keep, Call(recorder=fast, fast=FastWeights(model), max_len=6))
    c = greedy(model, src, keep, Call(fast=FastWeights(model), max_len=6))  # fused attention, no recorder
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.tokens, c.tokens)
    ta, tb = textbook.freeze(), fast.freeze()
    assert ta.arrays["decoder.1.self.q"].shape[-1] == 4 and ta.arrays["decoder.1.self.v"].shape[-1] == 12
    for name in ta.keys():
        if ta.arrays[name].dtype == np.float32:
            np.testing.assert_allclose(tb.arrays[name], ta.arrays[name], atol=1e-5, rtol=1e-4, err_msg=name)
    with pytest.raises(ValueError, match="d_v must be null or a whole number"):
        tiny_config(d_v=0)
