"""The training loop behind ``python -m core train`` (whose recipes live in ``core.training.recipes``).

Label smoothing, Adam(0.9, 0.98, 1e-9) with the paper's warm-up schedule, batches by token count,
gradient clipping, periodic dev loss and BLEU, best checkpoint kept, resumable, fixed seeds,
a progress bar, a JSONL log and a loss-curve PNG. Several processes through ``torchrun`` (DDP).
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from ..config import ModelConfig
from ..errors import InputError, ResumeError
from ..storage.durable import replace_durably
from ..transformer.model import Transformer
from .batching import Batch, collate, token_batches


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings. Model shape lives in ModelConfig."""

    max_tokens: int = 3000  # padded target-or-source tokens per batch (per process)
    warmup: int = 1000
    lr_factor: float = 1.0
    label_smoothing: float = 0.1
    clip: float = 1.0
    seed: int = 1234
    eval_every: int = 500
    log_every: int = 20
    max_steps: int = 0  # 0 = no limit
    max_minutes: float = 0.0  # 0 = no limit
    epochs: int = 100
    save_minutes: float = 1.0  # resume state saved at least this often (wall time), evaluations or not; 0 = only then
    anneal_start: int = 0  # from this step on (0 = never) the schedule's rate is scaled down linearly ...
    anneal_steps: int = 0  # ... reaching 0 after this many steps (a cool-down at the end of a time-boxed run)

    def __post_init__(self) -> None:
        if (
            self.max_tokens < 16
            or self.warmup < 1
            or self.lr_factor <= 0
            or not 0 <= self.label_smoothing < 1
            or self.save_minutes < 0
            or self.log_every < 1
            or self.eval_every < 0
            or self.max_steps < 0
            or self.max_minutes < 0
            or self.epochs < 1
            or not all(math.isfinite(v) for v in (self.lr_factor, self.clip, self.max_minutes, self.save_minutes))
        ):
            raise InputError(
                "TrainConfig: max_tokens must be >= 16, warmup >= 1, lr_factor > 0, label_smoothing in [0, 1), "
                f"save_minutes >= 0, log_every >= 1, eval_every >= 0, max_steps >= 0 (0: no limit), max_minutes >= 0, "
                f"epochs >= 1 and every rate and time finite; got {self}"
            )
        if self.anneal_start < 0 or self.anneal_steps < 0 or (self.anneal_start > 0) != (self.anneal_steps > 0):
            raise InputError(f"TrainConfig: anneal_start and anneal_steps go together (both > 0), got {self}")


def use_threads(threads: int) -> None:
    """``--threads``: 0 leaves torch's default; more than the machine's cores is refused (100,000 crashed torch,
    5,000 hung)."""
    cores = os.cpu_count() or 1
    if not 0 <= threads <= cores:
        raise InputError(f"--threads must be 0 (torch's default) to {cores} (this machine's cores), got {threads}")
    if threads:
        torch.set_num_threads(threads)


STATE_KEY = "core_train_state"  # the safetensors metadata entry holding the counters


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """The paper's schedule: factor * d^-0.5 * min(step^-0.5, step * warmup^-1.5)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def is_main() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def init_distributed() -> tuple[int, int]:
    """(rank, world) — starts a process group when launched by torchrun (gloo on CPU, nccl on CUDA)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return (dist.get_rank(), world) if dist.is_initialized() else (0, 1)


