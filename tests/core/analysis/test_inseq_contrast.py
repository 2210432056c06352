"""Contrastive attribution against Inseq's own (issue 47): gradient × input of log p(y) − log p(c)
(``contrast_logits_diff``) and of p(y) − p(c) (``contrast_prob_diff``) on the transformers export of the default
checkpoint, for “gato” against “cão” in “The cat sleeps on the warm chair.”.

Inseq 0.7.1 is a test-only extra, installed by ``make test`` without its dependencies (its ten CUDA wheels are hard
requirements on Linux; its few pure-Python ones are pinned beside it in the Makefile). Two differences are taken off
before comparing, each said where it is done: transformers 5 multiplies given decoder embeddings by √D again, which
Inseq 0.7.1 has already done (so the export's decoder ``embed_scale`` is set to 1 for Inseq's run); and core's input
is the token embedding plus the positional encoding, Inseq's the token embedding alone (so core's gradient · PE is
taken off its gradient × input)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import core
from core.analysis.attribution import attribute
from core.exporters.hf_families import export_hf
from core.recording.call import Call

inseq = pytest.importorskip("inseq", reason="Inseq (a test-only extra) is not installed: make test installs it")

CHECKPOINT = Path(__file__).resolve().parents[3] / "checkpoints" / "distilled-en-pt"
SOURCE, TARGET, OTHER = (
    "The cat sleeps on the warm chair.",
    "O gato dorme na cadeira quente.",
    "O cão dorme na cadeira quente.",
)
STEP = 1  # '▁gato' against '▁cão'


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not CHECKPOINT.is_dir():
        pytest.skip("the default checkpoint is not there (make models)")
    out = tmp_path_factory.mktemp("inseq") / "enpt-hf"
    export_hf(CHECKPOINT, out)
    return out


def core_side(kind: str) -> tuple[np.ndarray, np.ndarray, float]:
    """Core's contrastive gradient × input over the source and the prefix, without the positional encoding's part,
    and f(input)."""
    bundle = core.load(CHECKPOINT, device="cpu")
    src_ids, _ = bundle.encode_source(SOURCE)
    out_ids = bundle.encode_target(TARGET)
    found = attribute(bundle, src_ids, out_ids, STEP, steps=4, contrast="cão", contrast_kind=kind)
    src = torch.tensor([src_ids])
    tgt = torch.tensor([[bundle.config.bos_id, *out_ids[:STEP]]])
    recorder = core.Recorder(bundle.model, keep_grad=("embed.src", "embed.tgt"))
    with torch.enable_grad():
        logits = bundle.model(src, tgt, call=Call(recorder=recorder), src_keep=torch.ones_like(src, dtype=torch.bool))
        logp = torch.log_softmax(logits[0, STEP], -1)
        y, c = logp[out_ids[STEP]], logp[found.contrast_id]
        (y - c if kind == "logit_diff" else y.exp() - c.exp()).backward()
    trace = recorder.freeze()
    g_src, g_tgt = recorder.leaf("embed.src").grad[0], recorder.leaf("embed.tgt").grad[0]
    pe_src, pe_tgt = torch.tensor(np.array(trace["pe.src"])), torch.tensor(np.array(trace["pe.tgt"]))
    source = found.source_grad_x_input - (g_src * pe_src).sum(-1).numpy()
    prefix = found.target_grad_x_input - (g_tgt * pe_tgt).sum(-1).numpy()
    assert found.f_input is not None
    return source, prefix, found.f_input


@pytest.mark.parametrize(
    ("kind", "inseq_fn", "tolerance"),
    [("logit_diff", "contrast_logits_diff", 5e-4), ("prob_diff", "contrast_prob_diff", 1e-5)],
)
def test_contrastive_gradient_x_input_equals_inseqs(folder: Path, kind: str, inseq_fn: str, tolerance: float) -> None:
    model = inseq.load_model(str(folder), "input_x_gradient")
    model.model.model.decoder.embed_scale = 1.0  # transformers 5 scales given decoder embeds again: Inseq did already
    out = model.attribute(
        SOURCE,
        TARGET,
        attributed_fn=inseq_fn,
        contrast_targets=OTHER,
        step_scores=[inseq_fn],
        attribute_target=True,
        show_progress=False,
        skip_special_tokens=False,
    )
    theirs = out.sequence_attributions[0]
    their_source = theirs.source_attributions[:, STEP].sum(-1).numpy()
    their_prefix = theirs.target_attributions[: STEP + 1, STEP].sum(-1).numpy()
    their_f = float(theirs.step_scores[inseq_fn][STEP])
    source, prefix, f = core_side(kind)
    assert f == pytest.approx(their_f, abs=tolerance)
    np.testing.assert_allclose(source, their_source, atol=tolerance)
    np.testing.assert_allclose(prefix, their_prefix, atol=tolerance)
    assert np.abs(their_source).max() > 10 * tolerance  # the attributions compared are not all near zero
