"""Per-call interventions: head scaling (ablation), value scaling (value zeroing), activation patching, gradients —
nothing stored on the model."""

import threading

import numpy as np
import pytest
import torch

import core
from core import FastWeights, InferenceOptions, Patch, Recorder, ScaleHeads, ScaleValues
from core.decoding.search import greedy
from core.recording.call import Call
from core.sites import attention_array, layer_site


def pair(seed=0, Ts=6, Tt=5, vocab=64):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, vocab, (1, Ts), generator=g), torch.randint(4, vocab, (1, Tt), generator=g)


def logits(model, src, tgt, *interventions, options=InferenceOptions(), **kwargs):
    rec = Recorder(model, record=False, interventions=interventions, **kwargs)
    with torch.no_grad():
        return model(src, tgt, call=Call(options=options, recorder=rec))


def test_scale_heads_zero_is_the_options_ablation(model):
    src, tgt = pair()
    base = logits(model, src, tgt)
    off = logits(model, src, tgt, ScaleHeads("decoder.1.cross", heads=(0,)))
    by_options = model(src, tgt, call=Call(options=InferenceOptions(ablate=frozenset({("cross", 1, 0)}))))
    assert not torch.allclose(off, base, atol=1e-4)  # it did something
    torch.testing.assert_close(off, by_options)


