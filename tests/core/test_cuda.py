"""The same calls on a real CUDA device as on the CPU (skipped where no GPU is present; the CPU-side stand-ins
for these paths are in test_devices.py). Run on a GPU machine with ``pytest tests/core/test_cuda.py``."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_config

import core
from core.config import InferenceOptions, heads
from core.distill.student import build_student
from core.distill.word_kd import DistillTrainer
from core.training.batching import collate
from core.training.evaluate import translate_many
from core.training.train import TrainConfig

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
SENTENCES = ["the cat sat on the mat", "a dog runs", "we read books in the evening and sleep at night"]
SWITCHES = [
    InferenceOptions(),
    InferenceOptions(positional_encoding=False),
    InferenceOptions(causal_mask=False),
    InferenceOptions(ablate=heads("cross", [0], [1])),
]


@pytest.mark.parametrize("options", SWITCHES, ids=["as-trained", "pe-off", "causal-off", "ablate"])
def test_traced_translation_on_cuda_matches_cpu(tiny_checkpoint: Path, options: InferenceOptions) -> None:
    cpu, gpu = core.load(tiny_checkpoint, device="cpu"), core.load(tiny_checkpoint, device="cuda")
    assert next(gpu.model.parameters()).device.type == "cuda"
    for text in SENTENCES:
        a, b = cpu.translate(text, options), gpu.translate(text, options)
        assert a.output_tokens == b.output_tokens
        for site in a.trace.keys():
            x, y = a.trace[site], b.trace[site]
            assert isinstance(y, np.ndarray), site  # the Trace holds host arrays whatever the device
            if x.dtype.kind == "f":
                np.testing.assert_allclose(x, y, atol=2e-4, rtol=1e-3, err_msg=site)


def test_beam_and_batch_on_cuda_match_cpu(tiny_checkpoint: Path) -> None:
    cpu, gpu = core.load(tiny_checkpoint, device="cpu"), core.load(tiny_checkpoint, device="cuda")
    assert (
        cpu.translate(SENTENCES[2], beam_size=4).output_tokens == gpu.translate(SENTENCES[2], beam_size=4).output_tokens
    )
    on_cpu, on_gpu = cpu.translate_batch(SENTENCES), gpu.translate_batch(SENTENCES)
    assert [t.text for t in on_cpu] == [t.text for t in on_gpu] and on_gpu[0].trace.batch_size == len(SENTENCES)
    assert translate_many(cpu.model, cpu.tokenizer, SENTENCES) == translate_many(gpu.model, gpu.tokenizer, SENTENCES)


def test_ssru_model_and_distillation_step_on_cuda_match_cpu(tmp_path: Path) -> None:
    torch.manual_seed(0)
    teacher = core.Transformer(tiny_config(decoder_self="ssru")).eval()
    batch = collate([[5, 6, 7, 8], [9, 10]], [[11, 12, 13], [14]], 0, 1, 2)
    with torch.no_grad():  # the SSRU teacher's logits: the soft targets of word-level distillation
        cpu_logits = teacher(batch.src, batch.tgt_in, src_keep=batch.src_keep)
        gpu_teacher = copy.deepcopy(teacher).to("cuda")
        b = batch.to("cuda")
        gpu_logits = gpu_teacher(b.src, b.tgt_in, src_keep=b.src_keep)
    torch.testing.assert_close(gpu_logits.cpu(), cpu_logits, atol=2e-4, rtol=1e-3)
    config = TrainConfig(warmup=1, label_smoothing=0.0)
    first = {}
    for device in ("cpu", "cuda"):
        torch.manual_seed(0)
        student = build_student(copy.deepcopy(teacher))
        trainer = DistillTrainer(student, copy.deepcopy(teacher), 0.5, config, tmp_path / device, torch.device(device))
        losses = [trainer.train_step(batch) for _ in range(20)]
        assert all(np.isfinite(losses)) and losses[-1] < losses[0]
        assert all(p.device.type == device for p in student.parameters())
        first[device] = losses[0]
    assert first["cuda"] == pytest.approx(first["cpu"], rel=2e-2)  # bfloat16 autocast on CUDA only


def test_analyses_on_cuda_match_cpu(tiny_checkpoint: Path) -> None:
    """What "Why this word?" and the heads page compute, on the GPU against the CPU (the pretend-device test in
    test_devices.py checks the placement; this one the numbers on a real device), on a model that suppresses an
    id and for a real target ending in eos."""
    import dataclasses

    from core.analysis import head_importance, head_importance_estimate
    from core.analysis.attribution import attribute
    from core.analysis.patching import activation_patching
    from core.analysis.survey import gold_cross_attention

    plain = core.load(tiny_checkpoint, device="cpu")
    suppressing = core.Transformer(dataclasses.replace(plain.config, suppress_ids=(1,))).eval()
    suppressing.load_state_dict(plain.model.state_dict())
    cpu = core.Bundle(suppressing, plain.tokenizer, plain.info, tiny_checkpoint)
    gpu = core.Bundle(copy.deepcopy(suppressing).to("cuda"), plain.tokenizer, plain.info, tiny_checkpoint)
    src_ids, out_ids = cpu.encode_source(SENTENCES[0])[0], cpu.encode_target("the cat sat")
    corrupt = [src_ids[0] + 1, *src_ids[1:]]
    options = SWITCHES[3]

    def run(b: core.Bundle) -> dict[str, object]:
        exact = head_importance(b, src_ids, out_ids, options=options)
        estimate = head_importance_estimate(b, src_ids, out_ids, options=options)
        patching = activation_patching(b, src_ids, corrupt, out_ids, options=options)
        attribution = attribute(b, src_ids, out_ids, 1, steps=8, options=options)
        gold = gold_cross_attention(b, [(SENTENCES[0], "the cat"), (SENTENCES[2], "we read")])[0]
        return {
            "importance": np.array([e.delta_logprob for e in exact.effects]),
            "importance base": exact.base_logprob,
            "importance changes": [(e.output_changed, e.first_change) for e in exact.effects],
            "estimate": np.array([e.delta_logprob for e in estimate.effects]),
            "patching position": patching.position,
            "patching p": (patching.p_clean, patching.p_corrupt),
            "patching encoder": patching.encoder,
            "patching cross heads": patching.cross_heads,
            "patching decoder": patching.decoder,
            "attribution log p": attribution.logprob,
            "attribution source": attribution.source_ig,
            "attribution target": attribution.target_ig,
            **{f"gold {i}": a for i, a in enumerate(gold)},
        }

    want, got = run(cpu), run(gpu)
    assert got.keys() == want.keys()
    for name, value in want.items():
        if isinstance(value, np.ndarray):
            assert isinstance(got[name], np.ndarray), name
            np.testing.assert_allclose(got[name], value, atol=2e-4, rtol=1e-3, err_msg=name)
        elif isinstance(value, (float, tuple)):
            assert got[name] == pytest.approx(value, abs=2e-4, rel=1e-3), name
        else:
            assert got[name] == value, name
