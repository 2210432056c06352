"""Where each output word comes from: the source or the target prefix (ALTI+, Ferrando et al., 2022).

``contributions(bundle, text)`` scores the model's own greedy translation of ``text`` (or, with ``translation=``,
a given one, teacher-forced): one recorded teacher-forced pass of the same ``Call`` the run uses (its options:
positions off, masks off, heads switched off), every attention block decomposed into one vector per input token
(``core.analysis.alti``), contributions from L1 distances, composed through the layers as the authors' rollout.
Each output token's row says how much of the decoder's final representation at its position comes from each
source token and each decoder input (the start token, then the translation's pieces before it); the sources'
total is its **source share**. Low source share is what Dale et al. (2023) found to detect hallucinations.

The feed-forward layers and a pre-norm model's final norm act on each token alone: ALTI leaves them out.
An SSRU decoder (Bergamot's) has no self-attention; its recurrence is decomposed with its gates held fixed
(``alti.ssru_block``), so the prefix share there is what the SSRU carried forward plus the token itself.
With the causal mask off, each decoding step of a greedy translation saw only the words before it: each output
token is then decomposed in a pass over its own prefix (one pass per token), as its step computed it.

``value_norms`` is the simpler second view (Kobayashi et al., 2020): ||alpha^h_ij f_h(x_j)||, per head and layer.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..bundle import Bundle
from ..config import InferenceOptions
from ..errors import InputError
from ..recording.trace import Trace
from ..sites import AttentionKind, analysis_site
from .alti import alti, compose_decoder, compose_encoder
from .decomposition import (
    iter_batch_blocks,
    iter_blocks,
    recorded_pass,
    recorded_states,
    row_logprobs,
    scored_ids,
)


@dataclass(frozen=True)
class Contributions:
    """Each output token's contributions from the source tokens and the decoder inputs (ALTI+), with the layers'.

    S source pieces, T output pieces (= T decoder inputs), Le / Ld encoder / decoder layers."""

    source_pieces: tuple[str, ...]  # the source tokens as the model saw them (eos included)
    target_pieces: tuple[str, ...]  # the output tokens scored (eos included)
    prefix_pieces: tuple[str, ...]  # decoder inputs: the start token, then the output pieces before each
    matrix: np.ndarray  # (T, S + T): every source then every prefix token; rows sum to 1
    token_source_share: np.ndarray  # (T,)
    source_share: float  # mean of token_source_share
    token_logprob: np.ndarray  # (T,) log p of each scored token
    encoder_layers: np.ndarray  # (Le, S, S) each encoder layer's ALTI contributions
    encoder: np.ndarray  # (S, S) composed through the encoder
    self_layers: np.ndarray  # (Ld, T, T) each decoder layer's self-attention (or SSRU) contributions
    cross_layers: np.ndarray  # (Ld, T, S + 1) each cross-attention's: the sources, then the token's own residual
    layers: np.ndarray  # (Ld, T, S + T) composed up to each decoder layer (the last is ``matrix``)
    options: InferenceOptions
    forced: bool  # True: a given translation, teacher-forced; False: the model's own greedy translation
    decoder_self: str  # 'attention' or 'ssru'
    reconstruction_error: float  # the largest |sum of the vectors - the block's actual output| of any block
    notes: tuple[str, ...] = field(default=())

    @property
    def source_matrix(self) -> np.ndarray:
        """(T, S): the source columns of ``matrix``."""
        return self.matrix[:, : len(self.source_pieces)]

    @property
    def prefix_matrix(self) -> np.ndarray:
        """(T, T): the decoder-input columns of ``matrix``."""
        return self.matrix[:, len(self.source_pieces) :]

    @property
    def mean_logprob(self) -> float:
        return float(self.token_logprob.mean())

    def shares(self) -> SourceShares:
        """What a corpus scan reads of these contributions."""
        return SourceShares(
            self.source_pieces,
            self.target_pieces,
            self.token_source_share,
            self.source_share,
            self.token_logprob,
            self.forced,
            self.reconstruction_error,
        )

    ARRAYS = (
        "matrix",
        "token_source_share",
        "token_logprob",
        "encoder_layers",
        "encoder",
        "self_layers",
        "cross_layers",
        "layers",
    )
    DETAILS = ("source_pieces", "target_pieces", "prefix_pieces", "forced", "decoder_self", "notes")

    def to_arrays(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """For ``Trace.with_analysis``: the arrays as 'analysis.contributions.*', the rest as JSON-able details."""
        arrays = {analysis_site("contributions", k): getattr(self, k) for k in self.ARRAYS}
        details = {k: list(v) if isinstance(v, tuple) else v for k, v in ((k, getattr(self, k)) for k in self.DETAILS)}
        details.update(
            source_share=self.source_share,
            reconstruction_error=self.reconstruction_error,
            options=self.options.to_dict(),  # the analysis's own (the shortlist off), not necessarily the trace's
        )
        return arrays, {"contributions": details}

    @classmethod
    def from_trace(cls, trace: Trace) -> Contributions | None:
        """The contributions stored in ``trace`` (``to_arrays``); None when it holds none."""
        details = dict(trace.meta.get("analysis", {})).get("contributions")
        if not details or analysis_site("contributions", "matrix") not in trace:
            return None
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in dict(details).items()}
        fields.update({k: np.asarray(trace[analysis_site("contributions", k)], dtype=np.float64) for k in cls.ARRAYS})
        fields["options"] = InferenceOptions.from_dict(dict(details["options"]))
        return cls(**fields)

    def to_dict(self, decimals: int = 5) -> dict[str, Any]:
        """JSON-able: the pieces, ``matrix``, the shares, log-probabilities and what was scored how (not the layers)."""
        return {
            "source_pieces": list(self.source_pieces),
            "target_pieces": list(self.target_pieces),
            "prefix_pieces": list(self.prefix_pieces),
            "matrix": self.matrix.round(decimals).tolist(),
            "token_source_share": self.token_source_share.round(decimals).tolist(),
            "source_share": round(self.source_share, decimals),
            "token_logprob": self.token_logprob.round(decimals).tolist(),
            "forced": self.forced,
            "decoder_self": self.decoder_self,
            "options": self.options.to_dict(),
            "reconstruction_error": self.reconstruction_error,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class SourceShares:
    """What a corpus scan reads of a pair's contributions (``Contributions.shares``, ``batch_source_shares``): the
    pieces scored, each output token's source share and log p, whether the output was given, and the largest
    reconstruction error of any block decomposed."""

    source_pieces: tuple[str, ...]
    target_pieces: tuple[str, ...]
    token_source_share: np.ndarray  # (T,)
    source_share: float  # mean of token_source_share
    token_logprob: np.ndarray  # (T,)
    forced: bool
    reconstruction_error: float


@dataclass(frozen=True)
class _Pass:
    source_pieces: tuple[str, ...]  # the pass's source tokens (eos included)
    prefix_pieces: tuple[str, ...]  # its decoder inputs
    logprob: np.ndarray
    encoder_layers: list[Tensor]
    encoder: Tensor
    self_layers: list[Tensor]
    cross_layers: list[Tensor]
    layers: list[Tensor]
    error: float


@torch.no_grad()
def _analyse(bundle: Bundle, src_ids: list[int], out_ids: list[int], options: InferenceOptions) -> _Pass:
    return _decompose(bundle, *recorded_pass(bundle, src_ids, out_ids, options))


@torch.no_grad()
def _decompose(bundle: Bundle, trace: Trace, logprob: np.ndarray) -> _Pass:
    """ALTI+ of one recorded pass (one sentence's trace): every block decomposed, composed through the layers."""
    found: dict[AttentionKind, list[Tensor]] = {"encoder": [], "decoder": [], "cross": []}
    error = 0.0
    for (kind, _), b in iter_blocks(bundle.model, trace):  # one block's vectors at a time
        found[kind].append(alti(b.block))
        error = max(error, b.error)
    enc, self_c, cross_c = found["encoder"], found["decoder"], found["cross"]
    encoder = compose_encoder(enc)
    layers = compose_decoder(self_c, cross_c, encoder)
    pieces = tuple(trace.src_tokens), tuple(trace.tgt_tokens)
    return _Pass(*pieces, logprob, enc, encoder, self_c, cross_c, layers, error)


def _np(ts: list[Tensor]) -> np.ndarray:
    return torch.stack(ts).numpy()


def contributions(
    bundle: Bundle,
    text: str,
    *,
    translation: str | None = None,
    output_ids: Sequence[int] | None = None,
    options: InferenceOptions | None = None,
    truncate: bool = False,
) -> Contributions:
    """ALTI+ contributions of every output token of ``text``'s translation: the model's own greedy translation
    (``translation=None``), ``translation`` teacher-forced, or the ids ``output_ids`` teacher-forced (eos included:
    a run's own, as it fed them, whatever its text would tokenize to). ``truncate``: a source beyond the model's
    limit is cut as ``Bundle.translate`` cuts it (the app does); else InputError, as on unusable text or options."""
    options = bundle.check_options(options)
    if output_ids is not None:  # given ids: one teacher-forced pass, as a given translation's
        options.whole_vocabulary("contributions")
        src_ids, out_ids, per_step = bundle.encode_source(text, truncate=truncate)[0], list(output_ids), False
    else:
        src_ids, out_ids, per_step = scored_ids(bundle, text, translation, options, truncate)
    notes = _notes(bundle)
    if per_step:
        passes = [_analyse(bundle, src_ids, out_ids[: t + 1], options) for t in range(len(out_ids))]
        notes.append(
            "Causal mask off: each output token is decomposed in a pass over the words before it, as its "
            "decoding step saw them."
        )
        run = _rows(passes)
    else:
        run = _analyse(bundle, src_ids, out_ids, options)
    forced = translation is not None or output_ids is not None
    return _result(bundle, run, out_ids, options, forced=forced, notes=notes)


def _notes(bundle: Bundle) -> list[str]:
    if bundle.config.decoder_self != "ssru":
        return []
    return [
        "This decoder reads the target with an SSRU (a gated recurrence), not attention: its prefix "
        "contributions decompose the recurrence with its gates held fixed."
    ]


def _result(
    bundle: Bundle, run: _Pass, out_ids: list[int], options: InferenceOptions, *, forced: bool, notes: list[str]
) -> Contributions:
    S = len(run.source_pieces)
    matrix = run.layers[-1].numpy()
    token_source = matrix[:, :S].sum(-1)
    return Contributions(
        source_pieces=run.source_pieces,
        target_pieces=tuple(bundle.tokenizer.piece(i) for i in out_ids),
        prefix_pieces=run.prefix_pieces,
        matrix=matrix,
        token_source_share=token_source,
        source_share=float(token_source.mean()),
        token_logprob=run.logprob,
        encoder_layers=_np(run.encoder_layers),
        encoder=run.encoder.numpy(),
        self_layers=_np(run.self_layers),
        cross_layers=_np(run.cross_layers),
        layers=_np(run.layers),
        options=options,
        forced=forced,
        decoder_self=bundle.config.decoder_self,
        reconstruction_error=run.error,
        notes=tuple(notes),
    )


def batch_contributions(
    bundle: Bundle,
    rows: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    options: InferenceOptions | None = None,
    forced: Sequence[bool] | None = None,
) -> list[Contributions]:
    """``contributions`` of several (source ids, output ids) rows — ids as ``Bundle.encode_source`` /
    ``encode_target`` give them, or a greedy translation's ``output_ids`` — rows of like lengths together
    (``_chunks``): ONE recorded padded pass of each group (``recorded_states``), decomposed for all its rows at once
    (``_decompose_rows``), and one vocabulary projection of every group's real positions (``row_logprobs``). The
    same records as one ``contributions`` call per row, up to the arithmetic's rounding (tested within 1e-4).
    ``forced[i]``: row i's output was given (default True). Needs the padding and causal masks on (InputError
    otherwise: padding would leak into the real positions, and a greedy translation without the causal mask needs a
    pass per token)."""
    options, flags, runs, logprobs = _batched(bundle, rows, options, forced, _decompose_rows, encoder=True)
    return [
        _result(bundle, replace(run, logprob=logprob), list(out_ids), options, forced=flag, notes=_notes(bundle))
        for (_, out_ids), flag, run, logprob in zip(rows, flags, runs, logprobs, strict=True)
    ]


def batch_source_shares(
    bundle: Bundle,
    rows: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    options: InferenceOptions | None = None,
    forced: Sequence[bool] | None = None,
) -> list[SourceShares]:
    """``c.shares()`` of each of ``batch_contributions(...)`` (the same arguments), without decomposing the encoder:
    an output token's source share does not depend on the encoder's contributions. Each row of an ALTI matrix sums
    to 1, so every row of the encoder's composition does, and the decoder's composition (``compose_decoder``) reads
    it only as cross-attention's source columns times it: their row sums, and so the sources' total at every layer,
    are the same with the identity in its place. The encoder runs unrecorded and its blocks, most of the
    decomposition's work in a model of 6 encoder and 2 decoder layers, are not decomposed; nor is the first decoder
    layer's self-attention (``_decoder_shares``), so each reconstruction error covers the decoder's other blocks.
    Tested against ``contributions`` within 1e-6."""
    options, flags, runs, logprobs = _batched(bundle, rows, options, forced, _decoder_shares, encoder=False)
    piece = bundle.tokenizer.piece
    found = []
    for (src_ids, out_ids), flag, (share, error), logprob in zip(rows, flags, runs, logprobs, strict=True):
        pieces = tuple(piece(i) for i in src_ids), tuple(piece(i) for i in out_ids)
        found.append(SourceShares(*pieces, share, float(share.mean()), logprob, flag, error))
    return found


R = TypeVar("R")


def _batched(
    bundle: Bundle,
    rows: Sequence[tuple[Sequence[int], Sequence[int]]],
    options: InferenceOptions | None,
    forced: Sequence[bool] | None,
    decompose: Callable[[Bundle, Trace, list[tuple[int, int]]], list[R]],
    *,
    encoder: bool,
) -> tuple[InferenceOptions, list[bool], list[R], list[np.ndarray]]:
    """The checked options, each row's forced flag, what ``decompose`` makes of each row of its group's recorded
    pass (``_decompose_rows``, ``_decoder_shares``; ``encoder``: whether the encoder is recorded) and each row's
    log p of its output ids, in the rows' order."""
    options = bundle.check_options(options)
    options.whole_vocabulary("contributions")
    if not (options.padding_mask and options.causal_mask):
        raise InputError("batch_contributions needs the padding and causal masks on; score each pair alone instead")
    flags = [True] * len(rows) if forced is None else list(forced)
    if len(flags) != len(rows):
        raise ValueError(f"{len(rows)} rows but {len(flags)} forced flags")
    lengths = [(len(src_ids), len(out_ids)) for src_ids, out_ids in rows]
    found: dict[int, R] = {}
    states = []  # each group's final decoder states at its real positions: one vocabulary projection for all
    for chunk in _chunks(lengths, bundle.config.d_model):
        trace, real = recorded_states(bundle, [rows[i] for i in chunk], options, encoder=encoder)
        found.update(zip(chunk, decompose(bundle, trace, [lengths[i] for i in chunk]), strict=True))
        states.append(real)
    order = list(found)  # the groups' rows, as their states follow each other
    scored = row_logprobs(bundle, [rows[i][1] for i in order], torch.cat(states), options)
    logprobs = dict(zip(order, scored, strict=True))
    return options, flags, [found[i] for i in range(len(rows))], [logprobs[i] for i in range(len(rows))]


# The most numbers one block's vectors (B, Tq, K, D) may hold when several rows are recorded and decomposed at once
# (64 MiB in BATCH_DTYPE; a row over it is done alone), and how much of them padding may be (rows of like lengths go
# together): CHUNK_PADDING times the rows' own, plus CHUNK_SLACK query-key pairs (times D), what a group's fixed cost
# is worth (its own recorded pass and some 500 small ops of decomposition; about one row of 22 pieces' vectors).
# Measured on 32 built-in sentences (distilled-en-pt, 1 thread, interleaved rounds): with the slack, batch size 8
# 0.51x -> 0.45x a traced translation (4 batches in 5 groups, not 8), batch size 32 0.35x -> 0.36x (3 groups, not 4).
CHUNK_NUMBERS = 1 << 24
CHUNK_PADDING = 1.5
CHUNK_SLACK = 512
# The precision a batch's blocks are decomposed in: float32 streams half the memory of float64 through the
# (B, Tq, K, D) vectors (one row alone: float64, the reference; the composition through the layers is float64 in
# both). ``alti`` sums the L1 difference without cancellation, so float32 adds no error of its own that shows: a
# row's shares move by about 1e-7 between batches of other rows in either precision (the forward pass's float32
# rounding), and the same batches give the same bytes: a resumed scan re-scores its first batch whole
# (``scan.from_batch``; tests/core/analysis/test_scan_batch.py).
BATCH_DTYPE = torch.float32


def _chunks(lengths: list[tuple[int, int]], d_model: int) -> Iterator[list[int]]:
    """The rows (indices into ``lengths``, (source, output) lengths) in groups of like lengths, shortest first,
    whose padded blocks stay within ``CHUNK_NUMBERS`` and ``CHUNK_PADDING`` times their rows' own plus
    ``CHUNK_SLACK``."""

    def size(n: tuple[int, int]) -> int:
        return max(n) * (max(n) + 1) * d_model

    chunk: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: max(lengths[i])):
        wider = chunk + [i]
        padded = len(wider) * size(lengths[i])  # the longest so far is the last
        own = sum(size(lengths[j]) for j in wider)
        if chunk and (padded > CHUNK_NUMBERS or padded > CHUNK_PADDING * own + CHUNK_SLACK * d_model):
            yield chunk
            wider = [i]
        chunk = wider
    if chunk:
        yield chunk


