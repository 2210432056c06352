"""Publishes the best model of a training run as a checkpoint folder with a card (scores measured now)."""

from __future__ import annotations

import json
import platform
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import InputError, not_utf8
from ..storage.checkpoint import CheckpointMeta, check_output_folder, folder_mb, load_checkpoint, save_checkpoint
from .evaluate import evaluate_split, translate_many
from .recipes import PROBE_SENTENCES
from .train import read_log

MAX_MB = 25.0
SCHEDULE_KEYS = ("warmup", "lr_factor", "max_tokens", "label_smoothing", "clip", "seed")


def _json_object(path: Path) -> dict:
    """The JSON object in ``path``; InputError naming the file when it is not one (a run folder edited by hand)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise not_utf8(path, exc) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: must hold a JSON object, got {type(data).__name__}")
    return data


def _need_numbers(entry: dict, names: tuple[str, ...], where: str) -> None:
    """InputError naming ``where`` and the fields of ``names`` that ``entry`` lacks or holds as no number."""
    bad = [n for n in names if isinstance(entry.get(n), bool) or not isinstance(entry.get(n), int | float)]
    if bad:
        raise InputError(f"{where}: missing or not a number: {', '.join(bad)}")


def _log_summary(run_dir: Path) -> dict:
    log_path, state_path = run_dir / "log.jsonl", run_dir / "state.json"
    rows = read_log(log_path)
    train = [r for r in rows if r.get("type") == "train"]
    evals = [r for r in rows if r.get("type") == "eval"]
    for kind, entries, names in (
        ("train", train, ("loss", "tokens_per_s")),
        ("eval", evals, ("step", "dev_loss", "dev_bleu", "dev_chrf")),
    ):
        for i, entry in enumerate(entries):
            _need_numbers(entry, names, f"{log_path}: {kind} entry {i + 1}")
    state = _json_object(state_path)
    _need_numbers(state, ("step", "epoch", "elapsed", "tokens_seen"), str(state_path))
    if not isinstance(state.get("train_config"), dict) or not all(k in state["train_config"] for k in SCHEDULE_KEYS):
        raise InputError(f"{state_path}: train_config must be an object with {', '.join(SCHEDULE_KEYS)}")
    speeds = sorted(r["tokens_per_s"] for r in train)
    return {
        "steps": state["step"],
        "epochs": state["epoch"],
        "minutes": round(state["elapsed"] / 60, 1),
        "target_tokens": state["tokens_seen"],
        "median_tokens_per_s": speeds[len(speeds) // 2] if speeds else 0,
        "final_train_loss": train[-1]["loss"] if train else None,
        "evals": evals,
        "train_config": state["train_config"],
    }


@dataclass(frozen=True)
class Published:
    """What ``publish`` wrote: the checkpoint folder, its size and the scores in its card."""

    out: Path
    size_mb: float
    scores: dict
    seconds: float


def publish(run_dir: Path, out: Path, split: Path, *, command: str | None = None) -> Published:
    """Publish the best model of the training run ``run_dir`` as the checkpoint folder ``out``, scored now on the
    dev and test sets of ``split``; ``command`` is the training command the card prints (default: a sketch)."""
    check_output_folder(out)  # refused before minutes of scoring, as a broken run file is below
    model, tok, info = load_checkpoint(run_dir / "best")
    read = lambda name: (split / name).read_text(encoding="utf-8").splitlines()  # noqa: E731
    split_info = _json_object(split / "split.json")
    summary = _log_summary(run_dir)
    t0 = time.time()
    scores = {
        "dev": evaluate_split(model, tok, read("dev.en"), read("dev.de")),
        "test": evaluate_split(model, tok, read("test.en"), read("test.de")),
    }
    greedy = translate_many(model, tok, PROBE_SENTENCES)
    beam = translate_many(model, tok, PROBE_SENTENCES, beam_size=4)
    best = info.get("best", {})
    cfg = model.config
    n_params = model.n_parameters()
    command = command or (
        f"python -m core train --run-dir {run_dir} --out {out} "
        f"(then: python -m core publish --run-dir {run_dir} --out {out})"
    )
    rows = "\n".join(
        f"| {s} | {name} | {r['bleu']:.2f} | {r['chrf']:.2f} | {r['n']} |"
        for s in ("dev", "test")
        for name, r in scores[s].items()
    )
    samples = "\n".join(f"| {src} | {g} | {b} |" for src, g, b in zip(PROBE_SENTENCES, greedy, beam, strict=True))
    curve = [
        f"| {e['step']} | {e.get('minutes', '')} | {e['dev_loss']} | {e['dev_bleu']} | {e['dev_chrf']} |"
        for e in summary["evals"]
    ]
    split_counts = json.dumps(split_info.get("counts", split_info))
    split_params = split_info.get("params")  # write_split keeps the seed there, with the held-out sizes
    split_seed = split_params.get("seed") if isinstance(split_params, dict) else split_info.get("seed")
    layers = f"{cfg.n_encoder_layers}+{cfg.n_decoder_layers}"
    schedule = json.dumps({k: summary["train_config"][k] for k in SCHEDULE_KEYS})
    card = f"""# ding-en-de — English → German, trained here from scratch

