"""A decoder layer's incremental decoding state for one call (``LayerState``): its KV cache, SSRU cell and the
memory's keys and values, kept across decoding steps by ``core.fast.plan.DecoderState`` and read and written by the one
layer function, ``core.transformer.blocks.decoder_layer``."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from .attention import KV


@dataclass
class LayerState:
    """One decoder layer's incremental state for one call (never stored on a module).

    Self-attention keys/values live in buffers that grow by doubling, so a decoding step writes its
    one new position instead of copying the whole cache (``torch.cat`` per step is quadratic in the length).
    Inference only: the in-place writes would invalidate what autograd saved for earlier steps (training
    uses the teacher-forced path, which keeps no state).
    """

    self_k: Tensor | None = None  # (B, H, capacity, dh); positions [0, self_len) are filled
    self_v: Tensor | None = None
    self_len: int = 0
    ssru_cell: Tensor | None = None  # (B, 1, D)
    cross_kv: KV | None = None  # (B, H, Ts, dh) each
    cross_flat: KV | None = (
        None  # the same as bmm operands, keys (B*H, dh, Ts) and values (B*H, Ts, dh) (core.fast.plan)
    )

    @property
    def self_kv(self) -> KV | None:
        """The cached keys and values so far: two (B, H, self_len, dh) views, or None before the first step."""
        if self.self_k is None or self.self_v is None:
            return None
        return self.self_k[:, :, : self.self_len], self.self_v[:, :, : self.self_len]

    def append_kv(self, k: Tensor, v: Tensor) -> KV:
        """Append new positions' keys and values (B, H, T, dh); returns every cached position's."""
        end = self.self_len + k.shape[2]
        if self.self_k is None or self.self_v is None or end > self.self_k.shape[2]:
            B, H, _, dh = k.shape
            capacity = max(16, 2 * end)
            grown_k, grown_v = k.new_empty(B, H, capacity, dh), v.new_empty(B, H, capacity, v.shape[-1])
            if self.self_k is not None and self.self_v is not None:
                grown_k[:, :, : self.self_len] = self.self_k[:, :, : self.self_len]
                grown_v[:, :, : self.self_len] = self.self_v[:, :, : self.self_len]
            self.self_k, self.self_v = grown_k, grown_v
        self.self_k[:, :, self.self_len : end] = k
        self.self_v[:, :, self.self_len : end] = v
        self.self_len = end
        kv = self.self_kv
        assert kv is not None
        return kv

    def _take(self, buffer: Tensor, index: Tensor) -> Tensor:
        """Rows ``index`` of a KV buffer, same capacity, copying only the filled positions."""
        out = buffer.new_empty((index.shape[0],) + buffer.shape[1:])
        out[:, :, : self.self_len] = buffer[index, :, : self.self_len]
        return out

    def reorder(self, index: Tensor, same_source: bool = False) -> None:
        """Keep batch rows ``index`` (beam search). ``same_source``: every row attends to the same source (the
        beams of one sentence), so the cross-attention keys/values only change when the number of rows does."""
        if self.self_k is not None and self.self_v is not None:
            self.self_k, self.self_v = self._take(self.self_k, index), self._take(self.self_v, index)
        if self.ssru_cell is not None:
            self.ssru_cell = self.ssru_cell[index]
        if self.cross_kv is not None and not (same_source and self.cross_kv[0].shape[0] == index.shape[0]):
            self.cross_kv = (self.cross_kv[0][index], self.cross_kv[1][index])
            self.cross_flat = None  # made again from the reordered keys and values
