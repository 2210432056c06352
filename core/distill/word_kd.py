"""Word-level knowledge distillation: the loss and the trainer that adds it (``python -m core distill-long``)."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from ..training.batching import Batch
from ..training.train import TrainConfig, Trainer
from ..transformer.model import Transformer


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
        self.teacher = teacher.to(self.device).eval()
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        self.kd_weight = kd_weight

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
