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
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from ..checkpoint import CheckpointMeta, load_checkpoint, save_checkpoint
from ..model import Transformer
from ..tokenizer import Tokenizer
from ..training.batching import Batch, collate, token_batches
from ..training.corpus import _leak_key
from ..training.evaluate import score, translate_many
from ..training.train import TrainConfig, Trainer
from .data import _read_lines, _write_lines, english_sources, fetch_fortunes, fortune_sentences, translate_file
from .fidelity import BUCKETS, inputs_by_length
from .student import TRAIN_DEFAULTS, build_student, freeze_except, make_optimizer, trainable_names, usable_pair

FILES = ("train", "dev", "test")


# ----------------------------------------------------------------------------- inputs
def joined_runs(
    sentences: list[str], lengths: list[int], n: int, *, seed: int = 0, buckets: tuple[tuple[int, int], ...] = BUCKETS
) -> list[str]:
    """``n`` inputs made of consecutive ``sentences`` joined with a space, their piece counts (``lengths``
    per sentence, +1 per join) spread evenly over the buckets above the first; deterministic for ``seed``."""
    rng = random.Random(seed)
    targets = buckets[1:]
    out: list[str] = []
    tries = 0
    while len(out) < n and tries < 50 * n:
        tries += 1
        lo, hi = targets[len(out) % len(targets)]
        goal = rng.randint(lo, hi)
        start = rng.randrange(len(sentences))
        total, end = 0, start
        while end < len(sentences) and total < goal:
            total += lengths[end] + (1 if end > start else 0)
            end += 1
        if lo <= total <= hi and end - start > 1:
            out.append(" ".join(sentences[start:end]))
    return out


def make_inputs(
    split_dir: Path, data_dir: Path, tokenizer: Tokenizer, *, phrases: int, joined: int, dev_per_bucket: int, seed: int
) -> dict:
    """Stage "inputs" for a first (English-source) run; returns the counts written to sources.json."""
    held, train, counts = english_sources(split_dir, seed)
    n_dev = counts["dev"]
    sentences, phrase_list = train[: counts["sentences"]], train[counts["sentences"] :]
    taken = {_leak_key(t) for t in held + train}
    fortunes = [t for t in fortune_sentences(fetch_fortunes(data_dir / "fortunes")) if _leak_key(t) not in taken]
    prose = sentences + fortunes
    rng = random.Random(seed)
    rng.shuffle(prose)  # "consecutive" = neighbours in one shuffled order of sentences and cookies
    lengths = [len(ids) for ids in tokenizer.encode_batch(prose)]
    runs = joined_runs(prose, lengths, joined, seed=seed)
    source = prose + phrase_list[:phrases] + runs
    dev = [
        x for bucket in inputs_by_length(held[:n_dev], tokenizer, per_bucket=dev_per_bucket, seed=seed) for x in bucket
    ]
    _write_lines(data_dir / "train.src", source)
    _write_lines(data_dir / "dev.src", dev)
    _write_lines(data_dir / "test.src", held[n_dev:])
    return {
        "ding_sentences": len(sentences),
        "fortunes": len(fortunes),
        "ding_phrases": min(phrases, len(phrase_list)),
        "joined_runs": len(runs),
        "dev_inputs": len(dev),
        "test_sentences": len(held) - n_dev,
        "seed": seed,
    }


