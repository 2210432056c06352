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

import json
import time
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file

from ..bundle import weights_digest
from ..errors import CheckpointError
from ..inputs import pick_device
from ..storage.checkpoint import CheckpointMeta, check_output_folder, load_checkpoint, save_checkpoint
from ..text.tokenizer import Tokenizer
from ..training.batching import Batch, collate, token_batches
from ..training.evaluate import score, translate_many
from ..training.train import best_eval_step, fit, read_log, seed_everything
from ..transformer.model import Transformer
from .data import read_lines
from .long_card import publish
from .long_inputs import copy_inputs, load_pairs, make_inputs, teacher_stage
from .settings import LongRecipe
from .student import (
    build_student,
    freeze_except,
    init_student,
    make_optimizer,
    trainable_names,
)
from .word_kd import DistillTrainer


# ----------------------------------------------------------------------------- stages
def train_stage(
    recipe: LongRecipe, teacher: Transformer, tok: Tokenizer, device: torch.device, eval_tokens: int
) -> dict:
    """Stage "train" (resumes from ``run_dir``); dev batches hold at most ``eval_tokens`` padded source tokens."""
    config = recipe.train
    seed_everything(config.seed)
    data_dir, run_dir = Path(recipe.data_dir), Path(recipe.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    student = build_student(teacher, seed=config.seed)
    start_digest = None
    if recipe.init_from:  # go on training an earlier student (e.g. the published one); a resumed run's state wins
        init_student(student, Path(recipe.init_from))
        start_digest = weights_digest(student)
    n_trainable = freeze_except(student, trainable_names(student, recipe.scope))
    trainer = DistillTrainer(student, teacher, recipe.kd_weight, config, run_dir, device)
    trainer.optimizer = make_optimizer(student, recipe.reused_lr_scale)
    resumed = trainer.load_state()
    src, tgt = load_pairs(tok, data_dir, "train", recipe.max_pieces, recipe.max_ratio)
    if not src:
        raise ValueError(f"{data_dir}: no usable training pairs (all empty, too long or runaway: see --max-ratio)")
    dev_src_text, dev_ref = read_lines(data_dir / "dev.src"), read_lines(data_dir / "dev.tgt")
    cfg = student.config
    print(
        f"student: {student.n_parameters():,} parameters, {n_trainable:,} trainable ({recipe.scope}); "
        f"{len(src):,} pairs, "
        f"{sum(map(len, tgt)):,} target pieces; kd_weight {recipe.kd_weight}; device {device}; "
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
            name=Path(recipe.out).name,
            source_language=recipe.source_language,
            target_language=recipe.target_language,
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
        evaluate_first=bool(recipe.init_from),  # the student it goes on from is the best until a step beats it
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
        "kd_weight": recipe.kd_weight,
        "scope": recipe.scope,
        "reused_lr_scale": recipe.reused_lr_scale,
        "init_from": recipe.init_from,
        "init_digest": start_digest,
        "best_step": best_eval_step(read_log(run_dir / "log.jsonl"), "dev_chrf"),
        "max_pieces": recipe.max_pieces,
        "skipped_batches": trainer.skipped,
        "tf32": device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    return summary


STAGES = ("inputs", "teacher", "train", "publish")


def distill_long(recipe: LongRecipe) -> None:
    """Run the recipe's stages (each skips what exists and resumes what is half done)."""
    stages = recipe.stages
    if "publish" in stages:
        check_output_folder(recipe.out)  # refused before hours of training, not after them
    device = pick_device(recipe.device)
    if device.type == "cuda":  # float32 matmuls as TF32 (the published runs' setting; the card says so)
        torch.backends.cuda.matmul.allow_tf32 = True
    auto_tokens = 60_000 if device.type == "cuda" else 3000
    teacher_tokens = recipe.teacher_max_tokens or auto_tokens
    eval_tokens = recipe.eval_max_tokens or auto_tokens
    teacher, tok, _ = load_checkpoint(recipe.teacher, device)
    if teacher.config.decoder_self != "ssru":
        raise CheckpointError(f"{recipe.teacher}: the teacher must have decoder_self='ssru'")
    data_dir = Path(recipe.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    if "inputs" in stages and not (data_dir / "sources.json").is_file():
        if recipe.sources_from:
            counts = copy_inputs(Path(recipe.sources_from), data_dir)
        else:
            counts = make_inputs(
                Path(recipe.split),
                data_dir,
                tok,
                phrases=recipe.phrases,
                joined=recipe.joined,
                dev_per_bucket=recipe.dev_per_bucket,
                seed=recipe.data_seed,
            )
        (data_dir / "sources.json").write_text(json.dumps(counts, indent=1) + "\n")
        print(f"inputs: {counts}", flush=True)
    if "teacher" in stages:
        t0 = time.perf_counter()
        stats = teacher_stage(teacher, tok, data_dir, teacher_tokens)
        print(f"teacher: {time.perf_counter() - t0:.0f} s; train {stats['train']}", flush=True)
    if "train" in stages:
        summary = train_stage(recipe, teacher, tok, device, eval_tokens)
        print(f"train: {json.dumps(summary, default=str)}", flush=True)
    if "publish" in stages:
        teacher = teacher.to("cpu")
        if recipe.decoder:
            student = assemble_student(teacher, Path(recipe.decoder))
        else:
            student = load_checkpoint(Path(recipe.run_dir) / "best")[0]
        publish(recipe, teacher, tok, student.float().eval())


def assemble_student(teacher: Transformer, decoder: Path) -> Transformer:
    """The student of ``teacher`` with the decoder-layer tensors of ``decoder`` (a safetensors file of the
    ``decoder_layers.*`` tensors a ``--scope decoder`` run trained, e.g. from its best/model.safetensors):
    everything else of a student trained with that scope is still its teacher's, so the two give the run's
    student exactly. Refuses a file with other tensors, missing ones or other shapes."""
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
