"""Activation patching (causal tracing) for an encoder-decoder model.

A clean source sentence and a corrupted one (a word replaced, same number of pieces) are run teacher-forced on
the clean translation. The corrupted run makes the clean output token at position ``t`` less likely; then ONE
site at a time is copied from the clean run into the corrupted run — a source position's residual stream after
the embedding or an encoder layer, one cross-attention head's output, a target position's residual stream after
a decoder layer — and the clean token's probability is read again. A site that restores it carries the
information the corruption destroyed. Every patched site is one row of a batched pass (``core.Patch(rows=...)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..bundle import Bundle
from ..config import InferenceOptions
from ..errors import InputError
from ..fast.weights import FastWeights
from ..recording.call import Call
from ..recording.interventions import Patch
from ..recording.recorder import Recorder
from ..recording.trace import ModelShape, Trace
from ..sites import analysis_site, attention_array, embed_site, layer_site
from ..transformer.model import Transformer


@dataclass(frozen=True)
class PatchingResult:
    """Probability of the clean token at ``position`` under each single patch, and how much of it that restores."""

    position: int  # output position t (0-based; the token predicted from decoder input t)
    token_id: int
    p_clean: float
    p_corrupt: float
    encoder: np.ndarray  # (1 + encoder layers, Ts): row 0 = embeddings, row l + 1 = after encoder layer l
    cross_heads: np.ndarray  # (decoder layers, H): one cross-attention head's output, at every target position
    decoder: np.ndarray  # (decoder layers, t + 1): a target position's stream after a decoder layer
    changed_positions: tuple[int, ...]  # source positions where the corrupted sentence differs

    def restored(self, probs: np.ndarray) -> np.ndarray:
        """(p - p_corrupt) / (p_clean - p_corrupt): 1 = the clean probability is back, 0 = no effect."""
        gap = self.p_clean - self.p_corrupt
        if abs(gap) < 1e-6:
            return np.zeros_like(probs)
        return (probs - self.p_corrupt) / gap

    def to_arrays(self, corrupt_text: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """For ``Trace.with_analysis``: the three probability tables, and the details."""
        arrays = {analysis_site("patching", k): getattr(self, k) for k in ("encoder", "cross_heads", "decoder")}
        details = {k: v for k, v in self.to_dict().items() if k not in ("encoder", "cross_heads", "decoder")}
        return arrays, {"patching": {**details, "corrupt_text": corrupt_text}}

    @classmethod
    def from_trace(cls, trace: Trace) -> tuple[PatchingResult, str] | None:
        """The patching result stored in ``trace`` and its corrupted sentence, or None."""
        info = dict(trace.meta.get("analysis", {})).get("patching")
        if not info or analysis_site("patching", "encoder") not in trace:
            return None
        encoder, cross_heads, decoder = (
            np.asarray(trace[analysis_site("patching", k)]) for k in ("encoder", "cross_heads", "decoder")
        )
        result = cls(
            int(info["position"]),
            int(info["token_id"]),
            float(info["p_clean"]),
            float(info["p_corrupt"]),
            encoder,
            cross_heads,
            decoder,
            tuple(int(j) for j in info["changed_positions"]),
        )
        return result, str(info.get("corrupt_text", ""))

    def to_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "token_id": self.token_id,
            "p_clean": self.p_clean,
            "p_corrupt": self.p_corrupt,
            "changed_positions": list(self.changed_positions),
            "encoder": self.encoder.round(6).tolist(),
            "cross_heads": self.cross_heads.round(6).tolist(),
            "decoder": self.decoder.round(6).tolist(),
        }


def _probs(
    model: Transformer,
    src: torch.Tensor,
    tgt: torch.Tensor,
    position: int,
    token_id: int,
    options: InferenceOptions,
    recorder: Recorder | None,
    fast: FastWeights | None,
) -> torch.Tensor:
    """p(token_id at ``position``) per batch row: (B,)."""
    keep = torch.ones_like(src, dtype=torch.bool)
    if options.causal_mask:  # later decoder inputs cannot change this position: its prefix, and its logits only
        logits = model(
            src,
            tgt[:, : position + 1],
            call=Call(options=options, recorder=recorder, fast=fast),
            src_keep=keep,
            last_only=True,
        )[:, -1]  # (B, V)
    else:  # without the causal mask every decoder input can
        logits = model(src, tgt, call=Call(options=options, recorder=recorder, fast=fast), src_keep=keep)[:, position]
    return torch.softmax(logits.float(), dim=-1)[:, token_id]


@torch.no_grad()
def activation_patching(
    bundle: Bundle,
    clean_ids: list[int],
    corrupt_ids: list[int],
    out_ids: list[int],
    *,
    position: int | None = None,
    options: InferenceOptions = InferenceOptions(),
    batch_rows: int = 64,
) -> PatchingResult:
    """Patch every site, one at a time, from the clean run (source ``clean_ids``) into the corrupted one, through
    ``bundle``'s model and fast weights (as its runs).

    out_ids: the clean translation (eos included); both runs are teacher-forced on it. position: the output
    position to explain (default: where the corruption lowers the clean token's probability most).
    """
    options.whole_vocabulary("activation patching")
    if len(clean_ids) != len(corrupt_ids):
        raise InputError(
            f"the corrupted sentence has {len(corrupt_ids)} pieces and the clean one {len(clean_ids)}: patching "
            "compares them position by position, so replace a word by one of the same number of pieces"
        )
    changed = tuple(j for j, (a, b) in enumerate(zip(clean_ids, corrupt_ids, strict=True)) if a != b)
    if not changed:
        raise InputError("the corrupted sentence is the same as the clean one: change a word")
    if not out_ids:
        raise InputError("patching needs a translation of at least one token")
    model, fast, cfg, device = bundle.model, bundle.fast, bundle.config, bundle.device
    shape = ModelShape.of(cfg)
    clean = torch.tensor([clean_ids], device=device)
    corrupt = torch.tensor([corrupt_ids], device=device)
    tgt = torch.tensor([[cfg.bos_id] + out_ids[:-1]], device=device)  # (1, Tt)
    rec = Recorder(model, activations=True)
    keep = torch.ones_like(clean, dtype=torch.bool)
    clean_logits = model(clean, tgt, call=Call(options=options, recorder=rec, fast=fast), src_keep=keep)
    trace: Trace = rec.freeze()
    corrupt_logits = model(corrupt, tgt, call=Call(options=options, fast=fast), src_keep=keep)
    targets = torch.tensor(out_ids, device=device)
    p_clean_all = torch.softmax(clean_logits[0].float(), -1).gather(-1, targets[:, None])[:, 0]  # (Tt,)
    p_corrupt_all = torch.softmax(corrupt_logits[0].float(), -1).gather(-1, targets[:, None])[:, 0]
    if position is None:
        position = int((p_clean_all - p_corrupt_all).argmax())
    if not 0 <= position < len(out_ids):
        raise InputError(f"position must be from 0 to {len(out_ids) - 1}, got {position}")
    token_id = out_ids[position]
    Ts = len(clean_ids)
    sites: list[tuple[str, int, int, Patch]] = []  # (table, row, column, patch without rows)
    for layer, site in enumerate(
        [embed_site("src")] + [layer_site("encoder", i) for i in range(shape.n_encoder_layers)]
    ):
        for j in range(Ts):
            sites.append(("encoder", layer, j, Patch(site, trace[site], positions=(j,))))
    for layer in range(shape.n_decoder_layers):
        for h in range(shape.n_heads):
            name = attention_array("cross", layer, "heads")
            sites.append(("cross_heads", layer, h, Patch(name, trace[name], heads=(h,))))
    for layer in range(shape.n_decoder_layers):
        for i in range(position + 1):
            name = layer_site("decoder", layer)
            sites.append(("decoder", layer, i, Patch(name, trace[name], positions=(i,))))
    tables = {
        "encoder": np.zeros((1 + shape.n_encoder_layers, Ts)),
        "cross_heads": np.zeros((shape.n_decoder_layers, shape.n_heads)),
        "decoder": np.zeros((shape.n_decoder_layers, position + 1)),
    }
    for start in range(0, len(sites), batch_rows):
        chunk = sites[start : start + batch_rows]
        patches = [
            Patch(p.site, p.value, positions=p.positions, heads=p.heads, rows=(row,))
            for row, (_, _, _, p) in enumerate(chunk)
        ]
        rows = len(chunk)
        probs = _probs(
            model,
            corrupt.expand(rows, -1),
            tgt.expand(rows, -1),
            position,
            token_id,
            options,
            Recorder(model, record=False, interventions=patches),
            fast,
        )
        for (table, r, c, _), p in zip(chunk, probs.tolist(), strict=True):
            tables[table][r, c] = p
    return PatchingResult(
        position,
        token_id,
        float(p_clean_all[position]),
        float(p_corrupt_all[position]),
        tables["encoder"],
        tables["cross_heads"],
        tables["decoder"],
        changed,
    )
