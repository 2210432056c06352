"""Head importance: one batched pass equals switching each head off alone; rankings and keep-only sets."""

from pathlib import Path

import numpy as np
import pytest
import torch

import core
from core import InferenceOptions
from core.analysis import all_heads_but, head_importance
from core.decoding.search import greedy
from core.recording.call import Call
from core.sites import attention_site


@pytest.fixture(scope="module")
def bundle(tiny_checkpoint):
    return core.load(tiny_checkpoint, device="cpu")


def logprob(model, src_ids, out_ids, options):
    src = torch.tensor([src_ids])
    tgt = torch.tensor([[model.config.bos_id] + out_ids[:-1]])
    with torch.no_grad():
        logp = torch.log_softmax(model(src, tgt, call=Call(options=options)).float(), -1)
    return float(logp[0, torch.arange(len(out_ids)), out_ids].sum())


def test_batched_rows_equal_each_head_switched_off_alone(bundle):
    out = bundle.translate("The cat sleeps on the warm chair.", max_len=6)
    src_ids, _ = bundle.encode_source(out.source_text)
    out_ids = [int(i) for i in out.trace["output.ids"]]
    result = head_importance(bundle, src_ids, out_ids)
    base = logprob(bundle.model, src_ids, out_ids, InferenceOptions())
    assert result.base_logprob == pytest.approx(base, abs=1e-4)
    assert len(result.effects) == 3 * 2 * 2  # 3 kinds x 2 layers x 2 heads
    for e in result.effects:
        alone = InferenceOptions(ablate=frozenset({(e.kind, e.layer, e.head)}))
        assert e.delta_logprob == pytest.approx(logprob(bundle.model, src_ids, out_ids, alone) - base, abs=1e-4)
        # 'output changes' is what greedy decoding with the head off really does
        src = torch.tensor([src_ids])
        single = greedy(
            bundle.model, src, torch.ones_like(src, dtype=torch.bool), call=Call(options=alone, max_len=len(out_ids))
        )
        own = single.tokens[0, 1 : 1 + single.lengths[0]].tolist()
        assert e.output_changed == (own != out_ids)
        if e.output_changed:
            padded = own + [-1] * (len(out_ids) - len(own))  # a shorter output differs where it ends
            first = next(t for t, (a, b) in enumerate(zip(padded[: len(out_ids)], out_ids, strict=True)) if a != b)
            assert e.first_change == first
    assert any(e.output_changed for e in result.effects) and not all(e.output_changed for e in result.effects)
    deltas = [e.delta_logprob for e in result.ranking()]
    assert deltas == sorted(deltas) and len(set(np.round(deltas, 6))) > 1  # heads differ
    m = result.matrix("cross")
    assert m.shape == (2, 2) and not np.isnan(m).any()
    assert result.to_dict()["heads"][0]["delta_logprob"] == deltas[0]


def test_heads_the_options_switch_off_stay_off_in_every_row(bundle):
    out = bundle.translate("Where is the station?", max_len=5)
    src_ids, _ = bundle.encode_source(out.source_text)
    out_ids = [int(i) for i in out.trace["output.ids"]]
    opts = InferenceOptions(ablate=frozenset({("encoder", 0, 0)}))
    r = head_importance(bundle, src_ids, out_ids, options=opts, kinds=("cross", "encoder"))
    assert r.base_logprob == pytest.approx(logprob(bundle.model, src_ids, out_ids, opts), abs=1e-4)
    for e in r.effects:  # the encoder rows resume at their layer with the options' switch still in effect
        both = InferenceOptions(ablate=opts.ablate | {(e.kind, e.layer, e.head)})
        want = logprob(bundle.model, src_ids, out_ids, both) - r.base_logprob
        assert e.delta_logprob == pytest.approx(want, abs=1e-4)
    assert {x.kind for x in r.effects} == {"cross", "encoder"}
    assert r.matrix("encoder")[0, 0] == 0.0  # already off: switching it off again changes nothing


def test_keep_only_the_top_heads(bundle):
    out = bundle.translate("The cat sleeps.", max_len=5)
    src_ids, _ = bundle.encode_source(out.source_text)
    r = head_importance(bundle, src_ids, [int(i) for i in out.trace["output.ids"]])
    off = all_heads_but(r.shape, r.top(3))
    assert len(off) == 12 - 3 and not off & set(r.top(3))
    kept = bundle.translate("The cat sleeps.", InferenceOptions(ablate=off), max_len=5)
    assert kept.options.ablate == off  # the translation with only those heads on runs and says so


def test_bad_requests_are_named(bundle, tmp_path):
    from conftest import build_tiny_checkpoint

    with pytest.raises(ValueError, match="at least one token"):
        head_importance(bundle, [5, 6, 2], [])
    ssru = core.load(build_tiny_checkpoint(tmp_path / "ssru", decoder_self="ssru"), device="cpu")
    with pytest.raises(ValueError, match="no decoder attention"):
        head_importance(ssru, [5, 6, 2], [7, 2], kinds=("decoder",))


def test_the_base_score_is_the_greedy_translation_probability_on_a_model_whose_pad_is_its_eos():
    # the shipped default (distilled from Bergamot): pad = bos = eos = 0, so ids cannot tell padding apart
    b = core.load(Path(__file__).resolve().parents[3] / "checkpoints" / "distilled-en-pt", device="cpu")
    assert b.config.pad_id == b.config.eos_id
    out = b.translate("The cat sleeps on the warm chair.", max_len=12)
    src = torch.tensor(out.trace["ids.src"])[None]
    assert b.model.keep_flags(src).all()  # the final eos is a real token
    src_ids = [int(i) for i in out.trace["ids.src"]]
    out_ids = [int(i) for i in out.trace["output.ids"]]
    r = head_importance(b, src_ids, out_ids, kinds=("cross",))
    assert r.base_logprob == pytest.approx(float(np.log(out.trace["output.probs"]).sum()), abs=1e-3)


