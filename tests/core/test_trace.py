"""The site-keyed Trace: one store for everything, its parts, export and reload (without the model)."""

import dataclasses
import io
import math
import pickle
import re

import numpy as np
import pytest
import torch
from conftest import tiny_config

import core
from core import InferenceOptions, Recorder, Trace, Transformer, Translation
from core.decoding.search import greedy
from core.recording.call import Call
from core.sites import attention_array, gate_site, mask_site, migrate_site_name


@pytest.fixture(scope="module")
def bundle(tiny_checkpoint):
    return core.load(tiny_checkpoint, device="cpu")


def test_every_site_is_recorded_under_one_vocabulary(bundle):
    out = bundle.translate("Is there any tea left?", max_len=6)
    trace = out.trace
    keys = set(trace.keys())
    for kind in ("encoder", "decoder", "cross"):
        for layer in range(2):
            for array in ("weights", "scores", "scores_raw", "q", "k", "v"):
                assert attention_array(kind, layer, array) in keys, attention_array(kind, layer, array)
        assert mask_site(kind) in keys and mask_site(kind, "padding") in keys
    assert {
        "mask.decoder.causal",
        "pe.src",
        "pe.tgt",
        "ids.src",
        "ids.tgt",
        "keep.src",
        "output.ids",
        "output.probs",
        "output.top_ids",
        "output.top_probs",
    } <= keys
    assert "decoder.0.self.step_rows" not in keys  # only when steps recompute the prefix
    # the helpers read the same store
    assert trace["decoder.1.cross.weights"] is not None
    np.testing.assert_array_equal(trace["decoder.1.cross.weights"], trace.attention("cross", 1))
    np.testing.assert_array_equal(trace["decoder.0.self.scores_raw"], trace.scores("decoder", 0, masked=False))
    with pytest.raises(KeyError, match="decoder.7.cross.weights"):
        trace["decoder.7.cross.weights"]
    assert trace.shape.n_layers == {"encoder": 2, "decoder": 2, "cross": 2}
    assert trace.options == InferenceOptions()


def test_raw_scores_are_q_dot_k_and_the_mask_makes_the_scores(bundle):
    texts = ["Hello.", "The cat sleeps on the warm chair because it is tired."]
    batch = bundle.translate_batch(texts, max_len=5, record=core.Record(qkv=True))
    short = batch[0].trace
    assert not short["keep.src"].all()  # the short sentence was padded
    for kind in ("encoder", "cross", "decoder"):
        q, k, _ = short.qkv(kind, 1)
        raw = short.scores(kind, 1, masked=False)
        # incremental decoding: a step's later keys did not exist yet, so they have no score (-inf)
        existed = short.mask("decoder", "causal") if kind == "decoder" else np.ones(raw.shape[1:], dtype=bool)
        assert np.isneginf(raw[:, ~existed]).all()
        np.testing.assert_allclose(
            raw[:, existed], (q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1]))[:, existed], atol=1e-4
        )
        mask = short.mask(kind)
        masked = short.scores(kind, 1)
        np.testing.assert_array_equal(masked[:, mask], raw[:, mask])
        assert np.isneginf(masked[:, ~mask]).all()
    pad_keys = ~short["keep.src"]
    assert not short.mask("encoder", "padding")[:, pad_keys].any()
    assert short.mask("encoder", "padding")[:, ~pad_keys].all()
    assert short.src_tokens[-1] == "<pad>" and batch[1].src_tokens[-1] == "</s>"
    causal = short.mask("decoder", "causal")
    np.testing.assert_array_equal(causal, np.tril(np.ones_like(causal)))


def test_arrays_are_read_only(bundle):
    trace = bundle.translate("Is there any tea left?", max_len=4).trace
    with pytest.raises(ValueError):
        trace["encoder.0.self.weights"][0, 0, 0] = 1.0


