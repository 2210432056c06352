"""core.distill.student (and core.distill.data): building the self-attention student from an SSRU teacher,
freezing, data, a tiny end-to-end run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch
from conftest import FIXTURES, build_tiny_checkpoint, tiny_config

from core import CheckpointMeta, InferenceOptions, Transformer, load_checkpoint, save_checkpoint
from core.cli.distill import add_arguments, run
from core.config import heads
from core.decoding.search import greedy
from core.distill.data import english_sources, fortune_sentences
from core.distill.student import (
    build_student,
    freeze_except,
    init_student,
    make_optimizer,
    trainable_names,
)
from core.errors import CheckpointError
from core.recording.call import Call
from core.training.batching import collate
from core.training.corpus import Pair, Split, write_split
from core.training.train import TrainConfig, Trainer

MARIAN = dict(
    decoder_self="ssru",
    start="zeros",
    pad_id=0,
    bos_id=0,
    eos_id=0,
    unk_id=1,
    norm="post",
    output_bias=True,
    pe_layout="concatenated",
    norm_eps=1e-6,
)


def ssru_teacher(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    teacher = Transformer(tiny_config(**MARIAN)).eval()
    with torch.no_grad():  # a non-trivial SSRU: forget-gate bias away from 0, output bias not zero
        for layer in teacher.decoder_layers:
            layer.ssru.W_f.bias.normal_()
        teacher.output.bias.normal_()
    return teacher


def batch() -> tuple[torch.Tensor, ...]:
    b = collate([[5, 6, 7, 8], [9, 10]], [[11, 12, 13], [14, 15, 16, 17, 18]], pad_id=0, bos_id=0, eos_id=0)
    return b.src, b.src_keep, b.tgt_in, b.tgt_keep


def test_collate_keep_flags_when_pad_eos_and_bos_are_all_zero() -> None:
    b = collate([[5, 6, 7], [9]], [[11, 12], [14, 15, 16]], pad_id=0, bos_id=0, eos_id=0)
    assert b.src.tolist() == [[5, 6, 7, 0], [9, 0, 0, 0]]
    assert b.src_keep.tolist() == [[True] * 4, [True, True, False, False]]  # the appended </s> (id 0) is real
    assert b.tgt_in.tolist() == [[0, 11, 12, 0], [0, 14, 15, 16]]
    assert b.tgt_out.tolist() == [[11, 12, 0, -100], [14, 15, 16, 0]]  # </s> is a target, padding is ignored
    assert b.tgt_keep.tolist() == [[True, True, True, False], [True] * 4]
    assert not torch.equal(b.src_keep, b.src != 0)  # so the keep flags must be passed explicitly


def test_student_copies_every_shared_tensor_exactly() -> None:
    teacher = ssru_teacher()
    student = build_student(teacher, seed=3)
    assert student.config.decoder_self == "attention"
    assert student.config.to_dict() == {**teacher.config.to_dict(), "decoder_self": "attention"}
    theirs, mine = teacher.state_dict(), student.state_dict()
    shared = set(theirs) & set(mine)
    assert {k for k in theirs if k not in mine} == {k for k in theirs if ".ssru." in k}
    assert all(".self_attn." in k and k.startswith("decoder_layers.") for k in set(mine) - shared)
    for name in shared:
        assert torch.equal(theirs[name], mine[name]), name
    for layer in student.decoder_layers:
        assert torch.count_nonzero(layer.self_attn.out_proj.weight) == 0
        assert torch.count_nonzero(layer.self_attn.out_proj.bias) == 0
        assert torch.count_nonzero(layer.self_attn.q_proj.weight) > 0  # q/k/v are initialised, not zero
    assert student.output.weight is student.src_embed.weight  # still tied


def test_zero_out_proj_student_equals_teacher_with_ssru_output_zero() -> None:
    """With out_proj = 0 the self-attention sublayer is LayerNorm(x + 0); with ssru.W = 0 the SSRU cell stays 0,
    so its sublayer is LayerNorm(x + relu(0)). Same inputs to every other layer: the logits are identical."""
    teacher = ssru_teacher()
    student = build_student(teacher).eval()
    silenced = ssru_teacher()
    with torch.no_grad():
        for layer in silenced.decoder_layers:
            layer.ssru.W.weight.zero_()
    src, src_keep, tgt_in, tgt_keep = batch()
    s = student(src, tgt_in, src_keep=src_keep, tgt_keep=tgt_keep)
    assert torch.equal(s, silenced(src, tgt_in, src_keep=src_keep, tgt_keep=tgt_keep))
    assert not torch.allclose(
        s, teacher(src, tgt_in, src_keep=src_keep, tgt_keep=tgt_keep), atol=1e-3
    )  # the SSRU matters
    a = greedy(student, src, src_keep, call=Call(options=InferenceOptions(), max_len=8, top_k=1))
    b = greedy(silenced, src, src_keep, call=Call(options=InferenceOptions(), max_len=8, top_k=1))
    assert torch.equal(a.tokens, b.tokens)
    # the switches are no-ops at initialisation (self-attention contributes nothing yet) ...
    off = student(
        src, tgt_in, call=Call(options=InferenceOptions(causal_mask=False)), src_keep=src_keep, tgt_keep=tgt_keep
    )
    assert torch.allclose(off, s, atol=1e-5)
    # ... and not once out_proj is non-zero
    with torch.no_grad():
        student.decoder_layers[0].self_attn.out_proj.weight.normal_()
    s2 = student(src, tgt_in, src_keep=src_keep, tgt_keep=tgt_keep)
    assert not torch.allclose(s2, s, atol=1e-3)
    off2 = student(
        src, tgt_in, call=Call(options=InferenceOptions(causal_mask=False)), src_keep=src_keep, tgt_keep=tgt_keep
    )
    assert not torch.allclose(off2, s2, atol=1e-3)
    ablated = student(
        src,
        tgt_in,
        call=Call(options=InferenceOptions(ablate=heads("decoder", [0, 1], [0, 1]))),
        src_keep=src_keep,
        tgt_keep=tgt_keep,
    )
    assert not torch.allclose(ablated, s2, atol=1e-3)


@pytest.mark.parametrize("scope", ["self_attn", "self_attn+norm", "decoder"])
def test_frozen_parameters_do_not_change_in_a_training_step(scope: str, tmp_path: Path) -> None:
    student = build_student(ssru_teacher())
    names = trainable_names(student, scope)
    assert names and all(n.startswith("decoder_layers.") for n in names)
    assert freeze_except(student, names) == sum(p.numel() for n, p in student.named_parameters() if n in set(names))
    before = {n: p.detach().clone() for n, p in student.named_parameters()}
    trainer = Trainer(student, TrainConfig(max_tokens=64, warmup=1, label_smoothing=0.0), tmp_path, torch.device("cpu"))
    trainer.optimizer = make_optimizer(student, reused_lr_scale=0.1)
    b = collate([[5, 6, 7, 8], [9, 10]], [[11, 12, 13], [14, 15, 16, 17, 18]], 0, 0, 0)
    for _ in range(2):  # two steps: the first only moves out_proj (q/k/v get no gradient through a zero out_proj)
        trainer.train_step(b)
    changed = {n for n, p in student.named_parameters() if not torch.equal(p, before[n])}
    assert changed <= set(names)
    assert "decoder_layers.0.self_attn.out_proj.weight" in changed
    assert "decoder_layers.0.self_attn.q_proj.weight" in changed
    assert ("decoder_layers.0.self_attn_norm.weight" in changed) == (scope != "self_attn")
    lrs = {g["lr_scale"]: g["lr"] for g in trainer.optimizer.param_groups}
    assert lrs[1.0] > 0
    if 0.1 in lrs:  # reused parameters (norm, or the whole decoder) learn at a tenth of the rate
        assert lrs[0.1] == pytest.approx(0.1 * lrs[1.0])


def _tiny_split(root: Path) -> Path:
    lines = (FIXTURES / "tiny_corpus.txt").read_text(encoding="utf-8").splitlines()
    pairs = [Pair(en=lines[i], de=lines[i + 1], kind="sentence") for i in range(0, len(lines) - 1, 2)]
    train = pairs[:8] + [
        Pair("a cup of tea", "eine Tasse Tee", "phrase"),
        Pair("the warm chair", "der warme Stuhl", "phrase"),
        Pair(pairs[8].en.rstrip("?.!"), "leak", "sentence"),
    ]  # leaks a held-out sentence
    write_split(Split(train=train, dev=pairs[8:11], test=pairs[11:14]), root)
    return root


def test_english_sources_hold_out_dev_and_test(tmp_path: Path) -> None:
    held, train, counts = english_sources(_tiny_split(tmp_path / "split"))
    assert counts == {"heldout": 6, "dev": 3, "sentences": 8, "phrases": 2}
    assert len(train) == 10 and not {t.casefold().rstrip("?.!") for t in train} & {
        h.casefold().rstrip("?.!") for h in held
    }
    assert english_sources(tmp_path / "split") == (held, train, counts)  # deterministic


def test_fortune_sentences(tmp_path: Path) -> None:
    (tmp_path / "wisdom").write_text(
        "Life is short, so eat dessert first.\n\t\t-- Anonymous\n%\n"
        "Q: Why?\nA: Because.\n%\nToo short.\n%\nA day without sunshine is like night.\n%\n"
        "life is short, so eat dessert first.\n",
        encoding="latin-1",
    )
    (tmp_path / "wisdom.dat").write_bytes(b"\0")
    assert fortune_sentences(tmp_path) == [
        "Life is short, so eat dessert first.",
        "A day without sunshine is like night.",
    ]


def test_tiny_end_to_end_distill(tmp_path: Path) -> None:
    # Marian's convention pad = start = eos, on the fixture tokenizer's </s> id (2) so the checkpoint loads
    teacher_dir = build_tiny_checkpoint(
        tmp_path / "teacher", seed=1, **{**MARIAN, "pad_id": 2, "bos_id": 2, "eos_id": 2, "unk_id": 3}
    )
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = [
        "--teacher",
        str(teacher_dir),
        "--out",
        str(tmp_path / "student"),
        "--split",
        str(_tiny_split(tmp_path / "split")),
        "--data-dir",
        str(tmp_path / "data"),
        "--run-dir",
        str(tmp_path / "run"),
        "--no-fortunes",
        "--max-steps",
        "3",
        "--eval-every",
        "2",
        "--log-every",
        "1",
        "--max-tokens",
        "200",
        "--warmup",
        "2",
        "--head-sweep",
        "2",
        "--dev-chrf-sentences",
        "2",
        "--max-pieces",
        "200",
        "--max-ratio",
        "100",
    ]  # a random teacher's outputs run to the length cap
    assert run(parser.parse_args(argv)) == 0
    assert len((tmp_path / "data" / "train.pt").read_text(encoding="utf-8").splitlines()) == 10
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["pairs"] > 0
    evaluation = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert evaluation["n"] == 3 and "causal mask off" in evaluation["switches"]
    assert "as trained, beam 4" in evaluation["switches"]
    model, _, data = load_checkpoint(tmp_path / "student")
    assert model.config.decoder_self == "attention" and data["dtype"] == "float16"
    card = (tmp_path / "student" / "card.md").read_text(encoding="utf-8")
    assert "python -m core distill" in card and "MPL-2.0" in card and (tmp_path / "student" / "curves.png").is_file()
    # stages skip what exists: a second run translates nothing and does not train further
    assert run(parser.parse_args(argv)) == 0
    assert json.loads((tmp_path / "run" / "state.json").read_text())["step"] == 3


def test_init_from_copies_an_earlier_student_and_rejects_another_config(tmp_path: Path) -> None:
    ids = {**MARIAN, "pad_id": 2, "bos_id": 2, "eos_id": 2, "unk_id": 3}
    teacher, tok, _ = load_checkpoint(build_tiny_checkpoint(tmp_path / "teacher", seed=1, **ids))
    earlier = build_student(teacher, seed=5)
    with torch.no_grad():
        for p in earlier.parameters():
            p.add_(0.125)  # no longer the teacher's or a fresh student's values
    save_checkpoint(
        earlier,
        tok.path,
        tmp_path / "phase1",
        card="phase 1\n",
        dtype=torch.float16,
        meta=CheckpointMeta(name="phase1", source_language="en", target_language="pt"),
    )
    saved, _, _ = load_checkpoint(tmp_path / "phase1")
    student = build_student(teacher, seed=0)
    init_student(student, tmp_path / "phase1")
    assert not torch.equal(
        student.decoder_layers[0].self_attn.out_proj.weight,
        torch.zeros_like(student.decoder_layers[0].self_attn.out_proj.weight),
    )
    for (name, mine), theirs in zip(student.state_dict().items(), saved.state_dict().values(), strict=True):
        assert torch.equal(mine, theirs), name
    other = build_tiny_checkpoint(tmp_path / "other", seed=1, **{**ids, "decoder_self": "attention", "d_ff": 48})
    with pytest.raises(CheckpointError, match="same config"):
        init_student(build_student(teacher), other)
