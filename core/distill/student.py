"""Distil the imported Bergamot en->pt model into a student whose decoder has real self-attention.

Sequence-level knowledge distillation (Kim & Rush 2016): the teacher (``decoder_self="ssru"``)
translates English text with greedy decoding; the student is the teacher with each decoder
layer's SSRU replaced by 8-head masked self-attention. Everything else (shared embeddings and
output layer, the 6-layer encoder, cross-attention, feed-forward, LayerNorms) is copied; the new
self-attention's ``out_proj`` starts at zero, so the student starts as "the teacher without its
SSRU" and learns only what the SSRU contributed. Stages (each skips what already exists):

  data     teacher translations of held-out and training English -> data/distill/ (appended as it goes)
  train    core.training.train.Trainer / fit on (English, teacher output) pairs -> runs/distill/ (resumes)
  eval     chrF/BLEU of the student against the teacher on held-out English, with switches
  publish  float16 checkpoint folder with card.md
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch

from ..config import InferenceOptions, ModelConfig, heads
from ..errors import CheckpointError, InputError
from ..storage.checkpoint import (
    CONFIG,
    CheckpointMeta,
    check_output_folder,
    folder_mb,
    load_checkpoint,
    save_checkpoint,
)
from ..text.tokenizer import Tokenizer
from ..training.batching import Batch, collate, token_batches
from ..training.evaluate import score, translate_many
from ..training.train import Trainer, best_eval_step, fit, plot_curves, read_log, seed_everything
from ..transformer.model import Transformer
from .card import compose, write_card_file
from .data import make_data, read_lines
from .sentence_card import build_card, side_by_side
from .settings import SentenceRecipe

DEFAULT_OPTIONS = InferenceOptions()
TRAIN_DEFAULTS = {  # the distillation commands' TrainConfig defaults (no label smoothing: the targets are a model's)
    "max_tokens": 3000,
    "warmup": 400,
    "lr_factor": 1.0,
    "label_smoothing": 0.0,
    "eval_every": 300,
    "log_every": 20,
    "max_minutes": 0.0,
}


# ----------------------------------------------------------------------------- the student
def student_config(teacher: ModelConfig) -> ModelConfig:
    """The teacher's config with ``decoder_self="attention"`` (same heads, sizes, norms and Marian conventions)."""
    return ModelConfig.from_dict({**teacher.to_dict(), "decoder_self": "attention"})


def build_student(teacher: Transformer, seed: int = 0) -> Transformer:
    """A student that copies every teacher tensor except the SSRU, with zero-initialised self-attention output.

    The new ``decoder_layers.{l}.self_attn`` gets q/k/v from ``Transformer``'s Xavier init (seeded) and
    ``out_proj`` weight and bias = 0; ``self_attn_norm`` (the SSRU sublayer's post-norm) is copied.
    With post-norm the self-attention sublayer is then ``LayerNorm(x + 0)``, i.e. the student computes
    exactly what the teacher computes when its SSRU outputs zero (e.g. ``ssru.W`` = 0).
    """
    if teacher.config.decoder_self != "ssru":
        raise ValueError("build_student expects a teacher with decoder_self='ssru'")
    torch.manual_seed(seed)
    student = Transformer(student_config(teacher.config))
    theirs = teacher.state_dict()
    mine = student.state_dict()
    copied = {k: theirs[k] for k in mine if k in theirs}
    new = sorted(set(mine) - set(copied))
    if any(".self_attn." not in k or not k.startswith("decoder_layers.") for k in new):
        raise ValueError(f"student tensors without a teacher counterpart outside decoder self-attention: {new}")
    student.load_state_dict(copied, strict=False)
    with torch.no_grad():
        for layer in student.decoder_layers:
            assert layer.self_attn is not None  # student_config: decoder_self="attention"
            torch.nn.init.zeros_(layer.self_attn.out_proj.weight)
            torch.nn.init.zeros_(layer.self_attn.out_proj.bias)
    return student


def init_student(student: Transformer, checkpoint: Path) -> None:
    """Copy every weight of an earlier student checkpoint (same config) into ``student``."""
    earlier, _, _ = load_checkpoint(checkpoint)
    if earlier.config != student.config:
        raise CheckpointError(
            f"{checkpoint}: --init-from needs a student with the same config as this teacher's student"
        )
    student.load_state_dict(earlier.state_dict())