@pytest.mark.parametrize("suffix", [".npz", ".json"])
def test_a_saved_trace_reloads_into_the_same_translation(bundle, tmp_path, suffix):
    out = bundle.translate("The cat sleeps on the warm chair.", max_len=6)
    path = out.trace.save(tmp_path / f"trace{suffix}")
    again = Translation(Trace.load(path))
    assert again.text == out.text and again.source_text == out.source_text == "The cat sleeps on the warm chair."
    assert again.src_tokens == out.src_tokens and again.tgt_tokens == out.tgt_tokens
    assert again.output_tokens == out.output_tokens
    assert [s.token for s in again.steps] == [s.token for s in out.steps]
    assert [s.top_k[0][0] for s in again.steps] == [s.top_k[0][0] for s in out.steps]
    assert again.options == out.options and again.trace.shape == out.trace.shape
    assert set(again.trace.keys()) == set(out.trace.keys())
    tol = 0 if suffix == ".npz" else 1e-4
    for name in out.trace.keys():
        a, b = out.trace.arrays[name], again.trace.arrays[name]
        assert a.dtype == b.dtype and a.shape == b.shape, name
        if a.dtype == np.float32:
            np.testing.assert_allclose(b, a, atol=tol, err_msg=name)  # -inf stays -inf
        else:
            np.testing.assert_array_equal(b, a, err_msg=name)
    for s_new, s_old in zip(again.steps, out.steps, strict=True):
        np.testing.assert_allclose(s_new.attention("cross", 1), s_old.attention("cross", 1), atol=tol)


def test_causal_mask_off_keeps_what_each_step_computed(bundle):
    opts = InferenceOptions(causal_mask=False)
    out = bundle.translate("Where is the railway station?", opts, max_len=5)
    n = len(out.steps)
    rows = out.trace.step_rows("decoder", 1)
    assert rows is not None and rows.shape[:2] == (2, n)
    # step i recomputed the prefix of i + 1 decoder inputs: its row is that pass's last row
    src = torch.tensor(out.trace["ids.src"])[None]
    for i in range(n):
        tgt = torch.tensor(out.trace["ids.tgt"][: i + 1])[None]
        rec = Recorder(bundle.model)
        with torch.no_grad():
            bundle.model(src, tgt, call=Call(options=opts, recorder=rec))
        own = rec.freeze().attention("decoder", 1)[:, -1]  # (H, i + 1)
        np.testing.assert_allclose(out.steps[i].attention("decoder", 1), own, atol=1e-5)
        np.testing.assert_allclose(rows[:, i, : i + 1], own, atol=1e-5)
    # the last step's row is also the final pass's; earlier ones differ from the final pass's rows when later
    # tokens changed what earlier positions saw
    np.testing.assert_allclose(rows[:, -1], out.trace.attention("decoder", 1)[:, -1], atol=1e-6)


def test_load_refuses_what_is_not_a_trace_and_never_unpickles(tmp_path):
    with pytest.raises(ValueError, match="not a trace"):
        Trace.load(b"hello")
    with pytest.raises(ValueError, match="format"):
        Trace.load(b'{"format": "something else", "arrays": {}}')
    with pytest.raises(ValueError, match="cannot read"):
        Trace.load(tmp_path / "missing.npz")

    marker = tmp_path / "unpickled"

    class Boom:
        def __reduce__(self):
            return (marker.write_text, ("ran",))

    buffer = io.BytesIO()
    np.savez(buffer, metadata=np.array(pickle.dumps(Boom()), dtype=object), evil=np.array([Boom()], dtype=object))
    with pytest.raises(ValueError):
        Trace.load(buffer.getvalue())
    assert not marker.exists()


def test_recorder_is_made_from_the_model_and_freezes_once_it_ran(model):
    rec = Recorder(model)
    with pytest.raises(RuntimeError, match="nothing was recorded"):
        rec.freeze()
    src = torch.randint(4, 64, (1, 5))
    with torch.no_grad():
        model(src, src, call=Call(recorder=rec))
    trace = rec.freeze()
    assert trace.src_tokens == [str(i) for i in src[0].tolist()]  # no tokenizer given: ids as text
    assert trace.kinds == ("encoder", "decoder", "cross") and trace.n_heads == model.config.n_heads
    with pytest.raises(RuntimeError, match="record=False"):
        Recorder(model, record=False).freeze()


