"""Attribution of one output token to the input tokens: gradient × input and integrated gradients.

The function explained is log p(y_t), the log-probability of the output token at position ``t`` (teacher-forced
on the translation). Its inputs are the layers' inputs: the source embeddings (``embed.src``, token embedding
× √D + positional encoding) and the target-prefix embeddings (``embed.tgt``), both taken through the engine's
``keep_grad``. A token's score is the sum over its D dimensions.

Integrated gradients (Sundararajan et al., 2017) integrate the gradient along the straight line from a
baseline to the input with ``steps`` points of the midpoint rule; its convergence delta — the sum of all
attributions minus f(input) − f(baseline) — says how close the integral is (0 when exact; more steps shrink it).
The default baseline keeps each position's positional encoding and removes the token ("position"): the input
scaled towards all-zero embeddings ("zero") meets LayerNorm's scale invariance — a post-norm model gives
nearly the same output for every scale above 0 and jumps at 0, so the path integral misses the jump (its
delta then shows it).

Contrastive attribution (Yin & Neubig, 2022, "Interpreting language models with contrastive explanations";
Inseq's ``contrast_logits_diff`` and ``contrast_prob_diff``) asks why y_t and not an alternative piece c at the
same position, after the same prefix: it explains log p(y_t) - log p(c) ("logit_diff", the difference of the two
logits: the softmax's normaliser cancels) or p(y_t) - p(c) ("prob_diff") with the same two methods.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import torch
from torch import Tensor

from ..bundle import Bundle
from ..config import InferenceOptions
from ..errors import InputError
from ..recording.call import Call
from ..recording.interventions import Patch
from ..recording.recorder import Recorder
from ..recording.trace import Trace
from ..sites import analysis_site, embed_site, pe_site

MAX_IG_STEPS = 512  # the path's points are one batch: more only fills the memory (the error then shrinks slowly)
ContrastKind = Literal["logit_diff", "prob_diff"]  # log p(y_t) - log p(c), or p(y_t) - p(c)
CONTRAST_KINDS: tuple[str, ...] = get_args(ContrastKind)


@dataclass(frozen=True)
class IntegratedGradients:
    """Integrated gradients of one scalar function at one input, and the check that they add up."""

    attributions: Tensor  # shaped like the input
    f_input: float  # f(x)
    f_baseline: float  # f(baseline)

    @property
    def delta(self) -> float:
        """Convergence delta: sum(attributions) - (f(x) - f(baseline)); 0 when the path integral is exact."""
        return float(self.attributions.sum()) - (self.f_input - self.f_baseline)


def integrated_gradients(
    f: Callable[[Tensor], Tensor], x: Tensor, baseline: Tensor, steps: int = 32
) -> IntegratedGradients:
    """IG of a batched scalar function ``f`` ((m, *shape) -> (m,)) at ``x`` (*shape) from ``baseline``.

    The attributions should add up to f(x) - f(baseline) (completeness); ``delta`` says how far they miss.
    The ``steps`` midpoints of the path are evaluated as one batch.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    alphas = (torch.arange(steps, dtype=x.dtype, device=x.device) + 0.5) / steps  # midpoints of [0, 1]
    path = (baseline + alphas.view(-1, *[1] * x.dim()) * (x - baseline)).detach().requires_grad_(True)
    with torch.enable_grad():
        (grads,) = torch.autograd.grad(f(path).sum(), path)
    attributions = (x - baseline) * grads.mean(0)
    with torch.no_grad():
        ends = f(torch.stack([x, baseline]))
    return IntegratedGradients(attributions.detach(), float(ends[0]), float(ends[1]))