def copy_inputs(sources_from: Path, data_dir: Path) -> dict:
    """Stage "inputs" for a second run: another run's teacher outputs become this run's sources. Refuses
    outputs that are not complete; drops training sources equal to a dev or test source (two different
    sentences can share a translation)."""
    texts = {name: _read_lines(sources_from / f"{name}.tgt") for name in FILES}
    for name, lines in texts.items():
        expected = len(_read_lines(sources_from / f"{name}.src"))
        if not lines or len(lines) != expected:
            raise FileNotFoundError(
                f"{sources_from / (name + '.tgt')}: {len(lines)} of {expected} lines "
                "(run that run's teacher stage to the end first)"
            )
    held = {_leak_key(t) for name in ("dev", "test") for t in texts[name]}
    kept = [t for t in texts["train"] if _leak_key(t) not in held]
    dropped = len(texts["train"]) - len(kept)
    texts["train"] = kept
    data_dir.mkdir(parents=True, exist_ok=True)
    counts: dict[str, object] = {}
    for name, lines in texts.items():
        _write_lines(data_dir / f"{name}.src", lines)
        counts[f"{name}_inputs"] = len(lines)
    origin = sources_from / "sources.json"
    if origin.is_file():
        counts["origin"] = json.loads(origin.read_text())
    counts["sources_from"] = str(sources_from)
    counts["train_dropped_as_held_out"] = dropped
    return counts


