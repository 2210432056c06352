"""Per-call interventions: change the computation at a named site for ONE call, nothing stored on the model.

Passed to a ``Recorder`` (``Recorder(model, interventions=[...])``), which the model consults at each site:
``ScaleHeads`` (a head's output), ``ScaleValues`` (key positions' value vectors: value zeroing), ``Patch`` (a
recorded value put back).
``InferenceOptions.ablate`` (the app's head switches) becomes ``ScaleHeads(..., factor=0)`` the same way, so
switching a head off is one mechanism whoever asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..sites import heads_of, parse_attention_site


def _ints(name: str, values: Any, what: str) -> tuple[int, ...] | None:  # anything: checked here
    if values is None:
        return None
    try:
        out = tuple(int(v) for v in values)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: {name} must be a sequence of integers, got {values!r}") from None
    if any(v < 0 for v in out):
        raise ValueError(f"{what}: {name} must be >= 0, got {out}")
    return out


@dataclass(frozen=True)
class ScaleHeads:
    """Multiply the output of ``heads`` at attention ``site`` (e.g. 'decoder.1.cross') by ``factor``: 0 switches
    them off.

    rows: the batch rows it applies to (None = every row), so one batched call can ablate a different head
    in each row.
    """

    site: str
    heads: tuple[int, ...]
    factor: float = 0.0
    rows: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        parse_attention_site(self.site)
        object.__setattr__(self, "heads", _ints("heads", self.heads, "ScaleHeads"))
        object.__setattr__(self, "rows", _ints("rows", self.rows, "ScaleHeads"))
        object.__setattr__(self, "factor", float(self.factor))


@dataclass(frozen=True)
class ScaleValues:
    """Multiply the value vectors of key ``positions`` at attention ``site`` (e.g. 'encoder.0.self') by ``factor``
    before the weighted sum; 0 zeroes them (value zeroing, ``core.analysis.value_zeroing``). The attention weights
    are untouched: queries and keys are computed as without it.

    positions: absolute key positions (a decoder's self-attention during incremental decoding holds every key so
    far). heads: the heads it applies to (None = all). rows: the batch rows it applies to (None = every row), so
    one batched call can zero a different token in each row.
    """

    site: str
    positions: tuple[int, ...]
    factor: float = 0.0
    heads: tuple[int, ...] | None = None
    rows: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        parse_attention_site(self.site)
        object.__setattr__(self, "positions", _ints("positions", self.positions, "ScaleValues"))
        object.__setattr__(self, "heads", _ints("heads", self.heads, "ScaleValues"))
        object.__setattr__(self, "rows", _ints("rows", self.rows, "ScaleValues"))
        object.__setattr__(self, "factor", float(self.factor))


def value_scale(items: list[ScaleValues], shape: tuple[int, int, int], device: torch.device) -> Tensor:
    """The (B, H, Tk) multipliers ``items`` (one site's ``ScaleValues``) put on a block's values; positions, heads
    and rows beyond ``shape`` are left out (a decoding step that has not reached a key yet)."""
    B, H, Tk = shape
    scale = torch.ones(shape, device=device)
    for item in items:
        rows = range(B) if item.rows is None else [r for r in item.rows if r < B]
        heads = range(H) if item.heads is None else [h for h in item.heads if h < H]
        keys = [p for p in item.positions if p < Tk]
        if rows and heads and keys:
            r, h, k = (torch.tensor(list(ids), device=device) for ids in (rows, heads, keys))
            scale[r[:, None, None], h[None, :, None], k[None, None, :]] *= item.factor
    return scale


@dataclass(frozen=True)
class Patch:
    """Replace the value at ``site`` with ``value`` (activation patching), e.g. from a clean run's Trace.

    site: a residual-stream site ('embed.src', 'encoder.2.out', 'decoder.0.out'; value (T, D)) or an attention
    block's head outputs ('decoder.1.cross.heads', 'encoder.0.self.heads'; value (H, T, dh)). The value is one
    sentence's and is applied to every batch row in ``rows`` (None = all).
    positions: the positions along T to replace (None = all); for decoder sites these are absolute target
    positions, so incremental decoding patches each position at the step that computes it.
    heads: for '.heads' sites, the heads to replace (None = all).
    """

    site: str
    value: Tensor | np.ndarray
    positions: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None
    rows: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        value = self.value
        if isinstance(value, np.ndarray):
            value = torch.from_numpy(np.array(value, dtype=np.float32))
        if not isinstance(value, Tensor):
            raise ValueError(f"Patch: value must be a tensor or numpy array, got {type(value).__name__}")
        attention = heads_of(self.site)
        if attention is not None:
            parse_attention_site(attention)
            if value.dim() != 3:
                raise ValueError(f"Patch: a '.heads' site takes a (H, T, dh) value, got shape {tuple(value.shape)}")
        else:
            if value.dim() != 2:
                raise ValueError(f"Patch: site {self.site!r} takes a (T, D) value, got shape {tuple(value.shape)}")
            if self.heads is not None:
                raise ValueError(f"Patch: heads only apply to '.heads' sites, not {self.site!r}")
        object.__setattr__(self, "value", value.detach())
        object.__setattr__(self, "positions", _ints("positions", self.positions, "Patch"))
        object.__setattr__(self, "heads", _ints("heads", self.heads, "Patch"))
        object.__setattr__(self, "rows", _ints("rows", self.rows, "Patch"))

    def write(self, out: Tensor, offset: int) -> None:
        """Write the patch into ``out`` in place: (B, T, D) or (B, H, T, dh) covering positions [offset, offset + T).
        ``out`` is the caller's copy of the site's value (one copy for every patch of a site)."""
        x = out
        T = x.shape[-2]
        assert isinstance(self.value, Tensor)  # __post_init__ made it one
        value = self.value.to(device=x.device, dtype=x.dtype)
        if value.shape[-1] != x.shape[-1] or (x.dim() == 4 and value.shape[0] != x.shape[1]):
            raise ValueError(
                f"Patch {self.site!r}: value shape {tuple(value.shape)} does not fit the site's {tuple(x.shape[1:])}"
            )
        wanted = (
            range(offset, offset + T)
            if self.positions is None
            else [p for p in self.positions if offset <= p < offset + T]
        )
        positions = [p for p in wanted if p < value.shape[-2]]
        if not positions:
            return
        local = torch.tensor([p - offset for p in positions], device=x.device)
        source = torch.tensor(positions, device=x.device)
        rows = (
            torch.arange(x.shape[0], device=x.device)
            if self.rows is None
            else torch.tensor([r for r in self.rows if r < x.shape[0]], dtype=torch.long, device=x.device)
        )
        if x.dim() == 4:  # (B, H, T, dh)
            heads = (
                torch.arange(x.shape[1], device=x.device)
                if self.heads is None
                else torch.tensor(self.heads, device=x.device)
            )
            patch = value.index_select(0, heads).index_select(1, source)  # (h, p, dh)
            out[rows[:, None, None], heads[None, :, None], local[None, None, :]] = patch[None]
        else:  # (B, T, D)
            out[rows[:, None], local[None, :]] = value.index_select(0, source)[None]


Intervention = ScaleHeads | ScaleValues | Patch