@dataclass(frozen=True)
class Attribution:
    """Attribution of output token ``position`` to the source and target-prefix tokens (per token, summed over D)."""

    position: int
    token_id: int
    logprob: float  # log p(y_t) at the input
    source_grad_x_input: np.ndarray  # (Ts,)
    target_grad_x_input: np.ndarray  # (t + 1,): decoder inputs 0..t (all of them with the causal mask off)
    source_ig: np.ndarray  # (Ts,)
    target_ig: np.ndarray  # like target_grad_x_input
    ig_delta: float  # convergence delta of integrated gradients
    ig_steps: int
    baseline: str  # "position" (positional encodings only) or "zero" (all-zero embeddings)
    f_input: float | None = None  # f at the input, as the path's end computes it (None: an older trace)
    f_baseline: float | None = None  # f at the baseline (what the attributions explain is the difference)
    contrast_id: int | None = None  # the alternative piece c (None: f is log p(y_t))
    contrast_kind: str | None = None  # "logit_diff": f = log p(y_t) - log p(c); "prob_diff": f = p(y_t) - p(c)
    contrast_logprob: float | None = None  # log p(c) at the input

    @property
    def explained(self) -> str:
        """The function f the attributions explain, in words."""
        return self.explained_with("y_t", "c", minus="-")

    def explained_with(self, chosen: str, other: str, *, minus: str = "−") -> str:
        """``explained`` with the pieces named: 'log p(gato) − log p(cão)' (``chosen`` for y_t, ``other`` for c)."""
        if self.contrast_id is None:
            return f"log p({chosen})"
        if self.contrast_kind == "logit_diff":
            return f"log p({chosen}) {minus} log p({other})"
        return f"p({chosen}) {minus} p({other})"

    @property
    def difference(self) -> float | None:
        """f(input) - f(baseline): what the integrated gradients share out over the tokens (None: not stored)."""
        if self.f_input is None or self.f_baseline is None:
            return None
        return self.f_input - self.f_baseline

    @property
    def relative_delta(self) -> float | None:
        """|delta| / |f(input) - f(baseline)| (inf when the difference is 0; None when it is not stored)."""
        diff = self.difference
        if diff is None:
            return None
        return abs(self.ig_delta) / abs(diff) if diff != 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        return {k: (v.round(6).tolist() if isinstance(v, np.ndarray) else v) for k, v in self.__dict__.items()}

    ARRAYS = ("source_grad_x_input", "target_grad_x_input", "source_ig", "target_ig")

    def to_arrays(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """For ``Trace.with_analysis``: this output position's four vectors, and the details (a contrastive one in
        a slot of its own, ``attribution_contrast``: a trace can hold both for a position)."""
        slot = _slot(self.contrast_id is not None)
        arrays = {analysis_site(slot, str(self.position), k): getattr(self, k) for k in self.ARRAYS}
        details = {k: v for k, v in self.__dict__.items() if k not in self.ARRAYS}
        return arrays, {f"{slot}.{self.position}": details}

    @classmethod
    def from_trace(cls, trace: Trace, position: int, *, contrast: bool = False) -> Attribution | None:
        """The attribution of output ``position`` stored in ``trace`` (the contrastive one with ``contrast``), or
        None."""
        slot = _slot(contrast)
        details = dict(trace.meta.get("analysis", {})).get(f"{slot}.{position}")
        if not details or analysis_site(slot, str(position), "source_ig") not in trace:
            return None
        vectors = {k: np.asarray(trace[analysis_site(slot, str(position), k)]) for k in cls.ARRAYS}
        return cls(**{**details, **vectors})


def _slot(contrast: bool) -> str:
    return "attribution_contrast" if contrast else "attribution"


def attribute(
    bundle: Bundle,
    src_ids: list[int],
    out_ids: list[int],
    position: int,
    *,
    steps: int = 32,
    baseline: str = "position",
    contrast: int | str | None = None,
    contrast_kind: ContrastKind = "logit_diff",
    options: InferenceOptions = InferenceOptions(),
) -> Attribution:
    """Gradient × input and integrated gradients of log p(out_ids[position]) over the source and target prefix,
    through ``bundle``'s model and fast weights (as its runs).

    With ``contrast`` (an id, or a text that encodes to one piece: ``contrast_id``) the function explained is
    log p(y_t) - log p(c) (``contrast_kind="logit_diff"``) or p(y_t) - p(c) (``"prob_diff"``) instead."""
    options.whole_vocabulary("attribution")
    if not 0 <= position < len(out_ids):
        raise InputError(f"position must be from 0 to {len(out_ids) - 1}, got {position}")
    if baseline not in ("position", "zero"):
        raise InputError(f"baseline must be 'position' or 'zero', got {baseline!r}")
    if contrast_kind not in CONTRAST_KINDS:
        raise InputError(f"contrast_kind must be one of {', '.join(CONTRAST_KINDS)}, got {contrast_kind!r}")
    model, fast, cfg, device = bundle.model, bundle.fast, bundle.config, bundle.device
    src = torch.tensor([src_ids], device=device)
    tgt = torch.tensor([[cfg.bos_id] + out_ids[:-1]], device=device)  # (1, Tt)
    if options.causal_mask:
        tgt = tgt[:, : position + 1]  # later decoder inputs cannot change this position
    keep = torch.ones_like(src, dtype=torch.bool)
    token_id = out_ids[position]
    other = None if contrast is None else contrast_id(bundle, contrast, token_id=token_id)
    explained = _explained(token_id, other, contrast_kind)

    def logp(recorder: Recorder, rows: int) -> Tensor:  # (rows, V)
        src_rows, tgt_rows, keep_rows = src.expand(rows, -1), tgt.expand(rows, -1), keep.expand(rows, -1)
        if options.causal_mask:  # the prefix ends at this position: its logits only
            logits = model(
                src_rows,
                tgt_rows,
                call=Call(options=options, recorder=recorder, fast=fast),
                src_keep=keep_rows,
                last_only=True,
            )[:, -1]
        else:
            logits = model(
                src_rows, tgt_rows, call=Call(options=options, recorder=recorder, fast=fast), src_keep=keep_rows
            )
            logits = logits[:, position]
        return torch.log_softmax(logits.float(), -1)

    # gradient x input: one pass with gradient leaves at both embeddings
    rec = Recorder(model, keep_grad=(embed_site("src"), embed_site("tgt")))
    with torch.enable_grad():
        logprobs = logp(rec, 1)  # (1, V)
        explained(logprobs).sum().backward()
    trace = rec.freeze()
    pe = torch.from_numpy(np.concatenate([trace[pe_site("src")], trace[pe_site("tgt")]])).to(device)  # (Ts + t + 1, D)
    src_leaf, tgt_leaf = rec.leaf(embed_site("src")), rec.leaf(embed_site("tgt"))
    x_src, x_tgt = src_leaf.detach()[0], tgt_leaf.detach()[0]  # (Ts, D), (t + 1, D)
    g_src, g_tgt = src_leaf.grad, tgt_leaf.grad
    assert g_src is not None and g_tgt is not None
    gxi_src, gxi_tgt = (g_src[0] * x_src).sum(-1), (g_tgt[0] * x_tgt).sum(-1)

    # integrated gradients over the joint input (source and prefix embeddings scaled together)
    Ts = x_src.shape[0]
    joint = torch.cat([x_src, x_tgt], dim=0)  # (Ts + t + 1, D)

    def f(path: Tensor) -> Tensor:  # (m, Ts + t + 1, D) -> (m,)
        m = path.shape[0]
        # each row's embeddings replaced by its point on the path; the gradient flows through the patch values
        recorder = Recorder(model, record=False, interventions=_row_patches(path, Ts))
        return explained(logp(recorder, m))

    start = pe if baseline == "position" else torch.zeros_like(joint)
    ig = integrated_gradients(f, joint, start, steps)
    return Attribution(
        position,
        token_id,
        float(logprobs.detach()[0, token_id]),
        gxi_src.detach().cpu().numpy(),
        gxi_tgt.detach().cpu().numpy(),
        ig.attributions[:Ts].sum(-1).cpu().numpy(),
        ig.attributions[Ts:].sum(-1).cpu().numpy(),
        ig.delta,
        steps,
        baseline,
        ig.f_input,
        ig.f_baseline,
        other,
        None if other is None else contrast_kind,
        None if other is None else float(logprobs.detach()[0, other]),
    )


def contrast_id(bundle: Bundle, alternative: int | str, *, token_id: int) -> int:
    """The id of the alternative piece c: ``alternative`` itself when an id, else the one piece its text encodes to
    (as a target text: "cão" is the word-start piece "▁cão"). InputError when there is no such piece, when it is
    several pieces or the unknown piece, or when it is ``token_id`` itself (nothing to contrast)."""
    tokenizer = bundle.tokenizer
    if isinstance(alternative, int):
        rows = bundle.config.tgt_vocab_size
        if not 0 <= alternative < rows:
            raise InputError(f"the alternative piece must be an id from 0 to {rows - 1}, got {alternative}")
        other = alternative
    else:
        if not alternative.strip():
            raise InputError("the alternative is empty: give a word or piece, or its id")
        ids = bundle.encode_target(alternative)[:-1]  # without the eos it appends
        if not ids:
            raise InputError(f"the alternative {alternative!r} encodes to no piece: give a word or piece, or its id")
        if len(ids) != 1:
            pieces = ", ".join(repr(p) for p in tokenizer.pieces(ids))
            raise InputError(
                f"the alternative {alternative!r} must be one piece of the target vocabulary; it is {len(ids)} "
                f"({pieces}): give a single word or piece, or its id"
            )
        other = ids[0]
    if tokenizer.is_unknown(other):
        raise InputError(f"the alternative {alternative!r} is the unknown piece {tokenizer.piece(other)!r}")
    if other == token_id:
        raise InputError(f"the alternative {tokenizer.piece(other)!r} is the output token itself: choose another piece")
    return other


def _explained(token_id: int, other: int | None, kind: str) -> Callable[[Tensor], Tensor]:
    """f from the output position's log-probabilities, (m, V) -> (m,)."""
    if other is None:
        return lambda logprobs: logprobs[:, token_id]
    if kind == "logit_diff":  # = logits[y] - logits[c]: the log-sum-exp cancels
        return lambda logprobs: logprobs[:, token_id] - logprobs[:, other]
    return lambda logprobs: logprobs[:, token_id].exp() - logprobs[:, other].exp()


def _row_patches(path: Tensor, n_src: int) -> list[Patch]:
    return [
        p
        for row in range(path.shape[0])
        for p in (
            _GradPatch(embed_site("src"), path[row, :n_src], rows=(row,)),
            _GradPatch(embed_site("tgt"), path[row, n_src:], rows=(row,)),
        )
    ]


class _GradPatch(Patch):
    """A Patch whose value keeps its autograd history (integrated gradients differentiate through it)."""

    def __post_init__(self) -> None:
        value = self.value
        super().__post_init__()
        object.__setattr__(self, "value", value)  # not detached


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation of two equal-length vectors (average ranks for ties); NaN if either is constant."""
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"spearman needs two vectors of one length, got {a.shape} and {b.shape}")

    def ranks(v: np.ndarray) -> np.ndarray:
        order = np.argsort(v, kind="stable")
        r = np.empty(len(v))
        r[order] = np.arange(len(v), dtype=float)
        for value in np.unique(v):  # ties share their mean rank
            tied = v == value
            r[tied] = r[tied].mean()
        return r

    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])