SCOPES = {  # what ``--scope`` lets learn (``trainable_names``), as a card says it; the recipes' --scope choices
    "self_attn": "only the new decoder self-attention learns",
    "self_attn+norm": "only the new decoder self-attention and its LayerNorm learn",
    "decoder": "only the decoder layers learn (the copied cross-attention, feed-forward and LayerNorms at {scale}× the "
    "rate); encoder, embeddings and output layer stay the teacher's",
    "all": "every parameter learns (the copied ones at {scale}× the rate)",
}


def trainable_names(model: Transformer, scope: str) -> list[str]:
    """Parameter names left trainable: ``self_attn`` = decoder self-attention only, ``self_attn+norm`` adds its
    LayerNorm, ``decoder`` = the whole decoder stack (embeddings/output and encoder stay frozen), ``all``."""
    names = [n for n, _ in model.named_parameters()]
    if scope == "all":
        return names
    keep = {"self_attn": (".self_attn.",), "self_attn+norm": (".self_attn.", ".self_attn_norm."), "decoder": ("",)}[
        scope
    ]
    return [n for n in names if n.startswith("decoder_layers.") and any(k in n for k in keep)]


def freeze_except(model: Transformer, names: Sequence[str]) -> int:
    """requires_grad only for ``names``; returns the number of trainable values."""
    wanted = set(names)
    for n, p in model.named_parameters():
        p.requires_grad_(n in wanted)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def make_optimizer(model: Transformer, reused_lr_scale: float = 1.0) -> torch.optim.Optimizer:
    """Adam over the trainable parameters: new decoder self-attention at the schedule's rate, reused (teacher)
    parameters at ``reused_lr_scale`` times it (``Trainer.train_step`` honours a group's ``lr_scale``)."""
    new: list[torch.nn.Parameter] = []
    reused: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (new if name.startswith("decoder_layers.") and ".self_attn." in name else reused).append(p)
    groups = [{"params": new, "lr_scale": 1.0}] + ([{"params": reused, "lr_scale": reused_lr_scale}] if reused else [])
    return torch.optim.Adam(groups, lr=0.0, betas=(0.9, 0.98), eps=1e-9)


# ----------------------------------------------------------------------------- training pairs
def usable_pair(src: Sequence[int], tgt: Sequence[int], max_pieces: int, max_ratio: float) -> bool:
    """A training pair worth learning from: neither side empty or over ``max_pieces``, and no runaway output
    (more than ``max_ratio`` * source + 8 pieces)."""
    return 0 < len(src) <= max_pieces and 0 < len(tgt) <= max_pieces and len(tgt) <= max_ratio * len(src) + 8


def load_pairs(tok: Tokenizer, data_dir: Path, max_pieces: int = 64, max_ratio: float = 2.0) -> dict[str, list]:
    """Translated training pairs as ids: {"src", "tgt", "sentence"} (sentence = True for Ding sentences and
    fortune cookies, False for Ding phrases).

    Drops empty outputs, pairs longer than ``max_pieces`` and runaway outputs (> max_ratio * source + 8 pieces).
    """
    pt = read_lines(data_dir / "train.pt")
    en = read_lines(data_dir / "train.en")[: len(pt)]
    n_sentences = json.loads((data_dir / "sources.json").read_text())["sentences"]
    extra_pt = read_lines(data_dir / "extra.pt")
    extra_en = read_lines(data_dir / "extra.en")[: len(extra_pt)]
    en, pt = extra_en + en, extra_pt + pt  # fortune cookies count as sentences
    n_sentences += len(extra_en)
    n = len(pt)
    src, tgt = tok.encode_batch(en), tok.encode_batch(pt)
    out: dict[str, list] = {"src": [], "tgt": [], "sentence": []}
    for i in range(n):
        s, t = src[i], tgt[i]
        if usable_pair(s, t, max_pieces, max_ratio):
            out["src"].append(s)
            out["tgt"].append(t)
            out["sentence"].append(i < n_sentences)
    return out


def options_grid(cfg: ModelConfig, *, per_layer: bool = True) -> dict[str, InferenceOptions]:
    """The switches a student is scored under: as trained, the causal mask off, every decoder self-attention head
    ablated and (``per_layer``) each decoder layer's heads ablated."""
    every = range(cfg.n_heads)
    grid = {
        "as trained": DEFAULT_OPTIONS,
        "causal mask off": InferenceOptions(causal_mask=False),
        "all decoder self-attention heads ablated": InferenceOptions(
            ablate=heads("decoder", range(cfg.n_decoder_layers), every)
        ),
    }
    for layer in range(cfg.n_decoder_layers if per_layer else 0):
        grid[f"decoder layer {layer} self-attention heads ablated"] = InferenceOptions(
            ablate=heads("decoder", [layer], every)
        )
    return grid