def test_scoring_a_few_positions_at_a_time_equals_scoring_the_whole_logits(bundle, monkeypatch):
    """Rows are scored from the decoder's states in slices (no (rows, Tt, V) logits); the numbers are the
    full logits' whatever the slice."""
    import core.analysis.importance as importance

    out = bundle.translate("The cat sleeps on the warm chair.", max_len=6)
    src_ids, _ = bundle.encode_source(out.source_text)
    out_ids = [int(i) for i in out.trace["output.ids"]]
    src = torch.tensor([src_ids])
    tgt = torch.tensor([[bundle.config.bos_id] + out_ids[:-1]])
    opts = [InferenceOptions(ablate=frozenset({("cross", 1, h)})) for h in range(2)] + [InferenceOptions()]
    with torch.no_grad():
        states = torch.cat(
            [
                bundle.model.decoder_states(
                    tgt, bundle.model.encode(src, call=Call(options=o)), None, call=Call(options=o)
                )
                for o in opts
            ]
        )
        logits = bundle.model.logits(states)
    target = torch.tensor(out_ids)
    per_position = torch.log_softmax(logits, -1)[:, torch.arange(len(out_ids)), target]  # (rows, Tt)
    whole = per_position.sum(-1)
    first = [next((t for t in range(len(out_ids)) if int(row[t]) != out_ids[t]), None) for row in logits.argmax(-1)]
    for size in (1, 4, 1000):
        monkeypatch.setattr(importance, "POSITIONS_PER_PROJECTION", size)
        with torch.no_grad():
            sliced, first_sliced = importance._score_states(bundle.model, states, out_ids, None)
        np.testing.assert_allclose(sliced.numpy(), whole.numpy(), atol=1e-5)
        assert first_sliced == first
    assert len(set(np.round(whole.numpy(), 4))) == 3  # the rows differ: the slices were not all the same row


def test_the_gradient_estimate_is_the_first_order_change_of_switching_a_head_off(bundle):
    """One backward pass: each head's estimate is -d log p / d(scale) at scale 1, i.e. the measured change of
    scaling that head by 1 - eps, divided by eps; it is marked as an estimate and says nothing about the output."""
    from core.analysis import head_importance_estimate
    from core.recording.interventions import ScaleHeads
    from core.recording.recorder import Recorder

    out = bundle.translate("The cat sleeps on the warm chair.", max_len=6)
    src_ids, _ = bundle.encode_source(out.source_text)
    out_ids = [int(i) for i in out.trace["output.ids"]]
    est = head_importance_estimate(bundle, src_ids, out_ids)
    exact = head_importance(bundle, src_ids, out_ids)
    assert not est.exact and exact.exact
    assert est.base_logprob == pytest.approx(exact.base_logprob, abs=1e-4)
    assert [e.label for e in est.effects] == [e.label for e in exact.effects]
    assert all(e.output_changed is None and e.first_change is None for e in est.effects)
    src = torch.tensor([src_ids])
    tgt = torch.tensor([[bundle.config.bos_id] + out_ids[:-1]])

    def scaled(site, h, factor):
        rec = Recorder(bundle.model, record=False, interventions=[ScaleHeads(site, (h,), factor)])
        with torch.no_grad():
            logp = torch.log_softmax(bundle.model(src, tgt, call=Call(recorder=rec)).float(), -1)
        return float(logp[0, torch.arange(len(out_ids)), out_ids].sum())

    eps = 1e-3
    for e in est.effects:
        site = attention_site(e.kind, e.layer)
        first_order = (scaled(site, e.head, 1 - eps) - scaled(site, e.head, 1 + eps)) / (2 * eps)
        assert e.delta_logprob == pytest.approx(first_order, rel=0.05, abs=2e-3)
    # it ranks heads about as switching them off does (a first-order estimate, not the measurement)
    from core.analysis.attribution import spearman

    a = [e.delta_logprob for e in exact.effects]
    b = [e.delta_logprob for e in est.effects]
    assert spearman(np.array(a), np.array(b)) > 0.3
    arrays, meta = est.to_arrays()
    stored = bundle.translate("The cat sleeps on the warm chair.", max_len=6).trace.with_analysis(arrays, meta)
    back = type(est).from_trace(stored)
    assert back is not None and not back.exact and all(e.output_changed is None for e in back.effects)


def test_output_changes_follow_greedy_which_never_picks_a_suppressed_token():
    """A suppressed id (e.g. Marian's <pad>) on top does not count as a change: greedy takes the best of the rest;
    log p keeps the whole vocabulary's softmax, as decoding reports it."""
    from types import SimpleNamespace

    import core.analysis.importance as importance

    model = SimpleNamespace(logits=lambda h, fast: h, config=SimpleNamespace(suppress_ids=(2,)))  # identity projection
    states = torch.tensor([[[0.0, 1.0, 5.0, 0.0], [3.0, 0.0, 0.0, 1.0]]])  # (1, Tt=2, V=4)
    want = torch.log_softmax(states[0], -1)[[0, 1], [1, 3]].sum()
    logp, first = importance._score_states(model, states.clone(), [1, 3], None)  # (it may overwrite the logits)
    assert first == [1]  # position 0 keeps the translation's token 1 (2 is suppressed); position 1 prefers 0
    assert float(logp[0]) == pytest.approx(float(want), abs=1e-6)
    model.config.suppress_ids = ()
    assert importance._score_states(model, states.clone(), [1, 3], None)[1] == [0]  # unsuppressed, 2 wins at 0