# ----------------------------------------------------------------------------- the word-level loss
def word_kd_loss(
    logits: torch.Tensor, teacher_logits: torch.Tensor, target: torch.Tensor, kd_weight: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, cross-entropy): ``(1 - kd_weight) * CE(target) + kd_weight * KL(teacher || student)``, averaged over
    the positions where ``target`` != -100. logits / teacher_logits (B, T, V), target (B, T)."""
    keep = target != -100
    # -inf logits (an output bias that rules a piece out) would make KL's 0 * (-inf - -inf) NaN: floor them
    logp = F.log_softmax(logits[keep].float().clamp_min(-1e4), dim=-1)  # (N, V)
    ce = F.nll_loss(logp, target[keep])
    if kd_weight == 0.0:
        return ce, ce
    t_logp = F.log_softmax(teacher_logits[keep].float().clamp_min(-1e4), dim=-1)
    kl = F.kl_div(logp, t_logp, log_target=True, reduction="batchmean")
    return (1.0 - kd_weight) * ce + kd_weight * kl, ce


class DistillTrainer(Trainer):
    """A Trainer whose loss adds KL to a frozen teacher's per-position distribution (``word_kd_loss``);
    dev loss stays plain cross-entropy. The student runs under bfloat16 autocast on CUDA, the teacher in float32."""

    def __init__(
        self,
        model: Transformer,
        teacher: Transformer,
        kd_weight: float,
        config: TrainConfig,
        run_dir: Path,
        device: torch.device,
    ) -> None:
        if not 0.0 <= kd_weight <= 1.0:
            raise ValueError(f"kd_weight must be in [0, 1], got {kd_weight}")
        if config.label_smoothing:
            raise ValueError("distill-long takes no label smoothing: the teacher's distribution is the soft target")
        super().__init__(model, config, run_dir, device)
        self.skipped = 0  # batches whose loss or gradient was not finite (no step taken)
        self.teacher = teacher.to(self.device).eval()
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        self.kd_weight = kd_weight

    def train_step(self, batch: Batch) -> float:
        """Trainer.train_step, except that a batch with a non-finite loss changes nothing (counted in ``skipped``)."""
        self.module.train()
        batch = batch.to(self.device)
        loss = self.loss(batch)
        if not torch.isfinite(loss):
            self.skipped += 1
            print(f"step {self.step}: non-finite loss on a batch of {tuple(batch.src.shape)}; skipped", flush=True)
            return 0.0
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr() * group.get("lr_scale", 1.0)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip)
        if not torch.isfinite(norm):
            self.skipped += 1
            print(f"step {self.step}: non-finite gradient; skipped", flush=True)
            return 0.0
        self.optimizer.step()
        self.step += 1
        self.tokens_seen += batch.n_target_tokens
        return float(loss.detach())

    def _autocast(self) -> torch.autocast:
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda")

    def loss(self, batch: Batch, label_smoothing: float | None = None) -> torch.Tensor:
        with self._autocast():
            logits = self.module(batch.src, batch.tgt_in, src_keep=batch.src_keep, tgt_keep=None)  # (B, Tt, V)
        if label_smoothing is not None or self.kd_weight == 0.0:  # dev loss: plain cross-entropy
            return word_kd_loss(logits, logits, batch.tgt_out, 0.0)[0]
        with torch.no_grad():  # the teacher in full precision: its SSRU recurrence is the reference
            teacher_logits = self.teacher(batch.src, batch.tgt_in, src_keep=batch.src_keep, tgt_keep=None)
        return word_kd_loss(logits, teacher_logits, batch.tgt_out, self.kd_weight)[0]


# ----------------------------------------------------------------------------- stages
def teacher_stage(teacher: Transformer, tok: Tokenizer, data_dir: Path, max_tokens: int) -> dict:
    stats = {}
    for name in ("dev", "test", "train"):
        stats[name] = translate_file(
            teacher,
            tok,
            _read_lines(data_dir / f"{name}.src"),
            data_dir / f"{name}.tgt",
            chunk=20000 if max_tokens > 5000 else 2000,
            max_tokens=max_tokens,
            stats_path=data_dir / f"{name}.stats.json",
        )
    return stats


def load_pairs(tok: Tokenizer, data_dir: Path, name: str, max_pieces: int, max_ratio: float) -> tuple[list, list]:
    src_text, tgt_text = _read_lines(data_dir / f"{name}.src"), _read_lines(data_dir / f"{name}.tgt")
    if len(tgt_text) != len(src_text) or not src_text:
        raise ValueError(
            f"{data_dir}: {name}.tgt has {len(tgt_text)} lines for {len(src_text)} sources (teacher stage)"
        )
    src, tgt = tok.encode_batch(src_text), tok.encode_batch(tgt_text)
    keep = [i for i in range(len(src)) if usable_pair(src[i], tgt[i], max_pieces, max_ratio)]
    return [src[i] for i in keep], [tgt[i] for i in keep]


def train_stage(args: argparse.Namespace, teacher: Transformer, tok: Tokenizer, device: torch.device) -> dict:
    from ..training.train import fit, seed_everything, train_config_from_args

    config = train_config_from_args(args)
    seed_everything(config.seed)
    data_dir, run_dir = Path(args.data_dir), Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    student = build_student(teacher, seed=config.seed)
    n_trainable = freeze_except(student, trainable_names(student, args.scope))
    trainer = DistillTrainer(student, teacher, args.kd_weight, config, run_dir, device)
    trainer.optimizer = make_optimizer(student, args.reused_lr_scale)
    resumed = trainer.load_state()
    src, tgt = load_pairs(tok, data_dir, "train", args.max_pieces, args.max_ratio)
    if not src:
        raise ValueError(f"{data_dir}: no usable training pairs (all empty, too long or runaway: see --max-ratio)")
    dev_src_text, dev_ref = _read_lines(data_dir / "dev.src"), _read_lines(data_dir / "dev.tgt")
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
        hyps = translate_many(trainer.model, tok, dev_src_text, max_tokens=args.eval_max_tokens, max_source_tokens=128)
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
    p.add_argument("--scope", default="decoder", choices=["self_attn", "self_attn+norm", "decoder", "all"])
    p.add_argument(
        "--reused-lr-scale", type=float, default=0.3, help="rate factor for parameters copied from the teacher"
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
    from ..bundle import pick_device

    device = pick_device(None if args.device == "auto" else args.device)
    if device.type == "cuda":  # float32 matmuls as TF32 (the published runs' setting; the card says so)
        torch.backends.cuda.matmul.allow_tf32 = True
    auto_tokens = 60_000 if device.type == "cuda" else 3000
    args.teacher_max_tokens = args.teacher_max_tokens or auto_tokens
    args.eval_max_tokens = args.eval_max_tokens or auto_tokens
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
        stats = teacher_stage(teacher, tok, data_dir, args.teacher_max_tokens)
        print(f"teacher: {time.perf_counter() - t0:.0f} s; train {stats['train']}", flush=True)
    if "train" in stages:
        summary = train_stage(args, teacher, tok, device)
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