@torch.no_grad()
def _alti_blocks(
    bundle: Bundle, trace: Trace, lengths: list[tuple[int, int]], encoder: bool, skip_self: Container[int] = ()
) -> tuple[dict[AttentionKind, list[Tensor]], Tensor]:
    """Every block of a padded pass ((source, output) ``lengths``, the trace padded to the longest) decomposed for
    all its rows at once (``iter_batch_blocks``; ``encoder=False``: the decoder's only; ``skip_self``: decoder layers
    whose self-attention is left out): each kind's (B, Tq, K) contributions per layer, padded keys given none, in
    float64 (composed as one row alone is), and each row's largest reconstruction error over its real queries (B,)."""
    Ts, Tt = max(s for s, _ in lengths), max(t for _, t in lengths)
    n_src = torch.tensor([s for s, _ in lengths])[:, None, None]  # (B, 1, 1)
    n_tgt = torch.tensor([t for _, t in lengths])[:, None, None]
    keep: dict[AttentionKind, Tensor] = {  # (B, 1, K) the keys that are not padding
        "encoder": torch.arange(Ts) < n_src,
        "decoder": torch.arange(Tt) < n_tgt,
        "cross": torch.cat([torch.arange(Ts) < n_src, torch.ones(len(lengths), 1, 1, dtype=torch.bool)], -1),
    }
    found: dict[AttentionKind, list[Tensor]] = {"encoder": [], "decoder": [], "cross": []}
    errors = torch.zeros(len(lengths), dtype=torch.float64)
    blocks = iter_batch_blocks(bundle.model, trace, slice(None), BATCH_DTYPE, encoder=encoder, skip_self=skip_self)
    for (kind, _), b in blocks:
        found[kind].append(alti(b.block, keep[kind], inplace=True).double())  # its vectors: not read again
        query = (n_src if kind == "encoder" else n_tgt)[:, 0]  # (B, 1) each row's real queries
        wrong = (b.block.output - b.actual).abs().amax(-1).double()  # (B, Tq)
        errors = torch.maximum(errors, wrong.masked_fill(torch.arange(wrong.shape[1]) >= query, 0).amax(-1))
    return found, errors