def test_the_decoder_stream_is_recorded_once_when_each_step_recomputes_the_prefix(tiny_checkpoint):
    """With the causal mask off every step re-runs the whole prefix; the record keeps the last pass only."""
    bundle = core.load(tiny_checkpoint, device="cpu")
    out = bundle.translate(
        "The cat sleeps on the warm chair.",
        options=core.InferenceOptions(causal_mask=False),
        max_len=6,
        record=core.Record(activations=True),
    )
    n = len(out.tgt_tokens)
    assert out.trace["embed.tgt"].shape[-2] == n and out.trace["decoder.0.out"].shape[-2] == n


def _old_name(name: str) -> str:
    """A site name as traces were written before the one grammar: 'cross.{l}' held the decoder's cross-attention
    (now 'decoder.{l}.cross') and 'ssru.{l}.gate' the SSRU gates (now 'decoder.{l}.ssru.gate')."""
    if m := re.fullmatch(r"decoder\.(\d+)\.cross((?:\..+)?)", name):
        return f"cross.{m[1]}{m[2]}"
    if m := re.fullmatch(r"decoder\.(\d+)\.ssru\.gate", name):
        return f"ssru.{m[1]}.gate"
    return name


def _write_old(trace: Trace, path):
    old = dataclasses.replace(trace, arrays={_old_name(k): a for k, a in trace.arrays.items()})
    return old.save(path)


@pytest.mark.parametrize("suffix", [".npz", ".json"])
def test_a_trace_saved_with_the_old_site_names_opens_under_the_new_ones(bundle, tmp_path, suffix):
    out = bundle.translate("The cat sleeps on the warm chair.", max_len=6, record=core.Record(activations=True))
    new = out.trace
    old_keys = {_old_name(k) for k in new.keys()}
    assert "cross.0.weights" in old_keys and "cross.1.heads" in old_keys and "decoder.0.cross.q" not in old_keys
    again = Trace.load(_write_old(new, tmp_path / f"old{suffix}"))
    assert set(again.keys()) == set(new.keys())
    tol = 0 if suffix == ".npz" else 1e-4
    for layer in range(new.shape.n_decoder_layers):
        np.testing.assert_allclose(again.attention("cross", layer), new.attention("cross", layer), atol=tol)
        for masked in (True, False):
            np.testing.assert_allclose(
                again.scores("cross", layer, masked=masked), new.scores("cross", layer, masked=masked), atol=tol
            )
        for a, b in zip(again.qkv("cross", layer), new.qkv("cross", layer), strict=True):
            np.testing.assert_allclose(a, b, atol=tol)
        heads = attention_array("cross", layer, "heads")
        np.testing.assert_allclose(again[heads], new[heads], atol=tol)
    np.testing.assert_array_equal(again.mask("cross"), new.mask("cross"))
    assert again.kinds == new.kinds and again.n_layers == new.n_layers
    assert [s.attention("cross", 1).shape for s in Translation(again).steps] == [
        s.attention("cross", 1).shape for s in out.steps
    ]


def test_old_ssru_gate_names_open_under_the_new_ones(tmp_path):
    model = Transformer(tiny_config(decoder_self="ssru")).eval()
    rec = Recorder(model)
    src = torch.tensor([[5, 6, 7, 2]])
    with torch.no_grad():
        greedy(model, src, torch.ones_like(src, dtype=torch.bool), call=Call(recorder=rec, max_len=4))
    new = rec.freeze()
    assert new.has_gates and gate_site(1) == "decoder.1.ssru.gate" in new.keys()
    again = Trace.load(_write_old(new, tmp_path / "old.npz"))
    assert set(again.keys()) == set(new.keys()) and again.has_gates
    np.testing.assert_array_equal(again.gates(1), new.gates(1))
    assert migrate_site_name("ssru.0.gate") == "decoder.0.ssru.gate"
    assert migrate_site_name("cross.3") == "decoder.3.cross"
    assert migrate_site_name("cross.3.scores_raw") == "decoder.3.cross.scores_raw"
    assert migrate_site_name("mask.cross") == "mask.cross" and migrate_site_name("mask.cross.padding")
    assert migrate_site_name("decoder.0.cross.weights") == "decoder.0.cross.weights"
