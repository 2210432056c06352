"""core.distill.long (and long_card): joined long inputs, the word-level loss, the distillation trainer, putting a
student back together from its trained decoder, and a tiny teacher -> train -> publish run."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import pytest
import torch
from conftest import FIXTURES, build_tiny_checkpoint
from safetensors.torch import save_file
from test_distill import MARIAN, ssru_teacher

from core import load_checkpoint
from core.cli import distill_long as long_mod  # the distill-long command (distill --recipe long)
from core.distill.fidelity import BUCKETS, bucket_of
from core.distill.long import assemble_student
from core.distill.long_inputs import copy_inputs, joined_runs
from core.distill.student import build_student
from core.distill.word_kd import DistillTrainer, word_kd_loss
from core.errors import CheckpointError
from core.storage.checkpoint import CheckpointMeta, save_checkpoint
from core.training.batching import collate
from core.training.train import TrainConfig


def test_joined_runs_land_in_the_long_buckets_evenly_and_are_consecutive() -> None:
    sentences = [f"s{i}" for i in range(400)]
    lengths = [3 + (i % 9) for i in range(400)]
    runs = joined_runs(sentences, lengths, 90, seed=1)
    assert len(runs) == 90
    counts = [0] * len(BUCKETS)
    for run in runs:
        parts = run.split(" ")
        first = int(parts[0][1:])
        assert parts == [f"s{i}" for i in range(first, first + len(parts))] and len(parts) > 1
        pieces = sum(lengths[first : first + len(parts)]) + len(parts) - 1
        b = bucket_of(pieces)
        assert b is not None and b > 0  # never the shortest bucket
        counts[b] += 1
    assert counts[1:] == [30, 30, 30]
    assert joined_runs(sentences, lengths, 90, seed=1) == runs  # deterministic


def test_word_kd_loss_is_cross_entropy_plus_kl_and_survives_ruled_out_pieces() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 7)
    target = torch.tensor([[1, 2, -100], [3, 4, 5]])
    loss, ce = word_kd_loss(logits, logits.clone(), target, 0.5)
    assert torch.allclose(loss, 0.5 * ce, atol=1e-6)  # KL to itself is 0
    other = torch.randn(2, 3, 7)
    loss2, ce2 = word_kd_loss(logits, other, target, 1.0)
    keep = target != -100
    p = torch.log_softmax(other[keep], -1)
    kl = (p.exp() * (p - torch.log_softmax(logits[keep], -1))).sum(-1).mean()
    assert torch.allclose(loss2, kl, atol=1e-5) and torch.allclose(ce2, ce)
    ruled_out = other.clone()
    ruled_out[..., 6] = float("-inf")  # an output bias of -inf: without the floor KL would be NaN
    student = logits.clone().requires_grad_(True)
    loss3, _ = word_kd_loss(student, ruled_out, target, 0.5)
    loss3.backward()
    assert torch.isfinite(loss3) and torch.isfinite(student.grad).all()


def test_distill_trainer_learns_the_teacher_and_skips_a_non_finite_batch(tmp_path: Path) -> None:
    teacher = ssru_teacher()
    student = build_student(teacher)
    trainer = DistillTrainer(
        student, teacher, 0.5, TrainConfig(warmup=1, lr_factor=0.5, label_smoothing=0.0), tmp_path, torch.device("cpu")
    )
    batch = collate([[5, 6, 7, 8], [9, 10]], [[11, 12, 13], [14]], 0, 0, 0)
    losses = [trainer.train_step(batch) for _ in range(15)]
    assert losses[-1] < losses[0] and trainer.step == 15
    before = {k: v.clone() for k, v in student.state_dict().items()}
    with torch.no_grad():
        teacher.output.bias[3] = float("nan")  # the teacher breaks: that batch must change nothing
    assert trainer.train_step(batch) is None and trainer.skipped == 1 and trainer.step == 15
    assert all(torch.equal(before[k], v) for k, v in student.state_dict().items())
    with pytest.raises(ValueError, match="kd_weight"):
        DistillTrainer(student, teacher, 1.5, TrainConfig(), tmp_path, torch.device("cpu"))
    with pytest.raises(ValueError, match="label smoothing"):  # the teacher's distribution is the soft target
        DistillTrainer(student, teacher, 0.5, TrainConfig(label_smoothing=0.1), tmp_path, torch.device("cpu"))


def test_assemble_student_gives_the_trained_student_back_and_refuses_other_files(tmp_path: Path) -> None:
    teacher = ssru_teacher()
    trained = build_student(teacher)
    with torch.no_grad():
        for p in trained.decoder_layers.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    decoder = {k: v for k, v in trained.state_dict().items() if k.startswith("decoder_layers.")}
    save_file({k: v.half() for k, v in decoder.items()}, str(tmp_path / "decoder.safetensors"))
    back = assemble_student(teacher, tmp_path / "decoder.safetensors")
    for k, v in trained.state_dict().items():
        expected = v.half().float() if k in decoder else v
        assert torch.equal(back.state_dict()[k], expected), k
    src = torch.tensor([[5, 6, 7, 0]])
    tgt = torch.tensor([[0, 11, 12]])
    assert torch.allclose(back(src, tgt), trained(src, tgt), atol=0.05)
    save_file({"encoder_layers.0.ffn.w1.weight": torch.zeros(1)}, str(tmp_path / "wrong.safetensors"))
    with pytest.raises(CheckpointError, match="not this student's decoder"):
        assemble_student(teacher, tmp_path / "wrong.safetensors")
    name = next(iter(decoder))
    save_file({**decoder, name: torch.zeros(2, 2)}, str(tmp_path / "shape.safetensors"))
    with pytest.raises(CheckpointError, match="shape"):
        assemble_student(teacher, tmp_path / "shape.safetensors")


def test_copy_inputs_names_a_missing_file(tmp_path: Path) -> None:
    (tmp_path / "first").mkdir()
    (tmp_path / "first" / "train.tgt").write_text("eins\n")
    (tmp_path / "first" / "train.src").write_text("one\n")
    with pytest.raises(FileNotFoundError, match="dev.tgt"):
        copy_inputs(tmp_path / "first", tmp_path / "second")


def test_tiny_teacher_train_publish(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    teacher_dir = build_tiny_checkpoint(
        tmp_path / "teacher", seed=1, **{**MARIAN, "pad_id": 2, "bos_id": 2, "eos_id": 2, "unk_id": 3}
    )
    english = (FIXTURES / "tiny_corpus.txt").read_text(encoding="utf-8").splitlines()[::2]
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.src").write_text("\n".join(english * 3) + "\n")
    (data / "dev.src").write_text("\n".join(english[:4]) + "\n")
    (data / "test.src").write_text("\n".join(english[:4]) + "\n")
    (data / "sources.json").write_text(json.dumps({"ding_sentences": len(english)}))
    monkeypatch.setattr("core.distill.long_card.word_list", lambda language: {"katze"})  # no network in tests
    monkeypatch.setattr("core.distill.long_card.dictionary", lambda language: frozenset({"katze"}))  # no apt
    parser = argparse.ArgumentParser()
    long_mod.add_arguments(parser)
    common = ["--teacher", str(teacher_dir), "--data-dir", str(data), "--run-dir", str(tmp_path / "run")]
    common += ["--out", str(tmp_path / "student"), "--device", "cpu", "--target-language", "de"]
    args = parser.parse_args(
        [
            *common,
            "--stages",
            "teacher,train,publish",
            "--max-steps",
            "4",
            "--eval-every",
            "2",
            "--max-tokens",
            "200",
            "--max-ratio",
            "100",
            "--per-bucket",
            "1",
        ]
    )
    with pytest.raises(ValueError, match="no usable training pairs"):  # a random teacher's runaway outputs
        long_mod.run(parser.parse_args([*common, "--stages", "teacher,train", "--max-steps", "1"]))
    assert long_mod.run(args) == 0
    for name in ("train", "dev", "test"):
        assert len((data / f"{name}.tgt").read_text().splitlines()) == len(
            (data / f"{name}.src").read_text().splitlines()
        )
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["kd_weight"] == 0.5
    student, _, info = load_checkpoint(tmp_path / "student")
    assert student.config.decoder_self == "attention" and info["dtype"] == "float16"
    rows = info["distillation"]["by_length"]
    assert len(rows) == len(BUCKETS) and rows[0]["pieces"] == list(BUCKETS[0])
    card = (tmp_path / "student" / "card.md").read_text()
    assert "## Fidelity to the teacher by source length" in card and "| 1–15 |" in card
    assert "python -m core distill-long --stages train" in card and "--max-minutes" in card
    assert "## Invented words" in card and "| this student | " in card  # invented words of teacher and student
    assert f"eval --invented-words --teacher {teacher_dir} --checkpoint {tmp_path / 'student'}" in card
    from core.distill.fidelity import corpus_words

    n_corpus = len(corpus_words(data / "train.tgt"))  # the teacher's translations of the corpus: known words
    assert n_corpus > 0 and f"nor among the {n_corpus:,} words of the teacher's translations" in card
    assert "object pronouns" not in card  # German: no pronoun rule
    assert set(info["distillation"]["held_out_vs_teacher"]) == {
        "as trained",
        "causal mask off",
        "all decoder self-attention heads ablated",
    }
    trained = load_checkpoint(tmp_path / "run" / "best")[0]  # the published student is the run's best
    for k, v in trained.state_dict().items():
        assert torch.equal(student.state_dict()[k], v), k
    # a run that goes on from an earlier student (how GPU time from several sessions adds up) starts from its
    # weights: an earlier student far from the fresh one the train stage builds (seed 1234), at a vanishing rate
    teacher_model, tok, _ = load_checkpoint(teacher_dir)
    earlier = build_student(teacher_model, seed=1234)
    with torch.no_grad():
        g = torch.Generator().manual_seed(5)
        for name, param in earlier.named_parameters():
            if name.startswith("decoder_layers."):
                param.add_(0.1 * torch.randn(param.shape, generator=g))
    meta = CheckpointMeta(name="earlier", source_language="en", target_language="de")
    save_checkpoint(earlier, tok.path, tmp_path / "earlier", card="earlier\n", dtype=torch.float16, meta=meta)
    go_on = [*common, "--stages", "train,publish", "--run-dir", str(tmp_path / "run3"), "--out", str(tmp_path / "s3")]
    go_on += ["--init-from", str(tmp_path / "earlier"), "--max-steps", "1", "--eval-every", "1", "--lr-factor", "1e-9"]
    go_on += ["--max-tokens", "200", "--max-ratio", "100", "--per-bucket", "1"]
    assert long_mod.run(parser.parse_args(go_on)) == 0
    went_on = load_checkpoint(tmp_path / "s3")[0].state_dict()
    start = load_checkpoint(tmp_path / "earlier")[0].state_dict()
    fresh = build_student(teacher_model, seed=1234).state_dict()
    gate = "decoder_layers.0.self_attn.out_proj.weight"  # 0 in a fresh student
    assert (start[gate] - fresh[gate]).abs().max() > 1e-2
    for k, v in start.items():
        assert torch.equal(went_on[k], v), k  # float16 both ways: a step at that rate changes no float16 value
    summary3 = json.loads((tmp_path / "run3" / "summary.json").read_text())
    assert summary3["init_from"] == str(tmp_path / "earlier") and len(summary3["init_digest"]) >= 16
    log3 = [json.loads(l) for l in (tmp_path / "run3" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log3 if r["type"] == "eval"][0] == 0  # the start is evaluated before the first step
    card3 = (tmp_path / "s3" / "card.md").read_text()
    assert f"--init-from {tmp_path / 'earlier'}" in card3 and "went on from an earlier student" in card3
    assert summary3["init_digest"][:16] in card3
    # a second run on the first run's teacher outputs (how the pt->en student is made): its card says so
    second = (  # a random teacher's outputs are long: generous length limits
        f"--teacher {teacher_dir} --data-dir {tmp_path / 'data2'} --run-dir {tmp_path / 'run2'} "
        f"--out {tmp_path / 'student2'} --device cpu --source-language de --target-language en --sources-from {data} "
        "--stages inputs,teacher,train,publish --max-steps 2 --eval-every 2 --max-tokens 2000 --max-ratio 100 "
        "--per-bucket 1 --max-pieces 1000"
    ).split()
    assert long_mod.run(parser.parse_args(second)) == 0
    sources = json.loads((tmp_path / "data2" / "sources.json").read_text())
    assert sources["sources_from"] == str(data) and isinstance(sources["train_dropped_as_held_out"], int)
    assert (tmp_path / "data2" / "test.src").read_text() == (data / "test.tgt").read_text()
    card2 = (tmp_path / "student2" / "card.md").read_text()
    assert "translations of the Ding **test** sentences" in card2 and f"--sources-from {data}" in card2
    assert "training sources equal to a dev or test source were dropped" in card2
    assert load_checkpoint(tmp_path / "student2")[2]["source_language"] == "de"


def test_fit_neither_logs_nor_evaluates_a_refused_batch_twice(tmp_path: Path) -> None:
    from core.training.train import fit

    teacher = ssru_teacher()
    trainer = DistillTrainer(
        build_student(teacher),
        teacher,
        0.5,
        TrainConfig(warmup=1, eval_every=2, log_every=1, label_smoothing=0.0, max_steps=4),
        tmp_path,
        torch.device("cpu"),
    )
    good = collate([[5, 6, 7]], [[11, 12]], 0, 0, 0)
    broken = collate([[5, 6, 7]], [[11, 12]], 0, 0, 0)
    calls = []

    def train_step(batch):  # every second batch is refused, like a non-finite one
        calls.append(batch)
        if batch is broken:
            trainer.skipped += 1
            return None
        return DistillTrainer.train_step(trainer, batch)

    trainer.train_step = train_step  # type: ignore[method-assign]
    evals = []
    fit(
        trainer,
        lambda epoch: [good, broken] * 3,
        evaluate=lambda: evals.append(trainer.step) or {"dev_chrf": 1.0},
        higher_is_better="dev_chrf",
        log_path=tmp_path / "log.jsonl",
        progress=False,
    )
    logged = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in logged if r["type"] == "train"]
    assert train_steps == [1, 2, 3, 4] and all(r["loss"] > 0 for r in logged if r["type"] == "train")
    assert evals == [2, 4, 4]  # each step evaluated once (the final evaluation aside)
    # a run of refused batches still ends at its time limit (the budget check is not skipped with them)
    trainer.train_step = lambda batch: calls.append(batch) or time.sleep(0.001)  # type: ignore[method-assign]
    limit = trainer.elapsed / 60 + 0.003  # about 0.2 s more than the run so far
    trainer.config = dataclasses.replace(trainer.config, max_steps=0, max_minutes=limit, epochs=10**6)
    before = len(calls)
    fit(trainer, lambda epoch: [broken] * 5000, evaluate=None, higher_is_better="dev_chrf", progress=False)
    assert 0 < len(calls) - before < 1000 and trainer.step == 4  # stopped within the epoch of 5,000 batches


def _rows(chrf: tuple[float, ...], short: float = 0.0, non_words: int = 0, n: int = 100) -> list:
    from core.distill.fidelity import BucketFidelity

    return [BucketFidelity(b, n, c, 0.0, short, non_words, ()) for b, c in zip(BUCKETS, chrf, strict=True)]


def test_goal_verdict_follows_the_issue_and_never_says_met_for_an_empty_bucket() -> None:
    from core.distill.long_card import goal_verdict

    assert goal_verdict(_rows((95, 95, 95, 90))) == {"chrf": True, "not_cut": True, "words": True}
    assert goal_verdict(_rows((95, 95, 94.9, 90)))["chrf"] is False
    assert goal_verdict(_rows((95, 95, 95, 89.9)))["chrf"] is False
    assert goal_verdict(_rows((99, 99, 99, 99), short=0.01))["not_cut"] is False
    assert goal_verdict(_rows((99, 99, 99, 99), non_words=1))["words"] is True  # 1 per 100
    assert goal_verdict(_rows((99, 99, 99, 99), non_words=2))["words"] is False
    assert goal_verdict(_rows((99, 99, 99, 99), non_words=1, n=50))["words"] is False  # 2 per 100
    empty = _rows((99, 99, 99, 99))
    empty[3] = type(empty[3])(BUCKETS[3], 0, float("nan"), float("nan"), float("nan"), 0, ())
    assert goal_verdict(empty) == {"chrf": None, "not_cut": None, "words": None}


def test_copy_inputs_refuses_unfinished_outputs_and_drops_held_out_duplicates(tmp_path: Path) -> None:
    first = tmp_path / "first"
    first.mkdir()
    for name, src, tgt in (
        ("train", ["a", "b", "c"], ["Olá.", "Bom dia", "Adeus."]),
        ("dev", ["d"], ["bom dia."]),
        ("test", ["e"], ["Obrigado."]),
    ):
        (first / f"{name}.src").write_text("\n".join(src) + "\n")
        (first / f"{name}.tgt").write_text("\n".join(tgt[:-1] if name == "train" else tgt) + "\n")
    with pytest.raises(FileNotFoundError, match="2 of 3 lines"):  # the first run's teacher stage is still going
        copy_inputs(first, tmp_path / "second")
    (first / "train.tgt").write_text("Olá.\nBom dia\nAdeus.\n")
    counts = copy_inputs(first, tmp_path / "second")
    assert (tmp_path / "second" / "train.src").read_text().splitlines() == ["Olá.", "Adeus."]  # = dev's "bom dia."
    assert counts["train_dropped_as_held_out"] == 1 and counts["dev_inputs"] == 1
