"""Activation patching: batched rows equal single patches; the replaced word's embedding restores everything."""

import numpy as np
import pytest
import torch

import core
from core import InputError, Patch, Recorder
from core.analysis.patching import activation_patching
from core.recording.call import Call


@pytest.fixture(scope="module")
def bundle(tiny_checkpoint):
    return core.load(tiny_checkpoint, device="cpu")


@pytest.fixture(scope="module")
def case(bundle):
    clean, _ = bundle.encode_source("The cat sleeps on the warm chair.")
    corrupt = list(clean)
    corrupt[1] = next(i for i in range(4, 100) if i not in clean)  # one piece replaced
    out = bundle.translate("The cat sleeps on the warm chair.", max_len=6)
    return clean, corrupt, [int(i) for i in out.trace["output.ids"]]


def prob(model, src_ids, out_ids, position, *interventions):
    src = torch.tensor([src_ids])
    tgt = torch.tensor([[model.config.bos_id] + out_ids[:-1]])
    with torch.no_grad():
        logits = model(
            src,
            tgt,
            call=Call(recorder=Recorder(model, record=False, interventions=interventions)),
            src_keep=torch.ones_like(src, dtype=torch.bool),
        )
    return float(torch.softmax(logits[0, position], -1)[out_ids[position]])


def test_every_site_equals_its_own_single_patch(bundle, case):
    clean, corrupt, out_ids = case
    r = activation_patching(bundle, clean, corrupt, out_ids, batch_rows=7)  # several chunks
    assert r.changed_positions == (1,)
    assert r.p_clean == pytest.approx(prob(bundle.model, clean, out_ids, r.position), abs=1e-5)
    assert r.p_corrupt == pytest.approx(prob(bundle.model, corrupt, out_ids, r.position), abs=1e-5)
    assert (
        r.encoder.shape == (3, len(clean)) and r.cross_heads.shape == (2, 2) and r.decoder.shape == (2, r.position + 1)
    )
    rec = Recorder(bundle.model, activations=True)
    src, tgt = torch.tensor([clean]), torch.tensor([[bundle.config.bos_id] + out_ids[:-1]])
    with torch.no_grad():
        bundle.model(src, tgt, call=Call(recorder=rec), src_keep=torch.ones_like(src, dtype=torch.bool))
    trace = rec.freeze()
    for layer, site in ((0, "embed.src"), (2, "encoder.1.out")):
        for j in (0, 1, len(clean) - 1):
            single = prob(bundle.model, corrupt, out_ids, r.position, Patch(site, trace[site], positions=(j,)))
            assert r.encoder[layer, j] == pytest.approx(single, abs=1e-5), (site, j)
    single = prob(
        bundle.model,
        corrupt,
        out_ids,
        r.position,
        Patch("decoder.1.cross.heads", trace["decoder.1.cross.heads"], heads=(1,)),
    )
    assert r.cross_heads[1, 1] == pytest.approx(single, abs=1e-5)


def test_the_replaced_embedding_restores_the_clean_run_and_the_others_do_nothing(bundle, case):
    clean, corrupt, out_ids = case
    r = activation_patching(bundle, clean, corrupt, out_ids)
    restored = r.restored(r.encoder)
    assert r.p_clean != pytest.approx(r.p_corrupt, abs=1e-4)  # the corruption mattered at this position
    assert restored[0, 1] == pytest.approx(1.0, abs=1e-4)  # the clean embedding at the replaced position
    others = np.delete(restored[0], 1)
    np.testing.assert_allclose(others, 0.0, atol=1e-4)  # unchanged positions restore nothing
    assert np.isfinite(r.restored(r.cross_heads)).all() and np.isfinite(r.restored(r.decoder)).all()
    assert r.to_dict()["changed_positions"] == [1]


def test_bad_pairs_are_named(bundle, case):
    clean, corrupt, out_ids = case
    with pytest.raises(InputError, match="same number of pieces"):
        activation_patching(bundle, clean, corrupt[:-1], out_ids)
    with pytest.raises(InputError, match="change a word"):
        activation_patching(bundle, clean, clean, out_ids)
    with pytest.raises(InputError, match="position must be"):
        activation_patching(bundle, clean, corrupt, out_ids, position=99)


def test_patching_with_the_causal_mask_off_reads_the_whole_prefix(bundle, case):
    clean, corrupt, out_ids = case
    opts = core.InferenceOptions(causal_mask=False)
    r = activation_patching(bundle, clean, corrupt, out_ids, position=0, options=opts)
    src, tgt = torch.tensor([corrupt]), torch.tensor([[bundle.config.bos_id] + out_ids[:-1]])
    with torch.no_grad():
        logits = bundle.model(src, tgt, call=Call(options=opts), src_keep=torch.ones_like(src, dtype=torch.bool))
    assert r.p_corrupt == pytest.approx(float(torch.softmax(logits[0, 0], -1)[out_ids[0]]), abs=1e-5)
    assert r.decoder.shape == (2, 1)