def test_scale_heads_multiplies_the_head_output(model):
    src, tgt = pair(1)
    rec_base, rec_scaled = (
        Recorder(model, activations=True),
        Recorder(model, activations=True, interventions=[ScaleHeads("encoder.0.self", (1,), 2.5)]),
    )
    with torch.no_grad():
        model(src, tgt, call=Call(recorder=rec_base))
        model(src, tgt, call=Call(recorder=rec_scaled))
    base, scaled = rec_base.freeze()["encoder.0.self.heads"], rec_scaled.freeze()["encoder.0.self.heads"]
    np.testing.assert_allclose(scaled[1], 2.5 * base[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(scaled[0], base[0], atol=1e-6)


def test_rows_let_one_batch_ablate_a_different_head_per_row(model):
    src, tgt = pair(2)
    B = model.config.n_heads + 1
    interventions = [ScaleHeads("decoder.0.self", (h,), rows=(h + 1,)) for h in range(model.config.n_heads)]
    batched = logits(model, src.expand(B, -1), tgt.expand(B, -1), *interventions)
    torch.testing.assert_close(batched[0], logits(model, src, tgt)[0], atol=1e-5, rtol=1e-5)
    for h in range(model.config.n_heads):
        one = logits(model, src, tgt, ScaleHeads("decoder.0.self", (h,)))
        torch.testing.assert_close(batched[h + 1], one[0], atol=1e-5, rtol=1e-5)


def recorded(model, src, tgt):
    rec = Recorder(model, activations=True)
    with torch.no_grad():
        out = model(src, tgt, call=Call(recorder=rec))
    return out, rec.freeze()


def test_patching_a_whole_stream_restores_the_clean_run(model):
    clean_src, tgt = pair(3)
    corrupt_src = clean_src.clone()
    corrupt_src[0, 2] = (clean_src[0, 2] + 7) % 60 + 4  # one word replaced
    clean, clean_trace = recorded(model, clean_src, tgt)
    corrupt = logits(model, corrupt_src, tgt)
    assert not torch.allclose(clean, corrupt, atol=1e-4)
    last = model.config.n_encoder_layers - 1
    for site in ("embed.src", layer_site("encoder", last)):
        patched = logits(model, corrupt_src, tgt, Patch(site, clean_trace[site]))
        torch.testing.assert_close(patched, clean, atol=1e-5, rtol=1e-5)
    # one position only: the embedding of the replaced word is all that differs, so patching it restores the run
    patched = logits(model, corrupt_src, tgt, Patch("embed.src", clean_trace["embed.src"], positions=(2,)))
    torch.testing.assert_close(patched, clean, atol=1e-5, rtol=1e-5)
    # a position that did not change restores nothing
    patched = logits(model, corrupt_src, tgt, Patch("embed.src", clean_trace["embed.src"], positions=(0,)))
    torch.testing.assert_close(patched, corrupt, atol=1e-6, rtol=1e-6)
    # every cross-attention head of the last layer, patched from the clean run: the last layer's output is clean
    name = attention_array("cross", model.config.n_decoder_layers - 1, "heads")
    patched = logits(model, corrupt_src, tgt, Patch(name, clean_trace[name]))
    assert not torch.allclose(patched, corrupt, atol=1e-4)


def decoded_and_forced(model, src, *interventions):
    """Greedy decoding step by step (the fast plan: keys and values cached across steps) with ``interventions``, and
    one teacher-forced pass over its outputs with the same: (decoding's result, its trace, the pass's logits and
    trace)."""
    keep = torch.ones_like(src, dtype=torch.bool)
    rec = Recorder(model, interventions=interventions)
    out = greedy(
        model, src, keep, call=Call(options=InferenceOptions(), recorder=rec, fast=FastWeights(model), max_len=5)
    )
    rec_tf = Recorder(model, interventions=interventions)
    with torch.no_grad():
        tf_logits = model(src, out.tokens[:, : len(out.steps)], call=Call(recorder=rec_tf))
    return out, rec.freeze(), tf_logits, rec_tf.freeze()


def test_patching_applies_at_the_same_positions_when_decoding_step_by_step(model):
    src, _ = pair(4)
    value = torch.randn(8, model.config.d_model)
    out, stepwise, tf_logits, forced = decoded_and_forced(model, src, Patch("decoder.0.out", value, positions=(2,)))
    np.testing.assert_allclose(stepwise["output.top_ids"][:, 0], tf_logits[0].argmax(-1).numpy())
    np.testing.assert_allclose(stepwise["decoder.1.cross.weights"], forced["decoder.1.cross.weights"], atol=1e-5)
    keep = torch.ones_like(src, dtype=torch.bool)
    unpatched = greedy(model, src, keep, call=Call(options=InferenceOptions(), max_len=5))
    assert unpatched.steps[2].probs.item() != pytest.approx(out.steps[2].probs.item(), abs=1e-6)


def test_scale_values_changes_the_values_of_its_rows_keys_and_heads_only(model):
    src, tgt = pair()
    B, site = 3, "encoder.0.self"
    zero_row1 = ScaleValues(site, (2,), rows=(1,))  # every head
    half_row2 = ScaleValues(site, (4,), factor=0.5, heads=(1,), rows=(2,))
    rec, plain = (Recorder(model, qkv=True, activations=True, interventions=i) for i in ((zero_row1, half_row2), ()))
    with torch.no_grad():
        model(src.expand(B, -1), tgt.expand(B, -1), call=Call(recorder=rec))
        model(src, tgt, call=Call(recorder=plain))
    trace, base = rec.freeze(), plain.freeze()
    v = np.stack([trace.select(b)[f"{site}.v"] for b in range(B)])  # (B, H, Ts, dv)
    expected = np.repeat(base[f"{site}.v"][None], B, axis=0)
    expected[1, :, 2] = 0.0
    expected[2, 1, 4] *= 0.5
    np.testing.assert_allclose(v, expected, atol=1e-6)
    for b in range(B):  # the weights are untouched; each head's output weighs the changed values
        item = trace.select(b)
        np.testing.assert_allclose(item[f"{site}.weights"], base[f"{site}.weights"], atol=1e-6)
        np.testing.assert_allclose(item[f"{site}.heads"], item[f"{site}.weights"] @ v[b], atol=1e-5)
    np.testing.assert_allclose(trace.select(0)["encoder.0.out"], base["encoder.0.out"], atol=1e-5)
    assert not np.allclose(trace.select(1)["encoder.0.out"], base["encoder.0.out"], atol=1e-4)
    same = logits(model, src, tgt, ScaleValues("decoder.1.cross", (0, 1, 2), factor=1.0))
    torch.testing.assert_close(same, logits(model, src, tgt))


@pytest.mark.parametrize("site, position", [("decoder.0.self", 1), ("decoder.1.cross", 3)])
def test_scale_values_applies_at_the_same_keys_when_decoding_step_by_step(model, site, position):
    """A cached decoding step zeroes the same absolute key positions as one teacher-forced pass."""
    src, _ = pair(4)
    out, stepwise, tf_logits, _ = decoded_and_forced(model, src, ScaleValues(site, (position,)))
    tokens = out.tokens[0, 1 : len(out.steps) + 1, None]
    probs = torch.softmax(tf_logits[0], -1).gather(-1, tokens)[:, 0]
    np.testing.assert_allclose(stepwise["output.probs"], probs.numpy(), rtol=1e-4, atol=1e-6)
    assert not torch.allclose(tf_logits, logits(model, src, out.tokens[:, : len(out.steps)]), atol=1e-4)


def test_keep_grad_gives_the_gradient_at_the_source_embeddings(model):
    src, tgt = pair(5)
    rec = Recorder(model, record=False, keep_grad=("embed.src",))
    with torch.enable_grad():
        out = model(src, tgt, call=Call(recorder=rec))
        out[0, -1].max().backward()
    grad = rec.leaf("embed.src").grad
    assert grad is not None and grad.shape == (1, src.shape[1], model.config.d_model)
    assert grad.abs().sum(-1).gt(0).all()  # every source position influences the last prediction
    # the gradient is the real one: a small step along it raises the score by about |grad|^2 * eps
    leaf = rec.leaf("embed.src").detach()
    eps = 1e-3
    moved = logits(model, src, tgt, Patch("embed.src", (leaf + eps * grad)[0]))
    gain = float(moved[0, -1].max() - out[0, -1].max().detach())
    assert gain == pytest.approx(eps * float((grad**2).sum()), rel=0.1)
    with torch.no_grad(), pytest.raises(RuntimeError, match="needs gradients"):
        model(src, tgt, call=Call(recorder=Recorder(model, record=False, keep_grad=("embed.src",))))


def test_keep_grad_on_head_outputs_gives_each_heads_gate_gradient(model):
    """A '.heads' site keeps a (B, H) gate of ones: its gradient is d(score)/d(head's scale), which a small
    ScaleHeads step confirms, and nothing upstream is cut off (an earlier layer's gate gets its full gradient)."""
    src, tgt = pair(5)
    rec = Recorder(model, record=False, keep_grad=("decoder.1.cross.heads", "encoder.0.self.heads"))
    with torch.enable_grad():
        score = model(src, tgt, call=Call(recorder=rec))[0, -1].max()
        score.backward()
    for site in ("decoder.1.cross", "encoder.0.self"):
        gate = rec.leaf(f"{site}.heads")
        assert gate.shape == (1, model.config.n_heads) and bool((gate == 1).all()) and gate.grad is not None
        eps = 1e-3
        for h in range(model.config.n_heads):
            up, down = (float(logits(model, src, tgt, ScaleHeads(site, (h,), 1 + d))[0, -1].max()) for d in (eps, -eps))
            finite = (up - down) / (2 * eps)  # central difference of the score in the head's scale
            assert float(gate.grad[0, h]) == pytest.approx(finite, rel=0.05, abs=1e-3)
    with torch.no_grad(), pytest.raises(RuntimeError, match="needs gradients"):
        model(src, tgt, call=Call(recorder=Recorder(model, record=False, keep_grad=("decoder.0.cross.heads",))))
    with pytest.raises(ValueError, match="no attention site 'decoder.9.cross'"):
        Recorder(model, keep_grad=("decoder.9.cross.heads",))


def test_bad_interventions_are_named(model):
    with pytest.raises(ValueError, match="no attention site 'decoder.9.cross'"):
        Recorder(model, interventions=[ScaleHeads("decoder.9.cross", (0,))])
    with pytest.raises(ValueError, match="out of range"):
        Recorder(model, interventions=[ScaleHeads("decoder.0.cross", (5,))])
    with pytest.raises(ValueError, match="not an attention site"):
        ScaleHeads("crosses", (0,))
    with pytest.raises(ValueError, match="no site 'encoder.7.out'"):
        Recorder(model, interventions=[Patch("encoder.7.out", torch.zeros(3, 16))])
    with pytest.raises(ValueError, match=r"\(T, D\)"):
        Patch("embed.src", torch.zeros(2, 3, 16))
    with pytest.raises(ValueError, match="keep_grad"):
        Recorder(model, keep_grad=("decoder.0.cross",))
    with pytest.raises(ValueError, match="does not fit"):
        logits(model, *pair(), Patch("embed.src", torch.zeros(6, 7)))
    with pytest.raises(ValueError, match="not an attention site"):
        ScaleValues("encoder.0.out", (0,))
    with pytest.raises(ValueError, match="must be >= 0"):
        ScaleValues("encoder.0.self", (-1,))
    with pytest.raises(ValueError, match="no attention site 'decoder.9.cross'"):
        Recorder(model, interventions=[ScaleValues("decoder.9.cross", (0,))])
    with pytest.raises(ValueError, match="out of range"):
        Recorder(model, interventions=[ScaleValues("decoder.0.cross", (0,), heads=(5,))])


def test_interventions_never_change_the_model_and_calls_stay_independent_under_threads(tiny_checkpoint):
    bundle = core.load(tiny_checkpoint, device="cpu")
    before = {k: v.clone() for k, v in bundle.model.state_dict().items()}
    text = "The cat sleeps on the warm chair."
    variants = [
        InferenceOptions(),
        InferenceOptions(ablate=frozenset({("cross", 0, 0), ("cross", 1, 1)})),
        InferenceOptions(positional_encoding=False),
        InferenceOptions(causal_mask=False),
        InferenceOptions(ablate=frozenset({("encoder", 1, 0)})),
    ]
    expected = [bundle.translate(text, opts, max_len=8) for opts in variants]
    assert len({e.text for e in expected} | {tuple(e.output_tokens) for e in expected}) > 2  # they differ
    results: dict[int, list] = {}
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for round_ in range(4):
                i = (worker + round_) % len(variants)
                out = bundle.translate(text, variants[i], max_len=8)
                results.setdefault(worker, []).append((i, out))
        except BaseException as e:  # noqa: BLE001 — reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sum(len(v) for v in results.values()) == 24
    for outs in results.values():
        for i, out in outs:
            assert out.output_tokens == expected[i].output_tokens
            np.testing.assert_allclose(
                out.trace.attention("cross", 1), expected[i].trace.attention("cross", 1), atol=1e-6
            )
    for k, v in bundle.model.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)
