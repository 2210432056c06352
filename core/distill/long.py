"""Distillation for every input length, with the teacher's per-word distributions: ``python -m core distill-long``.

The first recipe (``python -m core distill``) learned from the teacher's greedy output on mostly short text, so
its student breaks words and drops endings on 30-120-piece inputs. This one differs in three measured levers:

* **long training inputs**: besides Ding's training sentences and phrases and the fortune cookies, runs of
  consecutive training sentences are joined into inputs of 16-120 pieces (a pasted paragraph), spread evenly
  over the buckets of ``core.distill.fidelity``;
* **word-level distillation** (Kim & Rush 2016): the loss is ``(1 - w) * CE(teacher's output) +
  w * KL(teacher || student)`` at every target position, the teacher's distribution coming from one
  teacher-forced pass over its own output, so the student learns the teacher's whole next-word distribution,
  not only its argmax;
* **any device**: batches by padded tokens, bfloat16 autocast on CUDA, so a GPU run of minutes replaces hours
  on two CPU cores.

The student is ``core.distill.student.build_student``: the teacher with each SSRU replaced by zero-initialised
self-attention. Files (``--data-dir``), each stage skipping what exists and resuming what is half done:

  inputs    train.src and dev.src / test.src (held-out Ding dev / test sentences; dev.src joined into every
            bucket, for choosing the best step). ``--sources-from DIR`` takes them from another run's teacher
            outputs instead (DIR/train.tgt, DIR/dev.tgt, DIR/test.tgt): the Portuguese side of an en->pt run
            becomes the source text of a pt->en student.
  teacher   the teacher's greedy translations of the three: train.tgt, dev.tgt, test.tgt (appended by chunks)
  train     the student (``--run-dir``: state.safetensors every minute, log.jsonl, best/ = best dev chrF)
  publish   measure the best student and write ``--out`` with its card (``core.distill.long_card``)

Modules: ``long_inputs`` (inputs, teacher translations, pairs), ``word_kd`` (the loss and its trainer), this
one (the train stage and the command), ``long_card`` (publish).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from ..checkpoint import CheckpointMeta, check_output_folder, load_checkpoint, save_checkpoint
from ..model import Transformer
from ..tokenizer import Tokenizer
from ..training.batching import Batch, collate, token_batches
from ..training.evaluate import score, translate_many
from .data import read_lines
from .long_inputs import copy_inputs, load_pairs, make_inputs, teacher_stage
from .student import (
    SCOPES,
    TRAIN_DEFAULTS,
    build_student,
    freeze_except,
    init_student,
    make_optimizer,
    trainable_names,
)
from .word_kd import DistillTrainer


# ----------------------------------------------------------------------------- stages
def train_stage(
    args: argparse.Namespace, teacher: Transformer, tok: Tokenizer, device: torch.device, eval_tokens: int
) -> dict:
    """Stage "train" (resumes from ``--run-dir``); dev batches hold at most ``eval_tokens`` padded source tokens."""
    from ..bundle import weights_digest
    from ..training.train import best_eval_step, fit, read_log, seed_everything, train_config_from_args

    config = train_config_from_args(args)
    seed_everything(config.seed)
    data_dir, run_dir = Path(args.data_dir), Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    student = build_student(teacher, seed=config.seed)
    start_digest = None
    if args.init_from:  # go on training an earlier student (e.g. the published one); a resumed run's state wins
        init_student(student, Path(args.init_from))
        start_digest = weights_digest(student)
    n_trainable = freeze_except(student, trainable_names(student, args.scope))
    trainer = DistillTrainer(student, teacher, args.kd_weight, config, run_dir, device)
    trainer.optimizer = make_optimizer(student, args.reused_lr_scale)
    resumed = trainer.load_state()
    src, tgt = load_pairs(tok, data_dir, "train", args.max_pieces, args.max_ratio)
    if not src:
        raise ValueError(f"{data_dir}: no usable training pairs (all empty, too long or runaway: see --max-ratio)")
    dev_src_text, dev_ref = read_lines(data_dir / "dev.src"), read_lines(data_dir / "dev.tgt")
    cfg = student.config
    print(
        f"student: {student.n_parameters():,} parameters, {n_trainable:,} trainable ({args.scope}); "
        f"{len(src):,} pairs, "
        f"{sum(map(len, tgt)):,} target pieces; kd_weight {args.kd_weight}; device {device}; "
        f"{'resumed at step ' + str(trainer.step) if resumed else 'fresh start'}",
        flush=True,
    )

    def make_epoch(epoch: int) -> list[Batch]:
        groups = token_batches([len(s) for s in src], [len(t) for t in tgt], config.max_tokens, config.seed, epoch)
        return [collate([src[i] for i in g], [tgt[i] for i in g], cfg.pad_id, cfg.bos_id, cfg.eos_id) for g in groups]

    def evaluate() -> dict:
        trainer.model.eval()
        hyps = translate_many(trainer.model, tok, dev_src_text, max_tokens=eval_tokens, max_source_tokens=128)
        s = score(hyps, dev_ref)
        return {"dev_bleu": s["bleu"], "dev_chrf": s["chrf"]}

    def on_best(result: dict) -> None:
        meta = CheckpointMeta(
            name=Path(args.out).name,
            source_language=args.source_language,
            target_language=args.target_language,
            extra={"best": result},
        )
        save_checkpoint(
            trainer.model, tok.path, run_dir / "best", card="(in training)\n", dtype=torch.float16, meta=meta
        )

    last = fit(
        trainer,
        make_epoch,
        evaluate=evaluate,
        on_best=on_best,
        higher_is_better="dev_chrf",
        log_path=run_dir / "log.jsonl",
        progress=False,
        evaluate_first=bool(args.init_from),  # the student it goes on from is the best until a step beats it
    )
    summary = {
        "steps": trainer.step,
        "minutes": round(trainer.elapsed / 60, 2),
        "tokens_seen": trainer.tokens_seen,
        "target_tokens_per_s": round(trainer.tokens_seen / max(trainer.elapsed, 1e-9), 1),
        "best_dev_chrf": trainer.best,
        "last": last,
        "pairs": len(src),
        "trainable": n_trainable,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "train_config": asdict(config),
        "kd_weight": args.kd_weight,
        "scope": args.scope,
        "reused_lr_scale": args.reused_lr_scale,
        "init_from": args.init_from,
        "init_digest": start_digest,
        "best_step": best_eval_step(read_log(run_dir / "log.jsonl"), "dev_chrf"),
        "max_pieces": args.max_pieces,
        "skipped_batches": trainer.skipped,
        "tf32": device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    return summary


# ----------------------------------------------------------------------------- command line
def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..training.train import add_train_arguments

    p.add_argument("--teacher", default="checkpoints/bergamot-en-pt", help="SSRU teacher checkpoint folder")
    p.add_argument("--out", default="checkpoints/distilled-en-pt", help="the student's published name")
    p.add_argument("--source-language", default="en")
    p.add_argument("--target-language", default="pt")
    p.add_argument("--split", default="data/ding-split", help="Ding split folder (core.training.corpus)")
    p.add_argument("--data-dir", default="data/distill-long", help="sources and teacher outputs")
    p.add_argument("--run-dir", default="runs/distill-long", help="trainer state, log, best/")
    p.add_argument("--stages", default="inputs,teacher,train", help="comma-separated subset of the stages")
    p.add_argument("--sources-from", default=None, help="take train/dev/test sources from DIR/*.tgt (a pt->en run)")
    p.add_argument("--phrases", type=int, default=100_000, help="Ding training phrases kept (short inputs)")
    p.add_argument("--joined", type=int, default=90_000, help="joined runs of consecutive sentences (16-120 pieces)")
    p.add_argument("--dev-per-bucket", type=int, default=75, help="dev inputs per length bucket (best-step choice)")
    p.add_argument("--kd-weight", type=float, default=0.5, help="weight of KL(teacher || student) in the loss")
    p.add_argument("--scope", default="decoder", choices=list(SCOPES))
    p.add_argument(
        "--reused-lr-scale", type=float, default=0.3, help="rate factor for parameters copied from the teacher"
    )
    p.add_argument(
        "--init-from",
        default=None,
        help="train: start from this earlier student of the same teacher (e.g. the published checkpoint, to train "
        "it further in another session) instead of the teacher's weights; a resumed run's state still wins",
    )
    p.add_argument("--max-pieces", type=int, default=128, help="drop training pairs longer than this")
    p.add_argument("--max-ratio", type=float, default=2.0, help="drop teacher outputs longer than RATIO * source + 8")
    p.add_argument("--teacher-max-tokens", type=int, default=0, help="padded source tokens per teacher batch (0: auto)")
    p.add_argument("--eval-max-tokens", type=int, default=0, help="padded source tokens per dev batch (0: auto)")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")
    p.add_argument(
        "--decoder",
        default=None,
        help="publish: the trained decoder tensors (safetensors) instead of RUN_DIR/best, e.g. brought back from a GPU",
    )
    p.add_argument("--compare-student", default=None, help="publish: an earlier student to measure beside this one")
    p.add_argument("--per-bucket", type=int, default=100, help="publish: held-out inputs per length bucket")
    p.add_argument("--data-seed", type=int, default=0, help="seed of the inputs stage (joined runs, shuffling)")
    add_train_arguments(p, {**TRAIN_DEFAULTS, "log_every": 50})


def run(args: argparse.Namespace) -> int:
    from ..errors import CheckpointError, InputError

    stages = {s.strip() for s in args.stages.split(",") if s.strip()}
    unknown = stages - {"inputs", "teacher", "train", "publish"}
    if unknown:
        raise InputError(f"distill-long: unknown stages {sorted(unknown)} (inputs, teacher, train, publish)")
    for option, value, least in (  # counts and sizes: a negative one was written to sources.json as given
        ("--phrases", args.phrases, 0),
        ("--joined", args.joined, 0),
        ("--dev-per-bucket", args.dev_per_bucket, 1),
        ("--per-bucket", args.per_bucket, 1),
        ("--max-pieces", args.max_pieces, 1),
        ("--teacher-max-tokens", args.teacher_max_tokens, 0),
        ("--eval-max-tokens", args.eval_max_tokens, 0),
    ):
        if value < least:
            raise InputError(f"{option} must be {'at least 1' if least else '0 or more'}, got {value}")
    if "publish" in stages:
        check_output_folder(args.out)  # refused before hours of training, not after them
    from ..bundle import pick_device

    device = pick_device(None if args.device == "auto" else args.device)
    if device.type == "cuda":  # float32 matmuls as TF32 (the published runs' setting; the card says so)
        torch.backends.cuda.matmul.allow_tf32 = True
    auto_tokens = 60_000 if device.type == "cuda" else 3000
    teacher_tokens = args.teacher_max_tokens or auto_tokens
    eval_tokens = args.eval_max_tokens or auto_tokens
    teacher, tok, _ = load_checkpoint(args.teacher, device)
    if teacher.config.decoder_self != "ssru":
        raise CheckpointError(f"{args.teacher}: the teacher must have decoder_self='ssru'")
    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    if "inputs" in stages and not (data_dir / "sources.json").is_file():
        if args.sources_from:
            counts = copy_inputs(Path(args.sources_from), data_dir)
        else:
            counts = make_inputs(
                Path(args.split),
                data_dir,
                tok,
                phrases=args.phrases,
                joined=args.joined,
                dev_per_bucket=args.dev_per_bucket,
                seed=args.data_seed,
            )
        (data_dir / "sources.json").write_text(json.dumps(counts, indent=1) + "\n")
        print(f"inputs: {counts}", flush=True)
    if "teacher" in stages:
        t0 = time.perf_counter()
        stats = teacher_stage(teacher, tok, data_dir, teacher_tokens)
        print(f"teacher: {time.perf_counter() - t0:.0f} s; train {stats['train']}", flush=True)
    if "train" in stages:
        summary = train_stage(args, teacher, tok, device, eval_tokens)
        print(f"train: {json.dumps(summary, default=str)}", flush=True)
    if "publish" in stages:
        from .long_card import publish

        teacher = teacher.to("cpu")
        if args.decoder:
            student = assemble_student(teacher, Path(args.decoder))
        else:
            student = load_checkpoint(Path(args.run_dir) / "best")[0]
        publish(args, teacher, tok, student.float().eval())
    return 0


def assemble_student(teacher: Transformer, decoder: Path) -> Transformer:
    """The student of ``teacher`` with the decoder-layer tensors of ``decoder`` (a safetensors file of the
    ``decoder_layers.*`` tensors a ``--scope decoder`` run trained, e.g. from its best/model.safetensors):
    everything else of a student trained with that scope is still its teacher's, so the two give the run's
    student exactly. Refuses a file with other tensors, missing ones or other shapes."""
    from safetensors.torch import load_file

    from ..errors import CheckpointError

    student = build_student(teacher)
    mine = student.state_dict()
    wanted = {k for k in mine if k.startswith("decoder_layers.")}
    given = load_file(str(decoder))
    if set(given) != wanted:
        extra, missing = sorted(set(given) - wanted), sorted(wanted - set(given))
        raise CheckpointError(f"{decoder}: not this student's decoder (extra {extra[:3]}, missing {missing[:3]})")
    for k, v in given.items():
        if v.shape != mine[k].shape:
            raise CheckpointError(
                f"{decoder}: {k} has shape {tuple(v.shape)}, the student needs {tuple(mine[k].shape)}"
            )
    student.load_state_dict({k: v.to(mine[k].dtype) for k, v in given.items()}, strict=False)
    return student.eval()