def _decompose_rows(bundle: Bundle, trace: Trace, lengths: list[tuple[int, int]]) -> list[_Pass]:
    """``_decompose`` of every row of a padded pass (``_alti_blocks``), each row's real positions taken and composed
    alone (the log-probabilities are left empty)."""
    found, errors = _alti_blocks(bundle, trace, lengths, encoder=True)
    Ts = max(s for s, _ in lengths)
    runs = []
    for r, (ns, nt) in enumerate(lengths):
        enc = [c[r, :ns, :ns] for c in found["encoder"]]
        self_c = [c[r, :nt, :nt] for c in found["decoder"]]
        cross_c = [torch.cat([c[r, :nt, :ns], c[r, :nt, Ts:]], -1) for c in found["cross"]]
        encoder = compose_encoder(enc)
        layers = compose_decoder(self_c, cross_c, encoder)
        row = trace.select(r)  # its pieces, cut to its own lengths
        pieces = tuple(row.src_tokens[:ns]), tuple(row.tgt_tokens[:nt])
        runs.append(_Pass(*pieces, np.empty(0), enc, encoder, self_c, cross_c, layers, float(errors[r])))
    return runs


def _decoder_shares(bundle: Bundle, trace: Trace, lengths: list[tuple[int, int]]) -> list[tuple[np.ndarray, float]]:
    """Each row's source share of every output token (T_i,) and largest reconstruction error, from the decoder's
    blocks alone (``_alti_blocks``) composed for all the rows at once with the identity for the encoder
    (``batch_source_shares``): a padded source column holds 0, and padded query rows are set to 0 (no real row
    reads them). The first layer's self-attention is not decomposed: it sets only the prefix columns of the first
    layer's rows, and later layers' source columns read earlier rows' source columns, and their prefix columns only
    through the rows' sums, which stay 1; the identity stands in for it. The composed prefix columns are therefore
    not ALTI+'s (only the sources' total is returned), and the error covers the blocks decomposed."""
    found, errors = _alti_blocks(bundle, trace, lengths, encoder=False, skip_self=(0,))
    Tt = max(t for _, t in lengths)
    padded = (torch.arange(Tt) >= torch.tensor([t for _, t in lengths])[:, None])[..., None]  # (B, Tt, 1)
    first = torch.eye(Tt, dtype=torch.float64).expand(len(lengths), Tt, Tt)  # (B, Tt, Tt)
    self_c, cross_c = ([c.masked_fill(padded, 0) for c in found[kind]] for kind in ("decoder", "cross"))
    last = compose_decoder([first, *self_c], cross_c, None)[-1]  # (B, Tt, Ts + Tt)
    share = last[..., : cross_c[0].shape[-1] - 1].sum(-1).numpy()  # (B, Tt) the sources' columns
    return [(share[r, :nt], float(errors[r])) for r, (_, nt) in enumerate(lengths)]


def _rows(passes: list[_Pass]) -> _Pass:
    """One _Pass from per-step passes (pass t over decoder inputs 0..t): row t of each, right-padded with 0."""
    last = passes[-1]
    T, S = len(passes), last.encoder.shape[0]

    def stitch(mats: list[list[Tensor]], width: int) -> list[Tensor]:
        return [
            torch.stack([F.pad(m[layer][t], (0, width - m[layer].shape[1])) for t, m in enumerate(mats)])
            for layer in range(len(mats[0]))
        ]

    return _Pass(
        source_pieces=last.source_pieces,
        prefix_pieces=last.prefix_pieces,
        logprob=np.array([p.logprob[t] for t, p in enumerate(passes)]),
        encoder_layers=last.encoder_layers,
        encoder=last.encoder,
        self_layers=stitch([p.self_layers for p in passes], T),
        cross_layers=stitch([p.cross_layers for p in passes], S + 1),
        layers=stitch([p.layers for p in passes], S + T),
        error=max(p.error for p in passes),
    )
