"""The per-call object that records a call and changes it at named sites (``core.sites``).

A ``Recorder`` is made from the model (or its ``ModelConfig``) for ONE call (it knows the kinds, layers and
heads), passed down through it, and frozen once at the end into a ``Trace``: tensors are detached and moved to
the CPU once, as numpy arrays. Incremental decoding records one query row per step; ``freeze`` stitches the rows
together (keys padded with 0 weight / -inf score / False mask), which yields the same arrays a
teacher-forced pass over the same output records — except the decoder's ``scores_raw`` for keys a step had
not seen yet: a cached step never computes them, so they stay -inf.

It also carries the call's interventions (``core.recording.interventions``) and the heads that ``InferenceOptions``
switches off, and can keep gradients at a site (``keep_grad=("embed.src",)``) for attribution.
Nothing is stored on the model, so calls on one shared model stay independent under threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from ..config import InferenceOptions, ModelConfig
from ..sites import (
    OUTPUT_ARRAYS,
    WEIGHTS,
    AttentionKind,
    DrawArray,
    Side,
    SiteSpec,
    array_of,
    attention_site,
    draw_site,
    gate_site,
    heads_of,
    ids_site,
    keep_site,
    mask_site,
    output_site,
    parse_attention_array,
    parse_attention_site,
    pe_site,
    position_bias_site,
    site_stack,
    spec_of,
)
from ..transformer.masks import causal_mask
from .interventions import Intervention, Patch, ScaleHeads, ScaleValues, value_scale
from .trace import ModelShape, Trace


class HasConfig(Protocol):
    """What a Recorder reads of a model: its config (the kinds, layers and heads). A ``Transformer`` is one."""

    @property
    def config(self) -> ModelConfig: ...


def _cpu(t: Tensor, dtype: Any = np.float32) -> np.ndarray:
    return t.to("cpu").numpy().astype(dtype, copy=False)


def _stitch(chunks: list[Tensor], fill: float | bool, dtype: Any = np.float32) -> np.ndarray:
    """Concatenate (B, [H,] Tq_i, Tk_i) chunks along the query axis, right-padding keys with ``fill``.

    Chunks of one width are concatenated in one op; ragged CPU chunks (one query row per decoding step,
    one more key each time) are copied into a filled numpy array (a microsecond per chunk instead of a
    torch op's ten); ragged device chunks are stitched on the device and moved once.
    """
    n_key = max(c.shape[-1] for c in chunks)
    if all(c.shape[-1] == n_key for c in chunks):
        return _cpu(chunks[0] if len(chunks) == 1 else torch.cat(chunks, dim=-2), dtype)
    lead, n_query = chunks[0].shape[:-2], sum(c.shape[-2] for c in chunks)
    if chunks[0].device.type != "cpu":
        padded = [torch.nn.functional.pad(c, (0, n_key - c.shape[-1]), value=fill) for c in chunks]
        return _cpu(torch.cat(padded, dim=-2), dtype)
    out = np.full((*lead, n_query, n_key), fill, dtype=dtype)
    row = 0
    for c in chunks:
        out[..., row : row + c.shape[-2], : c.shape[-1]] = c.numpy()
        row += c.shape[-2]
    return out


def _detached(t: Tensor) -> Tensor:
    return t.detach() if t.requires_grad else t  # no op to dispatch in the usual no-grad case


def _join(spec: SiteSpec, chunks: list[Tensor]) -> np.ndarray:
    """One site's recorded chunks as one CPU array, joined as its registry entry says (``core.sites.Join``)."""
    dtype = np.dtype(spec.dtype)
    if spec.join == "rows":
        return _stitch(chunks, spec.fill, dtype)
    if spec.join == "positions":
        return _cpu(torch.cat(chunks, dim=0), dtype)
    if spec.join == "tokens":
        return _cpu(torch.cat(chunks, dim=-1), dtype)
    if spec.join == "steps":
        return _cpu(torch.stack(chunks, dim=1), dtype)
    if spec.join == "latest":
        return _cpu(chunks[-1], dtype)
    raise ValueError(f"sites {spec.pattern!r} are not recorded in chunks (they join {spec.join!r})")


class Recorder:
    """Records one call of ``model`` and applies its interventions.

    record: keep attention weights, scores (masked and raw), masks, positional encodings, SSRU gates, ids.
    qkv: also per-head queries, keys and values.  activations: also the residual stream ('embed.src',
    'encoder.2.out', ...) and each attention block's head outputs ('decoder.1.cross.heads').
    interventions: ``ScaleHeads`` / ``ScaleValues`` / ``Patch`` applied at their sites.  keep_grad: sites whose value
    becomes a leaf that keeps its gradient (``leaf(site).grad`` after ``backward``), e.g. 'embed.src' for
    attribution; for an attention block's head outputs ('decoder.1.cross.heads') the leaf is a gate of ones (B, H)
    multiplying each head's output, so ``leaf(site).grad[b, h]`` is d(loss)/d(head h's scale) with nothing cut off
    upstream.
    """

    def __init__(
        self,
        model: HasConfig | ModelConfig,
        *,
        record: bool = True,
        qkv: bool = False,
        activations: bool = False,
        interventions: Iterable[Intervention] = (),
        keep_grad: Iterable[str] = (),
    ) -> None:
        config = model if isinstance(model, ModelConfig) else model.config
        self.shape = ModelShape.of(config)
        self._start_id = config.bos_id if config.start == "bos" else None  # the decoder's first input id, if a token
        self.record, self.record_qkv, self.record_activations = record, qkv, activations
        self.interventions = tuple(interventions)
        self.keep_grad = frozenset(keep_grad)
        self._validate()
        self.options: InferenceOptions | None = None
        self._chunks: dict[str, list[Tensor]] = {}  # site array -> chunks along the query / position axis
        self._latest: dict[str, Tensor] = {}  # keys and values: the latest cover every earlier step
        self._step_rows: dict[str, list[Tensor]] = {}
        self._recomputing = False
        self._outputs: dict[str, list[Tensor]] = {}
        self._keeps: dict[Side, list[Tensor | None]] = {}  # side -> keep flags per ids chunk (None: all real)
        self._leaves: dict[str, Tensor] = {}
        self._scales: dict[tuple[str, int, torch.device], Tensor | None] = {}
        self._patches: dict[str, list[Patch]] = {}
        self._values: dict[str, list[ScaleValues]] = {}  # attention site -> its ScaleValues
        for item in self.interventions:
            if isinstance(item, Patch):
                self._patches.setdefault(item.site, []).append(item)
            elif isinstance(item, ScaleValues):
                self._values.setdefault(item.site, []).append(item)
        # attention sites whose head outputs are touched (``begin`` adds the options' switched-off heads), and the
        # residual-stream sites that are patched or differentiated: the model asks only there
        heads = {site: heads_of(site) for site in [*self._patches, *self.keep_grad]}
        self._head_sites = frozenset(
            {i.site for i in self.interventions if isinstance(i, ScaleHeads)}
            | {attention for attention in heads.values() if attention is not None}
        )
        self._grad_streams = frozenset(site for site in self.keep_grad if heads[site] is None)
        self._stream_sites = frozenset({site for site in self._patches if heads[site] is None}) | self._grad_streams

    # ------------------------------------------------------------ set-up
    def _validate(self) -> None:
        for item in self.interventions:
            if not isinstance(item, (ScaleHeads, ScaleValues, Patch)):
                raise TypeError(f"interventions must be ScaleHeads, ScaleValues or Patch, got {type(item).__name__}")
            attention = heads_of(item.site)
            site = item.site if attention is None else attention
            if isinstance(item, (ScaleHeads, ScaleValues)) or attention is not None:
                self.shape.check_attention_site(site)
                heads = item.heads or ()
                if any(h >= self.shape.n_heads for h in heads):
                    raise ValueError(f"{site}: heads {heads} out of range (the model has {self.shape.n_heads})")
            elif site not in self.shape.stream_sites():
                raise ValueError(f"no site {site!r}; residual-stream sites: {', '.join(self.shape.stream_sites())}")
        for site in self.keep_grad:
            attention = heads_of(site)
            if attention is not None:
                self.shape.check_attention_site(attention)
            elif site not in self.shape.stream_sites():
                raise ValueError(f"keep_grad: no site {site!r}; sites: {', '.join(self.shape.stream_sites())}")

    def begin(self, options: InferenceOptions) -> None:
        """Called by the model at the start of encode/decode: the options this call runs with."""
        if options is self.options:  # every decoding step of a call: nothing new
            return
        if self.options is not None and self.options != options:
            raise ValueError("one Recorder records one call: its encode and decode got different InferenceOptions")
        if self.options is None:
            self.shape.check_ablation(options.ablate)
            self._head_sites |= {attention_site(kind, layer) for kind, layer, _ in options.ablate}
        self.options = options

    def wants_heads(self, site: str) -> bool:
        """Whether this call records or changes the head outputs of attention ``site`` (cheap: asked per block)."""
        return self.record_activations or site in self._head_sites

    def values(self, site: str, v: Tensor) -> Tensor:
        """The values (B, H, Tk, dv) attention ``site`` weighs, after the call's ``ScaleValues`` there (v itself when
        it has none: one dict look-up per block)."""
        items = self._values.get(site)
        if not items:
            return v
        return v * value_scale(items, (v.shape[0], v.shape[1], v.shape[2]), v.device).to(v.dtype)[..., None]

    def wants(self, site: str) -> bool:
        """Whether this call records, patches or differentiates the residual-stream ``site``."""
        return self.record_activations or site in self._stream_sites

    # ------------------------------------------------------------ interventions
    def _head_scale(self, site: str, rows: int, device: torch.device) -> Tensor | None:
        """(rows, H) multipliers on each head's output at attention ``site``; None = all 1."""
        key = (site, rows, device)
        if key not in self._scales:
            kind, layer = parse_attention_site(site)
            items = [i for i in self.interventions if isinstance(i, ScaleHeads) and i.site == site]
            ablated = self.options.ablated_heads(kind, layer) if self.options is not None else ()
            scale = None
            if items or ablated:
                scale = torch.ones(rows, self.shape.n_heads, device=device)
                if ablated:
                    scale[:, list(ablated)] = 0.0
                for item in items:
                    row_ids = list(range(rows)) if item.rows is None else [r for r in item.rows if r < rows]
                    for r in row_ids:
                        scale[r, list(item.heads)] *= item.factor
            self._scales[key] = scale
        return self._scales[key]

    def heads(self, site: str, ctx: Tensor, offset: int = 0) -> Tensor:
        """Each head's output at attention ``site``: ctx (B, H, Tq, dh) -> after scaling / patching / recording."""
        scale = self._head_scale(site, ctx.shape[0], ctx.device)
        if array_of(site, "heads") in self.keep_grad:  # the gate is one more per-head scale, kept for its gradient
            gate = self._gate(site, ctx)
            scale = gate if scale is None else scale * gate
        if scale is not None:
            ctx = ctx * scale[:, :, None, None]
        return self.activation(array_of(site, "heads"), ctx, offset)

    def _gate(self, site: str, ctx: Tensor) -> Tensor:
        """The (B, H) gate of ones kept for its gradient at attention ``site`` (one per call: decoding steps share
        it, so its gradient sums over them)."""
        name = array_of(site, "heads")
        if not torch.is_grad_enabled():
            raise RuntimeError(f"keep_grad={name!r} needs gradients: call the model with torch.enable_grad()")
        gate = self._leaves.get(name)
        if gate is None:
            gate = torch.ones(ctx.shape[:2], device=ctx.device, dtype=ctx.dtype, requires_grad=True)
            self._leaves[name] = gate
        elif gate.shape != ctx.shape[:2]:
            raise ValueError(f"keep_grad={name!r}: the batch changed within one call ({tuple(gate.shape)})")
        return gate

    def activation(self, site: str, x: Tensor, offset: int = 0) -> Tensor:
        """A residual-stream or head-output value: patched, made a gradient leaf, recorded, as asked (head outputs
        keep their gradient through their gate, in ``heads``)."""
        patches = self._patches.get(site)
        if patches:
            x = x.clone()  # one copy for all of this site's patches (a batch may patch a different place per row)
            for patch in patches:
                patch.write(x, offset)
        if site in self._grad_streams:
            if not torch.is_grad_enabled():
                raise RuntimeError(f"keep_grad={site!r} needs gradients: call the model with torch.enable_grad()")
            x = x.detach().requires_grad_(True)
            self._leaves[site] = x
        if self.record_activations:
            self._chunks.setdefault(site, []).append(_detached(x))
        return x

    def leaf(self, site: str) -> Tensor:
        """The gradient leaf made at ``site`` (see ``keep_grad``; for '.heads' sites the (B, H) gate): its ``.grad``
        after ``backward``."""
        if site not in self._leaves:
            raise KeyError(f"no gradient leaf at {site!r} (keep_grad={sorted(self.keep_grad)})")
        return self._leaves[site]

    # ------------------------------------------------------------ recording
    def _add(self, name: str, t: Tensor) -> None:
        self._chunks.setdefault(name, []).append(_detached(t))

    def attention(self, site: str, weights: Tensor, scores: Tensor, scores_raw: Tensor) -> None:
        """The softmax weights, the masked scores and the scores before the mask: each (B, H, Tq, Tk)."""
        if not self.record:
            return
        self._add(array_of(site, "weights"), weights)
        self._add(array_of(site, "scores"), scores)
        self._add(array_of(site, "scores_raw"), scores_raw)

    def qkv(self, site: str, q: Tensor, k: Tensor, v: Tensor) -> None:
        """The queries (B, H, Tq, dh), keys and values (B, H, Tk, dh), when the call records them (``record_qkv``)."""
        if self.record and self.record_qkv:
            self._add(array_of(site, "q"), q)
            self._latest[array_of(site, "k")], self._latest[array_of(site, "v")] = _detached(k), _detached(v)

    def mask(self, kind: AttentionKind, mask: Tensor) -> None:
        """The mask applied for ``kind``: (B, Tq, Tk) bool, True = may attend."""
        if self.record:
            self._add(mask_site(kind), mask)

    def positional(self, side: Side, values: Tensor) -> None:
        """Positional-encoding rows added on ``side``: (T, D)."""
        if self.record:
            self._add(pe_site(side), values)

    def position_bias(self, side: Side, bias: Tensor) -> None:
        """The relative position bias (H, Tq, Tk) the self-attention of the stack reading ``side`` adds (T5)."""
        if self.record:
            self._add(position_bias_site(side), bias)

    def ids(self, side: Side, ids: Tensor, keep: Tensor | None) -> None:
        """Token ids (B, T) fed on ``side`` and their keep flags (True = real token; None = all real)."""
        if self.record:
            self._add(ids_site(side), ids)
            self._keeps.setdefault(side, []).append(None if keep is None else keep[:, -ids.shape[1] :])

    def gate(self, layer: int, gates: Tensor) -> None:
        """SSRU forget gates of decoder ``layer``: (B, T, D)."""
        if self.record:
            self._add(gate_site(layer), gates)

    def output(self, ids: Tensor, probs: Tensor, top_ids: Tensor, top_probs: Tensor) -> None:
        """What one decoding step chose: ids (B,), probs (B,), top_ids / top_probs (B, k)."""
        if self.record:
            for what, t in zip(OUTPUT_ARRAYS, (ids, probs, top_ids, top_probs), strict=True):
                self._outputs.setdefault(output_site(what), []).append(t)

    def draw(self, arrays: Mapping[DrawArray, Tensor]) -> None:
        """What one sampled step drew from (``core.decoding.sampling.Drawn.arrays``), at the ``output.draw.*``
        sites: (B,) or (B, k) each."""
        if self.record:
            for what, t in arrays.items():
                self._outputs.setdefault(draw_site(what), []).append(t)

    def restart_decoder(self) -> None:
        """Called before each decoding step that recomputes the whole prefix (no KV cache): the last full pass's
        final query rows are kept as that step's ``step_rows``, and the decoder's record starts again."""
        self._recomputing = True
        self._keep_step_rows()
        for record in (self._chunks, self._latest):  # the target side: its attention, masks, positions, ids, ...
            for name in [n for n in record if site_stack(n) == "decoder"]:
                del record[name]
        self._keeps.pop("tgt", None)

    def _keep_step_rows(self) -> None:
        for name, chunks in self._chunks.items():
            if spec_of(name) is WEIGHTS and site_stack(name) == "decoder":
                step_rows = array_of(parse_attention_array(name)[0], "step_rows")
                self._step_rows.setdefault(step_rows, []).append(chunks[-1][:, :, -1:])

    # ------------------------------------------------------------ freeze
    def freeze(self, pieces: Callable[[int], str] | None = None, *, meta: dict[str, Any] | None = None) -> Trace:
        """Stitch, move to the CPU once, and return the immutable Trace.

        pieces: id -> token string (a tokenizer's); None = the ids as text. meta: JSON-able extras kept with the
        trace (e.g. the source text and the translation); ``start_piece`` is added: the piece of the id the decoder
        starts from (T5's and Marian's ``<pad>``, BART's ``</s>``), where the model starts from a token."""
        if not self.record:
            raise RuntimeError("this Recorder was made with record=False: nothing to freeze")
        if self.options is None:
            raise RuntimeError("nothing was recorded: pass this Recorder to a model call first")
        if self._recomputing:
            self._keep_step_rows()
            self._recomputing = False
        arrays: dict[str, np.ndarray] = {}
        for name, chunks in [*self._chunks.items(), *((n, [t]) for n, t in self._latest.items())]:
            spec = spec_of(name)
            shared = None if spec.shares is None else array_of(parse_attention_array(name)[0], spec.shares)
            if shared is not None and all(a is b for a, b in zip(chunks, self._chunks[shared], strict=True)):
                arrays[name] = arrays[shared]  # nothing was masked: the scores themselves, one array
            else:
                arrays[name] = _join(spec, chunks)
        for side, keeps in self._keeps.items():
            if all(keep is None for keep in keeps):  # no padding given: every position is real
                arrays[keep_site(side)] = np.ones(arrays[ids_site(side)].shape, dtype=np.bool_)
                continue
            parts = [
                np.ones(tuple(ids.shape), dtype=np.bool_) if keep is None else _cpu(keep, np.bool_)
                for ids, keep in zip(self._chunks[ids_site(side)], keeps, strict=True)
            ]
            arrays[keep_site(side)] = np.concatenate(parts, axis=-1)
        for name, chunks in [*self._step_rows.items(), *self._outputs.items()]:
            arrays[name] = _join(spec_of(name), chunks)
        self._add_mask_parts(arrays)
        for a in arrays.values():
            a.flags.writeable = False  # traces are shared (e.g. cached by the app): read-only
        id_sites = (ids_site("src"), ids_site("tgt"), output_site("ids"), output_site("top_ids"))
        ids = [arrays[n] for n in id_sites if n in arrays]
        vocab = (
            {
                int(i): (pieces(int(i)) if pieces is not None else str(int(i)))
                for i in np.unique(np.concatenate([a.ravel() for a in ids]))
            }
            if ids
            else {}
        )
        meta = dict(meta or {})
        if self._start_id is not None and ids_site("tgt") in arrays:
            meta.setdefault("start_piece", vocab.get(self._start_id, str(self._start_id)))
        return Trace(arrays=arrays, vocab=vocab, options=self.options, shape=self.shape, meta=meta)

    def _add_mask_parts(self, arrays: dict[str, np.ndarray]) -> None:
        """The parts of each applied mask, from the keep flags and the options (what the Masks page shows)."""
        assert self.options is not None
        padding = self.options.padding_mask
        src = arrays.get(keep_site("src"))
        tgt = arrays.get(keep_site("tgt"))
        if src is not None:
            B, Ts = src.shape
            part = src[:, None, :] if padding else np.ones_like(src[:, None, :])
            arrays[mask_site("encoder", "padding")] = np.broadcast_to(part, (B, Ts, Ts)).copy()
            if tgt is not None:
                arrays[mask_site("cross", "padding")] = np.broadcast_to(part, (B, tgt.shape[1], Ts)).copy()
        if tgt is not None and mask_site("decoder") in arrays:
            B, Tt = tgt.shape
            Tk = arrays[mask_site("decoder")].shape[-1]
            causal = causal_mask(Tt, Tk).numpy() if self.options.causal_mask else np.ones((Tt, Tk), dtype=np.bool_)
            arrays[mask_site("decoder", "causal")] = np.broadcast_to(causal, (B, Tt, Tk)).copy()
            part = tgt[:, None, :Tk] if padding else np.ones((B, 1, Tk), dtype=np.bool_)
            arrays[mask_site("decoder", "padding")] = np.broadcast_to(part, (B, Tt, Tk)).copy()
