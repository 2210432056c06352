"""The per-call recorder and the frozen Trace it produces.

A ``Recorder`` is created for one call, passed down through the model, and turned into a
``Trace`` once at the end: tensors are detached and moved to the CPU once, as numpy arrays.
Incremental decoding records one query row per step; ``freeze`` stitches the rows together
(keys padded with 0 weight / -inf score / False mask), which yields the same arrays a
teacher-forced pass over the same output records.
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .config import ATTENTION_KINDS, InferenceOptions

SIDES = ("src", "tgt")


def _cpu(t: Tensor, dtype: Any = np.float32) -> np.ndarray:
    return t.to("cpu").numpy().astype(dtype, copy=False)


def _stitch(chunks: list[Tensor], fill: float | bool, dtype: Any = np.float32) -> np.ndarray:
    """Concatenate (B, [H,] Tq_i, Tk_i) chunks along the query axis, right-padding keys with ``fill``.

    Returns a CPU array. Chunks of one width are concatenated in one op; ragged CPU chunks (one
    query row per decoding step, one more key each time) are copied into a filled numpy array,
    which costs a microsecond per chunk instead of a torch op's ten; ragged device chunks are
    stitched on the device and moved once.
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
        out[..., row: row + c.shape[-2], : c.shape[-1]] = c.numpy()
        row += c.shape[-2]
    return out


def _detached(t: Tensor) -> Tensor:
    return t.detach() if t.requires_grad else t  # no op to dispatch in the usual no-grad case


class Recorder:
    """Collects attention weights, scores, masks, positional encodings and SSRU gates of one call."""

    def __init__(self, *, qkv: bool = False) -> None:
        self.record_qkv = qkv
        self._weights: dict[tuple[str, int], list[Tensor]] = {}
        self._scores: dict[tuple[str, int], list[Tensor]] = {}
        self._q: dict[tuple[str, int], list[Tensor]] = {}
        self._kv: dict[tuple[str, int], tuple[Tensor, Tensor]] = {}
        self._masks: dict[str, list[Tensor]] = {}
        self._pe: dict[str, list[Tensor]] = {}
        self._gates: dict[int, list[Tensor]] = {}

    def attention(self, kind: str, layer: int, weights: Tensor, scores: Tensor,
                  q: Tensor | None = None, k: Tensor | None = None, v: Tensor | None = None) -> None:
        """weights, scores: (B, H, Tq, Tk); q (B, H, Tq, dh); k, v (B, H, Tk, dh)."""
        key = (kind, layer)
        self._weights.setdefault(key, []).append(_detached(weights))
        self._scores.setdefault(key, []).append(_detached(scores))
        if self.record_qkv and q is not None and k is not None and v is not None:
            self._q.setdefault(key, []).append(_detached(q))
            self._kv[key] = (_detached(k), _detached(v))  # the latest keys cover every earlier step

    def mask(self, kind: str, mask: Tensor) -> None:
        """The mask applied for ``kind``: (B, Tq, Tk) bool, True = may attend."""
        self._masks.setdefault(kind, []).append(mask)

    def positional(self, side: str, values: Tensor) -> None:
        """Positional-encoding rows added on ``side``: (T, D)."""
        self._pe.setdefault(side, []).append(_detached(values))

    def gate(self, layer: int, gates: Tensor) -> None:
        """SSRU forget gates of decoder ``layer``: (B, T, D)."""
        self._gates.setdefault(layer, []).append(_detached(gates))

    def last_query_rows(self) -> dict[tuple[str, int], Tensor]:
        """The decoder's and cross-attention's weights for the last query position recorded: (kind, layer) ->
        (B, H, Tk). Decoding without the KV cache keeps these per step, since each step recomputes the prefix."""
        return {key: chunks[-1][:, :, -1] for key, chunks in self._weights.items() if key[0] != "encoder"}

    def reset_decoder(self) -> None:
        """Forget what the decoder recorded (used when a prefix is recomputed)."""
        for store in (self._weights, self._scores, self._q, self._kv):
            for key in [k for k in store if k[0] in ("decoder", "cross")]:
                del store[key]
        for kind in ("decoder", "cross"):
            self._masks.pop(kind, None)
        self._pe.pop("tgt", None)
        self._gates.clear()

    def freeze(self, options: InferenceOptions, src_tokens: list[list[str]], tgt_tokens: list[list[str]],
               n_heads: int, n_layers: dict[str, int]) -> "Trace":
        """Stitch, move to CPU once, and return the immutable Trace."""
        attn = {k: _stitch(v, 0.0) for k, v in self._weights.items()}
        scores = {k: _stitch(v, float("-inf")) for k, v in self._scores.items()}
        masks = {k: _stitch(v, False, np.bool_) for k, v in self._masks.items()}
        pe = {k: _cpu(torch.cat(v, dim=0)) for k, v in self._pe.items()}
        gates = {k: _cpu(torch.cat(v, dim=1)) for k, v in self._gates.items()}
        qkv = {k: (_cpu(torch.cat(self._q[k], dim=2)), _cpu(self._kv[k][0]), _cpu(self._kv[k][1])) for k in self._q}
        for store in (attn, scores, masks, pe, gates):
            for a in store.values():
                a.flags.writeable = False  # traces are shared (e.g. cached by the app): read-only
        for triple in qkv.values():
            for a in triple:
                a.flags.writeable = False
        return Trace(options=options, src_tokens=src_tokens, tgt_tokens=tgt_tokens, n_heads=n_heads,
                     n_layers=dict(n_layers), _attn=attn, _scores=scores, _masks=masks, _pe=pe, _gates=gates, _qkv=qkv)