A Transformer as in "Attention Is All You Need" (pre-norm variant), trained on this project's
2-core CPU machine on the Ding German–English dictionary. It is small and was trained for
{summary["minutes"]} minutes: it translates short everyday sentences, often imperfectly.

## Data
- Source: Debian package `trans-de-en` (the Ding dictionary by Frank Richter, TU Chemnitz), \
licence **GPL-2.0-or-later**.
  Fetched by the training command (`apt-get download trans-de-en`), never committed.
- Parsed by `core/training/corpus.py`; split deterministically (seed {split_seed}): counts {split_counts}.
- Dev and test are full sentences only and share no normalised English or German text with training.
- Training mix per epoch: every training sentence ×{4} plus a fresh random sample of phrase pairs; \
single-word pairs left out.
- Shared SentencePiece unigram vocabulary of {tok.vocab_size} pieces, trained on the training split only.

## Model
d_model {cfg.d_model}, {cfg.n_heads} heads, {layers} layers, FFN {cfg.d_ff}, {cfg.norm}-norm,
sinusoidal positions, tied source/target/output embeddings, dropout {cfg.dropout}: **{n_params:,} parameters**,
stored in float16 ({{size}} MB).

## Training
- Hardware: {platform.machine()} CPU, {torch.get_num_threads()} threads, no GPU; torch {torch.__version__}.
- {summary["steps"]} steps, {summary["epochs"]} full epochs, {summary["minutes"]} minutes wall time,
  {summary["target_tokens"]:,} target tokens (median {summary["median_tokens_per_s"]} target tokens/s).
- Adam(0.9, 0.98, 1e-9), the paper's warm-up schedule ({schedule}).
- Best checkpoint by dev BLEU (greedy, first 300 dev sentences) at step {best.get("step")}.
- Curves: `curves.png` in this folder.

| step | minutes | dev loss | dev BLEU (300, greedy) | dev chrF |
|---|---|---|---|---|
{chr(10).join(curve)}

## Scores (sacreBLEU, measured by `python -m core eval --checkpoint {out}`)
| set | decoding | BLEU | chrF | sentences |
|---|---|---|---|---|
{rows}

## Ten sentences we wrote ourselves
| English | greedy | beam 4 |
|---|---|---|
{samples}

## Reproduce
```
{command}
```
The run resumes after an interruption (state in `{run_dir}/`).

## Limits
Trained for about {round(summary["minutes"])} minutes on 2 CPU cores on dictionary example sentences: expect
errors on long or unusual sentences, names and rare words.
"""
    meta = CheckpointMeta(
        name=out.name,
        source_language="en",
        target_language="de",
        extra={"scores": scores, "training": {k: v for k, v in summary.items() if k != "evals"}},
    )
    save_checkpoint(model, tok.path, out, card=card, meta=meta, dtype=torch.float16)
    size = folder_mb(out)
    (out / "card.md").write_text(card.replace("{size}", f"{size:.1f}"))
    if (run_dir / "curves.png").is_file():
        shutil.copyfile(run_dir / "curves.png", out / "curves.png")
    return Published(out, folder_mb(out), scores, time.time() - t0)