class Trainer:
    """Owns the model, the optimiser and the step counter; the caller supplies batches."""

    def __init__(self, model: Transformer, config: TrainConfig, run_dir: Path, device: torch.device) -> None:
        self.model, self.config, self.run_dir, self.device = model.to(device), config, Path(run_dir), device
        self.module: nn.Module = model  # wrapped in DistributedDataParallel under torchrun
        if dist.is_initialized():
            self.module = DistributedDataParallel(model)
        self.optimizer: torch.optim.Optimizer = torch.optim.Adam(
            model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9
        )
        self.step, self.epoch, self.batch_in_epoch = 0, 0, 0
        self.skipped = 0  # batches refused by ``train_step`` (a non-finite gradient: no step taken)
        self.best: float | None = None
        self.tokens_seen = 0
        self.elapsed = 0.0

    def lr(self) -> float:
        """The rate for the next step: the paper's schedule, times the linear cool-down if one is set."""
        cfg = self.config
        rate = noam_lr(self.step + 1, self.model.config.d_model, cfg.warmup, cfg.lr_factor)
        if cfg.anneal_steps and self.step >= cfg.anneal_start:
            rate *= max(0.0, 1.0 - (self.step - cfg.anneal_start) / cfg.anneal_steps)
        return rate

    def loss(self, batch: Batch, label_smoothing: float | None = None) -> torch.Tensor:
        logits = self.module(batch.src, batch.tgt_in, src_keep=batch.src_keep, tgt_keep=None)  # (B, Tt, V)
        ls = self.config.label_smoothing if label_smoothing is None else label_smoothing
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(),
            batch.tgt_out.reshape(-1),
            ignore_index=-100,
            label_smoothing=ls,
        )

    def train_step(self, batch: Batch) -> float | None:
        """One optimizer step on ``batch``: its loss, or None when the batch is refused. A batch whose loss or
        gradient is not finite (an overflow, a broken teacher, a target its logits rule out) changes no weight and
        no optimizer state and is counted in ``skipped``. Data-parallel ranks decide together (a refusal on any
        rank is shared with an all-reduce), so every rank refuses the same batch."""
        self.module.train()
        batch = batch.to(self.device)
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr() * group.get("lr_scale", 1.0)  # optional per-group scale
        loss = self.loss(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip)
        bad = torch.logical_not(torch.isfinite(loss.detach()) & torch.isfinite(norm)).float()
        if dist.is_initialized():
            dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        if bool(bad):
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped += 1
            why = (
                "non-finite loss"
                if not torch.isfinite(loss)
                else "non-finite gradient"
                if not torch.isfinite(norm)
                else "another rank's non-finite loss or gradient"
            )
            print(f"step {self.step}: {why} on a batch of {tuple(batch.src.shape)}; skipped", flush=True)
            return None
        self.optimizer.step()
        self.step += 1
        self.tokens_seen += batch.n_target_tokens
        return float(loss.detach())

    @torch.no_grad()
    def dev_loss(self, batches: Iterable[Batch]) -> float:
        """Token-averaged cross-entropy without label smoothing."""
        self.model.eval()
        total, count = 0.0, 0
        for batch in batches:
            batch = batch.to(self.device)
            n = batch.n_target_tokens
            total += float(self.loss(batch, label_smoothing=0.0)) * n
            count += n
        return total / max(count, 1)

    # ------------------------------------------------------------ resume (no pickle: safetensors + JSON)
    def save_state(self) -> None:
        """Weights, Adam moments and counters as ONE file (``state.safetensors``, counters in its metadata),
        written to a temporary name, fsynced and renamed: a crash leaves the previous state or the new one,
        never a mix. ``state.json`` is a copy of the counters for people; resume never reads it."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        aliases = self.model.tied_aliases()  # once, not once per tensor
        tensors = {
            f"model.{k}": v.detach().cpu().contiguous() for k, v in self.model.state_dict().items() if k not in aliases
        }
        params = list(self.model.parameters())
        for i, p in enumerate(params):
            st = self.optimizer.state.get(p)
            if st:
                tensors[f"adam.{i}.exp_avg"] = st["exp_avg"].cpu().contiguous()
                tensors[f"adam.{i}.exp_avg_sq"] = st["exp_avg_sq"].cpu().contiguous()
                tensors[f"adam.{i}.step"] = torch.as_tensor(st["step"], dtype=torch.float32).reshape(1).cpu()
        meta = {
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "best": self.best,
            "tokens_seen": self.tokens_seen,
            "elapsed": self.elapsed,
            "train_config": asdict(self.config),
            "model_config": self.model.config.to_dict(),
        }
        tmp = self.run_dir / "state.safetensors.tmp"
        save_file(tensors, str(tmp), metadata={STATE_KEY: json.dumps(meta)})
        replace_durably(tmp, self.run_dir / "state.safetensors")
        readable = self.run_dir / "state.json.tmp"
        readable.write_text(json.dumps(meta, indent=1))
        os.replace(readable, self.run_dir / "state.json")

    def load_state(self) -> bool:
        """Resume from run_dir if a saved state exists and matches this model. Returns whether it resumed.

        Raises ResumeError (a ValueError) naming the file when the state is unreadable, from another model,
        or inconsistent (the optimizer's step count differs from the saved step: resuming would replay
        batches on the wrong weights)."""
        tensor_path = self.run_dir / "state.safetensors"
        if not tensor_path.is_file():
            return False
        try:
            with safe_open(str(tensor_path), "pt") as f:
                raw = (f.metadata() or {}).get(STATE_KEY)
            tensors = load_file(str(tensor_path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise ResumeError(f"{tensor_path}: cannot be read ({exc}); delete it to start this run afresh") from None
        if raw is None:
            raise ResumeError(
                f"{tensor_path}: holds no step counters (written by an older version, whose state was two files "
                "that a crash could leave out of step); delete it to start this run afresh"
            )
        meta = json.loads(raw)
        if meta["model_config"] != self.model.config.to_dict():
            raise ResumeError(f"{tensor_path}: saved for a different model config; use another --run-dir")
        steps = {float(v) for k, v in tensors.items() if k.startswith("adam.") and k.endswith(".step")}
        if steps and steps != {float(meta["step"])}:
            raise ResumeError(
                f"{tensor_path}: inconsistent — the counters say step {meta['step']} but the optimizer state is at "
                f"step(s) {sorted(int(s) for s in steps)}; delete it to start this run afresh"
            )
        self.model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, strict=False)
        for i, p in enumerate(self.model.parameters()):
            if f"adam.{i}.exp_avg" in tensors:
                self.optimizer.state[p] = {
                    "exp_avg": tensors[f"adam.{i}.exp_avg"].to(self.device),
                    "exp_avg_sq": tensors[f"adam.{i}.exp_avg_sq"].to(self.device),
                    "step": tensors[f"adam.{i}.step"].reshape(()).clone(),
                }
        self.step, self.epoch, self.batch_in_epoch = meta["step"], meta["epoch"], meta["batch_in_epoch"]
        self.best, self.tokens_seen, self.elapsed = meta["best"], meta["tokens_seen"], meta.get("elapsed", 0.0)
        return True


def trim_log(log_path: Path, step: int) -> None:
    """Drop log entries past ``step`` (written after the state a run resumes from, so they are about to be
    redone): the log then lists every step once."""
    if not log_path.is_file():
        return
    lines = log_path.read_text(encoding="utf-8").splitlines()
    kept = []
    for line in lines:
        try:
            entry_step = json.loads(line).get("step", 0)
        except (json.JSONDecodeError, AttributeError):
            continue  # a line cut off by the crash
        if entry_step <= step:
            kept.append(line)
    if len(kept) != len(lines):
        tmp = log_path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        os.replace(tmp, log_path)


def read_log(log_path: Path) -> list[dict]:
    """The entries of a run's JSONL log (``fit`` writes it), oldest first; a line cut off by a crash is left out,
    and a missing log is empty."""
    if not log_path.is_file():
        return []
    rows = []
    for line in log_path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict):
            rows.append(entry)
    return rows


def best_eval_step(rows: list[dict], metric: str) -> int | None:
    """The step of the weights ``fit`` handed to ``on_best`` last, from its log's entries (``read_log``): the first
    evaluation with the highest ``metric`` (it keeps a later one only when it scores strictly higher); None
    before any evaluation."""
    evals = [r for r in rows if r.get("type") == "eval" and metric in r]
    return int(max(evals, key=lambda r: r[metric])["step"]) if evals else None


def fit(
    trainer: Trainer,
    make_epoch: Callable[[int], list[Batch]],
    *,
    evaluate: Callable[[], dict] | None = None,
    on_best: Callable[[dict], None] | None = None,
    higher_is_better: str = "dev_bleu",
    log_path: Path | None = None,
    progress: bool = True,
    evaluate_first: bool = False,
) -> dict:
    """The training loop. ``make_epoch(epoch)`` returns that epoch's batches (already sharded for this rank).

    Every ``eval_every`` steps (and at the end) ``evaluate()`` runs on rank 0; when its ``higher_is_better``
    metric improves ``on_best`` is called. ``evaluate_first``: a fresh run (step 0, no best yet) is evaluated
    before its first step too, so the weights it starts from count as the best so far (a run that goes on from a
    trained model then never hands out anything worse than what it started from). State is saved after each
    evaluation and at least every ``save_minutes`` of wall time, so a cut-off loses at most that much work; log
    entries past the resumed step are dropped first, so a resumed run's log lists every step once.
    """
    cfg = trainer.config
    start_time = time.perf_counter() - trainer.elapsed
    last = {"step": trainer.step}
    bar = tqdm(
        total=cfg.max_steps or None,
        initial=trainer.step,
        disable=not (progress and is_main()),
        dynamic_ncols=True,
        desc="train",
    )
    if log_path and is_main():
        trim_log(log_path, trainer.step)
    log = open(log_path, "a", encoding="utf-8") if (log_path and is_main()) else None
    last_save = time.perf_counter()
    window_loss, window_tokens, window_start = 0.0, 0, time.perf_counter()

    def out_of_budget() -> bool:
        minutes = (time.perf_counter() - start_time) / 60
        return bool(
            (cfg.max_steps and trainer.step >= cfg.max_steps) or (cfg.max_minutes and minutes >= cfg.max_minutes)
        )

    def save() -> None:
        nonlocal last_save
        trainer.elapsed = time.perf_counter() - start_time
        if is_main():
            trainer.save_state()
        last_save = time.perf_counter()

    def run_eval() -> None:
        nonlocal last
        trainer.elapsed = time.perf_counter() - start_time
        if is_main() and evaluate is not None:
            result = {
                "step": trainer.step,
                "epoch": trainer.epoch,
                "minutes": round(trainer.elapsed / 60, 2),
                **evaluate(),
            }
            metric = result.get(higher_is_better)
            if metric is not None and (trainer.best is None or metric > trainer.best):
                trainer.best = metric
                if on_best:
                    on_best(result)
            if log:
                log.write(json.dumps({"type": "eval", **result}) + "\n")
                log.flush()
            bar.write(json.dumps(result))
            last = result
        save()
        if dist.is_initialized():
            dist.barrier()

    try:
        if evaluate_first and trainer.step == 0 and trainer.best is None:
            run_eval()
        while trainer.epoch < cfg.epochs and not out_of_budget():
            batches = make_epoch(trainer.epoch)
            for batch in batches[trainer.batch_in_epoch :]:
                loss = trainer.train_step(batch)
                trainer.batch_in_epoch += 1
                stepped = loss is not None  # None: the trainer refused the batch (a non-finite loss or gradient)
                if loss is not None:  # (as ``stepped``, spelled so that the type checker narrows ``loss``)
                    window_loss += loss * batch.n_target_tokens
                    window_tokens += batch.n_target_tokens
                    bar.update(1)
                if stepped and trainer.step % cfg.log_every == 0:
                    seconds = time.perf_counter() - window_start
                    entry = {
                        "type": "train",
                        "step": trainer.step,
                        "epoch": trainer.epoch,
                        "loss": round(window_loss / max(window_tokens, 1), 4),
                        "lr": trainer.lr(),
                        "tokens_per_s": round(window_tokens / max(seconds, 1e-9), 1),
                        "minutes": round((time.perf_counter() - start_time) / 60, 2),
                    }
                    bar.set_postfix(loss=entry["loss"], tok_s=entry["tokens_per_s"])
                    if log:
                        log.write(json.dumps(entry) + "\n")
                        log.flush()
                    window_loss, window_tokens, window_start = 0.0, 0, time.perf_counter()
                if stepped and cfg.eval_every and trainer.step % cfg.eval_every == 0:
                    run_eval()
                elif cfg.save_minutes and time.perf_counter() - last_save >= cfg.save_minutes * 60:
                    save()  # rank 0 only, no barrier: the other ranks carry on (refused batches included)
                if out_of_budget():
                    break
            else:
                trainer.epoch, trainer.batch_in_epoch = trainer.epoch + 1, 0
        run_eval()
    finally:
        bar.close()
        if log:
            log.close()
    return last


def _numbers(entry: dict, *names: str) -> bool:
    return all(isinstance(entry.get(n), int | float) and not isinstance(entry.get(n), bool) for n in names)


def plot_curves(
    log_path: Path, png_path: Path, train_label: str = "train (label-smoothed)", loss_label: str = "cross-entropy"
) -> None:
    """Training loss and dev loss/BLEU against steps, from the JSONL log (the labels name what the loss was)."""
    import matplotlib  # heavy (half a second) and only for this picture; the backend is set before pyplot loads

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_log(log_path)
    # what a plot can draw: a log edited by hand may hold entries without a kind or a number (publish names those)
    train = [r for r in rows if r.get("type") == "train" and _numbers(r, "step", "loss")]
    evals = [r for r in rows if r.get("type") == "eval" and _numbers(r, "step")]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    ax[0].plot([r["step"] for r in train], [r["loss"] for r in train], label=train_label, lw=1)

    def series(name: str) -> tuple[list[float], list[float]]:
        have = [r for r in evals if _numbers(r, name)]
        return [r["step"] for r in have], [r[name] for r in have]

    if series("dev_loss")[0]:
        ax[0].plot(*series("dev_loss"), "o-", label="dev (no smoothing)")
    ax[0].set_xlabel("step")
    ax[0].set_ylabel(loss_label)
    ax[0].legend()
    ax[0].grid(alpha=0.3)
    if series("dev_bleu")[0]:
        ax[1].plot(*series("dev_bleu"), "o-", color="C2", label="dev BLEU (greedy)")
        if series("dev_chrf")[0]:
            ax[1].plot(*series("dev_chrf"), "s-", color="C3", label="dev chrF")
        ax[1].legend()
    ax[1].set_xlabel("step")
    ax[1].grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)


__all__ = [
    "TrainConfig",
    "Trainer",
    "fit",
    "noam_lr",
    "plot_curves",
    "seed_everything",
    "init_distributed",
    "ModelConfig",
    "collate",
    "token_batches",
]