@dataclass(frozen=True)
class Trace:
    """Everything one call recorded, as CPU numpy arrays. ``item`` selects the batch element."""

    options: InferenceOptions
    src_tokens: list[list[str]]  # per batch item, padded positions included
    tgt_tokens: list[list[str]]  # decoder inputs per batch item
    n_heads: int
    n_layers: dict[str, int]  # kind -> number of layers recorded
    _attn: dict[tuple[str, int], np.ndarray] = field(repr=False)
    _scores: dict[tuple[str, int], np.ndarray] = field(repr=False)
    _masks: dict[str, np.ndarray] = field(repr=False)
    _pe: dict[str, np.ndarray] = field(repr=False)
    _gates: dict[int, np.ndarray] = field(repr=False)
    _qkv: dict[tuple[str, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = field(repr=False)
    item: int = 0

    # --------------------------------------------------------------- access
    @property
    def kinds(self) -> tuple[str, ...]:
        """Attention kinds present, in order (an SSRU decoder has no 'decoder' kind)."""
        return tuple(k for k in ATTENTION_KINDS if (k, 0) in self._attn)

    @property
    def batch_size(self) -> int:
        return len(self.src_tokens)

    def _get(self, store: dict, kind: str, layer: int) -> np.ndarray:
        if kind not in ATTENTION_KINDS:
            raise KeyError(f"kind must be one of {ATTENTION_KINDS}, got {kind!r}")
        if (kind, layer) not in store:
            raise KeyError(f"no {kind} attention recorded for layer {layer} "
                           f"(recorded: {sorted(set(store))})")
        return store[(kind, layer)][self.item]

    def attention(self, kind: str, layer: int) -> np.ndarray:
        """Weights after softmax, before dropout: float32 (heads, n_query, n_key)."""
        return self._get(self._attn, kind, layer)

    def scores(self, kind: str, layer: int) -> np.ndarray:
        """Scaled pre-softmax scores QK^T/sqrt(d_k), masked entries -inf: (heads, n_query, n_key)."""
        return self._get(self._scores, kind, layer)

    def mask(self, kind: str) -> np.ndarray:
        """The mask applied: bool (n_query, n_key), True = may attend."""
        if kind not in self._masks:
            raise KeyError(f"no {kind} mask recorded (recorded: {sorted(self._masks)})")
        return self._masks[kind][self.item]

    def positional_encoding(self, side: str) -> np.ndarray:
        """The positional-encoding values added: float32 (n, d_model); zeros when switched off."""
        if side not in SIDES:
            raise KeyError(f"side must be one of {SIDES}, got {side!r}")
        return self._pe[side]

    def gates(self, layer: int) -> np.ndarray:
        """SSRU forget gates of decoder ``layer``: (n_target, d_model). Only for SSRU decoders."""
        if layer not in self._gates:
            raise KeyError(f"no SSRU gates recorded for decoder layer {layer}")
        return self._gates[layer][self.item]

    @property
    def has_gates(self) -> bool:
        return bool(self._gates)

    def qkv(self, kind: str, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-head queries (H, Tq, dh), keys (H, Tk, dh), values (H, Tk, dh) — when recorded with qkv=True."""
        if (kind, layer) not in self._qkv:
            raise KeyError(f"q/k/v of {kind} layer {layer} were not recorded (use Recorder(qkv=True))")
        q, k, v = self._qkv[(kind, layer)]
        return q[self.item], k[self.item], v[self.item]

    def select(self, item: int) -> "Trace":
        """The same trace, viewed at batch element ``item``."""
        if not 0 <= item < self.batch_size:
            raise IndexError(f"item {item} out of range for a batch of {self.batch_size}")
        return Trace(**{**self.__dict__, "item": item})

    # --------------------------------------------------------------- export
    @property
    def nbytes(self) -> int:
        stores = [self._attn, self._scores, self._masks, self._pe, self._gates]
        total = sum(a.nbytes for s in stores for a in s.values())
        return total + sum(a.nbytes for t in self._qkv.values() for a in t)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array under a flat name, e.g. 'attention.cross.1' (all batch items)."""
        out: dict[str, np.ndarray] = {}
        for (kind, layer), a in self._attn.items():
            out[f"attention.{kind}.{layer}"] = a
            out[f"scores.{kind}.{layer}"] = self._scores[(kind, layer)]
        out.update({f"mask.{k}": m for k, m in self._masks.items()})
        out.update({f"positional_encoding.{s}": p for s, p in self._pe.items()})
        out.update({f"ssru_gates.{l}": g for l, g in self._gates.items()})
        return out

    def metadata(self) -> dict[str, Any]:
        return {"options": self.options.to_dict(), "src_tokens": self.src_tokens, "tgt_tokens": self.tgt_tokens,
                "n_heads": self.n_heads, "n_layers": self.n_layers}

    def to_json(self, decimals: int = 4) -> str:
        """JSON text: metadata plus every array as nested lists (-inf written as null)."""
        data: dict[str, Any] = self.metadata()
        arrays = {}
        for name, a in self.arrays().items():
            if a.dtype == np.bool_:
                arrays[name] = a.tolist()
            else:
                r = np.round(a.astype(np.float64), decimals)
                finite = np.isfinite(r)
                arrays[name] = r.tolist() if finite.all() else np.where(finite, r, None).tolist()  # -inf -> null
        data["arrays"] = arrays
        return json.dumps(data, allow_nan=False, ensure_ascii=False)

    def to_npz(self) -> bytes:
        """An .npz archive: every array, plus 'metadata' as a JSON string."""
        buffer = io.BytesIO()
        np.savez_compressed(buffer, metadata=np.array(json.dumps(self.metadata())), **self.arrays())
        return buffer.getvalue()