def score_row(hyps: list[str], reference: list[str], seconds: float) -> dict:
    """chrF and BLEU of ``hyps`` against ``reference``, the share identical to it and the seconds they took."""
    identical = sum(h == r for h, r in zip(hyps, reference, strict=True)) / len(reference)
    # to the millisecond: a fast run must not round to 0 s (the throughput divides by it)
    return {**score(hyps, reference), "identical": round(identical, 4), "seconds": round(seconds, 3)}


def switch_rows(
    student: Transformer, tok: Tokenizer, sources: list[str], reference: list[str], grid: dict[str, InferenceOptions]
) -> dict[str, dict]:
    """The student's greedy output under each of ``grid``'s switches, scored against ``reference`` (the teacher's):
    chrF, BLEU, the share identical to the reference, seconds and output pieces (for the throughput). Both recipes'
    cards show these rows."""
    rows = {}
    for name, options in grid.items():
        t0 = time.perf_counter()
        counts: dict[str, int] = {}
        hyps = translate_many(student, tok, sources, max_source_tokens=128, options=options, counts=counts)
        rows[name] = {**score_row(hyps, reference, time.perf_counter() - t0), "output_tokens": counts["output_tokens"]}
        print(f"{name}: {rows[name]}", flush=True)
    return rows


# ----------------------------------------------------------------------------- stage: train
def train_student(recipe: SentenceRecipe, teacher: Transformer, tok: Tokenizer, run_dir: Path) -> dict:
    """Stage "train": build (or resume) the student and fit it to the teacher's outputs. Returns a summary."""
    config = recipe.train
    seed_everything(config.seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    student = build_student(teacher, seed=config.seed)
    if recipe.init_from:  # a second phase: start from an earlier student (a resumed run's state still wins)
        init_student(student, Path(recipe.init_from))
    n_trainable = freeze_except(student, trainable_names(student, recipe.scope))
    trainer = Trainer(student, config, run_dir, torch.device("cpu"))
    trainer.optimizer = make_optimizer(student, recipe.reused_lr_scale)
    resumed = trainer.load_state()
    done = resumed and (
        (config.max_minutes and trainer.elapsed / 60 >= config.max_minutes)
        or (config.max_steps and trainer.step >= config.max_steps)
    )
    log_path = run_dir / "log.jsonl"
    if done and (run_dir / "summary.json").is_file():
        print(f"train: budget already used at step {trainer.step}; skipping", flush=True)
        old = json.loads((run_dir / "summary.json").read_text())
        return _write_summary(
            trainer,
            run_dir,
            log_path,
            old.get("pairs", 0),
            old.get("sentence_pairs", 0),
            old.get("trainable", n_trainable),
            old.get("dev_chrf_sentences", recipe.dev_chrf_sentences),
        )
    data_dir = Path(recipe.data_dir)
    pairs = load_pairs(tok, data_dir, recipe.max_pieces, recipe.max_ratio)
    if not pairs["src"]:
        raise ValueError(f"{data_dir}: no usable training pairs (run the data stage first)")
    cfg = student.config
    held = read_lines(data_dir / "heldout.en")
    held_pt = read_lines(data_dir / "heldout.teacher.pt")
    n_dev = json.loads((data_dir / "sources.json").read_text()).get("dev", 500)
    dev_src, dev_tgt = tok.encode_batch(held[:n_dev]), tok.encode_batch(held_pt[:n_dev])
    dev_batches = [
        collate([dev_src[i] for i in g], [dev_tgt[i] for i in g], cfg.pad_id, cfg.bos_id, cfg.eos_id)
        for g in token_batches([len(s) for s in dev_src], [len(t) for t in dev_tgt], 3000, 0, 0, shuffle=False)
    ]
    n_sent = sum(pairs["sentence"])
    print(
        f"student: {student.n_parameters():,} parameters, {n_trainable:,} trainable ({recipe.scope}); "
        f"{len(pairs['src']):,} pairs ({n_sent:,} sentences x{recipe.sentence_weight}); "
        f"{'resumed at step ' + str(trainer.step) if resumed else 'fresh start'}",
        flush=True,
    )
    sent_idx = [i for i, s in enumerate(pairs["sentence"]) if s]
    index = list(range(len(pairs["src"]))) + sent_idx * (recipe.sentence_weight - 1)

    def make_epoch(epoch: int) -> list[Batch]:
        groups = token_batches(
            [len(pairs["src"][i]) for i in index],
            [len(pairs["tgt"][i]) for i in index],
            config.max_tokens,
            config.seed,
            epoch,
        )
        return [
            collate(
                [pairs["src"][index[j]] for j in g],
                [pairs["tgt"][index[j]] for j in g],
                cfg.pad_id,
                cfg.bos_id,
                cfg.eos_id,
            )
            for g in groups
        ]

    def evaluate() -> dict:
        loss = trainer.dev_loss(dev_batches)
        hyps = translate_many(trainer.model.eval(), tok, held[: recipe.dev_chrf_sentences], max_source_tokens=128)
        s = score(hyps, held_pt[: recipe.dev_chrf_sentences])
        return {"dev_loss": round(loss, 4), "dev_bleu": s["bleu"], "dev_chrf": s["chrf"]}

    def on_best(result: dict) -> None:
        save_checkpoint(
            trainer.model,
            tok.path,
            run_dir / "best",
            card="(in training)\n",
            dtype=torch.float16,
            meta=CheckpointMeta(
                name="distilled-en-pt", source_language="en", target_language="pt", extra={"best": result}
            ),
        )

    fit(
        trainer,
        make_epoch,
        evaluate=evaluate,
        on_best=on_best,
        higher_is_better="dev_chrf",
        log_path=log_path,
        progress=recipe.progress,
    )
    return _write_summary(trainer, run_dir, log_path, len(pairs["src"]), n_sent, n_trainable, recipe.dev_chrf_sentences)


def _write_summary(
    trainer: Trainer, run_dir: Path, log_path: Path, n_pairs: int, n_sent: int, n_trainable: int, dev_sentences: int
) -> dict:
    """curves.png and summary.json (steps, wall time, throughput) from the trainer and its JSONL log."""
    plot_curves(log_path, run_dir / "curves.png")
    rows = read_log(log_path)
    speeds = [r["tokens_per_s"] for r in rows if r["type"] == "train"]
    summary = {
        "steps": trainer.step,
        "minutes": round(trainer.elapsed / 60, 2),
        "tokens_seen": trainer.tokens_seen,
        "target_tokens_per_s": round(trainer.tokens_seen / max(trainer.elapsed, 1e-9), 1),
        "median_window_tokens_per_s": sorted(speeds)[len(speeds) // 2] if speeds else None,
        "best_dev_chrf": trainer.best,
        "dev_chrf_sentences": dev_sentences,
        "best_step": best_eval_step(rows, "dev_chrf"),
        "pairs": n_pairs,
        "sentence_pairs": n_sent,
        "trainable": n_trainable,
        "parameters": trainer.model.n_parameters(),
        "threads": torch.get_num_threads(),
        "epochs_completed": trainer.epoch,
        "train_config": asdict(trainer.config),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


# ----------------------------------------------------------------------------- stage: eval
def evaluate_student(
    student: Transformer, teacher: Transformer, tok: Tokenizer, data_dir: Path, head_sweep: int = 0, beam: int = 0
) -> dict:
    """chrF/BLEU of the student against the teacher on the held-out test English (never used for training or
    model selection), as trained and under switches; plus the zero-initialised student and throughput."""
    held = read_lines(data_dir / "heldout.en")
    held_pt = read_lines(data_dir / "heldout.teacher.pt")
    n_dev = json.loads((data_dir / "sources.json").read_text()).get("dev", 500)
    test, ref = held[n_dev:], held_pt[n_dev:]
    result: dict = {"n": len(test), "switches": switch_rows(student, tok, test, ref, options_grid(student.config))}
    trained = result["switches"]["as trained"]
    result["student_sentences_per_s"] = round(len(test) / trained["seconds"], 1)
    result["student_output_tokens_per_s"] = round(trained["output_tokens"] / trained["seconds"], 1)
    if beam:  # the student with beam search, still against the teacher's greedy output
        t0 = time.perf_counter()
        hyps = translate_many(student, tok, test, beam_size=beam, max_source_tokens=128)
        result["switches"][f"as trained, beam {beam}"] = score_row(hyps, ref, time.perf_counter() - t0)
        print(f"eval as trained, beam {beam}: {result['switches'][f'as trained, beam {beam}']}", flush=True)
    t0 = time.perf_counter()
    counts: dict[str, int] = {}
    translate_many(teacher, tok, test, max_source_tokens=128, counts=counts)
    seconds = time.perf_counter() - t0
    result["teacher_sentences_per_s"] = round(len(test) / seconds, 1)
    result["teacher_output_tokens_per_s"] = round(counts["output_tokens"] / seconds, 1)
    hyps = translate_many(build_student(teacher), tok, test, max_source_tokens=128)
    result["zero_init_student"] = score(hyps, ref)
    if head_sweep:
        sweep = {}
        for layer in range(student.config.n_decoder_layers):
            for head in range(student.config.n_heads):
                hyps = translate_many(
                    student,
                    tok,
                    test[:head_sweep],
                    max_source_tokens=128,
                    options=InferenceOptions(ablate=frozenset({("decoder", layer, head)})),
                )
                sweep[f"{layer}.{head}"] = score(hyps, ref[:head_sweep])["chrf"]
        result["single_head_ablation_chrf"] = {"n": head_sweep, "chrf": sweep}
    return result


# ----------------------------------------------------------------------------- the recipe
STAGES = ("data", "train", "eval", "publish")


def distill(recipe: SentenceRecipe) -> None:
    """Distils the Bergamot en->pt teacher into a student with decoder self-attention (resumable stages)."""
    stages = recipe.stages
    if recipe.compare and not Path(recipe.compare).exists():
        raise InputError(f"--compare {recipe.compare}: no such checkpoint folder")
    if recipe.compare and not (Path(recipe.compare) / CONFIG).is_file():  # the side-by-side left it out without a word
        raise InputError(f"--compare {recipe.compare}: not a checkpoint folder (a checkpoint folder holds {CONFIG})")
    if "publish" in stages:
        check_output_folder(recipe.out)  # refused before hours of training, not after them
    teacher, tok, _ = load_checkpoint(recipe.teacher)
    if teacher.config.decoder_self != "ssru":
        raise CheckpointError(f"{recipe.teacher}: the teacher must have decoder_self='ssru'")
    data_dir, run_dir, out = Path(recipe.data_dir), Path(recipe.run_dir), Path(recipe.out)
    if "data" in stages:
        flag = data_dir / "data.json"
        if flag.is_file():
            print(f"data: {flag} exists; skipping", flush=True)
        else:
            stats = make_data(
                teacher,
                tok,
                Path(recipe.split),
                data_dir,
                max_train=recipe.max_train,
                minutes=recipe.translate_minutes,
                seed=0,
                fortunes=recipe.fortunes,
                max_tokens=2000,
            )
            flag.write_text(json.dumps({"finished": True, **stats}, indent=1) + "\n")
    if "train" in stages:
        train_student(recipe, teacher, tok, run_dir)
    if not stages & {"eval", "publish"}:
        return
    student, _, _ = load_checkpoint(run_dir / "best")
    eval_path = run_dir / "eval.json"
    if "eval" in stages and not eval_path.is_file():
        evaluation = evaluate_student(
            student, teacher, tok, data_dir, head_sweep=recipe.head_sweep, beam=recipe.eval_beam
        )
        eval_path.write_text(json.dumps(evaluation, indent=1) + "\n")
    if "publish" in stages:
        evaluation = json.loads(eval_path.read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
        sbs = side_by_side(student, teacher, tok, Path(recipe.compare) if recipe.compare else None)
        (run_dir / "side_by_side.json").write_text(json.dumps(sbs, indent=1, ensure_ascii=False) + "\n")
        notes = Path(recipe.notes).read_text(encoding="utf-8") if recipe.notes else ""
        extra = {
            "teacher": str(recipe.teacher),
            "distillation": {
                "scope": recipe.scope,
                "steps": summary.get("steps"),
                "held_out_vs_teacher": evaluation["switches"],
            },
        }
        meta = CheckpointMeta(name=out.name, source_language="en", target_language="pt", extra=extra)
        save_checkpoint(student, tok.path, out, card="(being written)\n", meta=meta, dtype=torch.float16)
        if (run_dir / "curves.png").is_file():
            shutil.copyfile(run_dir / "curves.png", out / "curves.png")
        size = folder_mb(out)
        card = build_card(recipe, summary=summary, evaluation=evaluation, sbs=sbs, size_mb=size, notes=notes)
        write_card_file(out, compose(card))
        print(f"published {out} ({size:.1f} MB)", flush=True)
