"""Attention maps: one head large, every layer and head in a grid, heads combined (the Overview, Head detail and
Positional-encoding pages)."""

from __future__ import annotations

import copy
import functools
import html
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from viz_app.figures.style import (
    DECIMALS,
    DIVERGING_SCALE,
    FONT,
    HOVER_TEXT_MAX,
    MASKED_BG,
    WEIGHTS_SCALE,
    base_layout,
    no_change_note,
    rounded,
    symmetric_range,
    token_axis,
    token_label,
    unchanged,
    unique_labels,
    weight_scale,
)


def aggregate(attention: np.ndarray, how: str) -> np.ndarray:
    """Combine heads of (H, Tq, Tk) weights: 'mean' or 'max' over heads -> (Tq, Tk)."""
    if how == "mean":
        return attention.mean(axis=0)
    if how == "max":
        return attention.max(axis=0)
    raise ValueError(f"unknown aggregation {how!r}; use 'mean' or 'max'")


def _hover_text(q_tokens: Sequence[str], k_tokens: Sequence[str], z: np.ndarray, name: str) -> list[list[str]]:
    ql, kl = unique_labels(q_tokens), unique_labels(k_tokens)
    return [
        [
            f"query {ql[i]}<br>key {kl[j]}<br>{name} "
            + ("blocked by the mask" if np.isnan(z[i, j]) else f"{z[i, j]:.{DECIMALS}f}")
            for j in range(z.shape[1])
        ]
        for i in range(z.shape[0])
    ]


# ----------------------------------------------------------------------------- attention
def head_heatmap(
    matrix: np.ndarray,
    q_tokens: Sequence[str],
    k_tokens: Sequence[str],
    *,
    title: str,
    values: str = "weights",
    fixed_scale: bool = True,
    mask: np.ndarray | None = None,
) -> go.Figure:
    """One large (Tq, Tk) map with tokens on both axes and exact values on hover.

    ``values``: 'weights' (0..1, or stretched to 0..max without ``fixed_scale``: ``style.weight_scale``), 'scores'
    (pre-softmax, diverging
    around 0, −∞ as grey gaps) or 'difference' (symmetric diverging scale). ``mask`` (Tq, Tk), True where a
    query may attend: blocked cells are drawn grey, distinct from a weight of zero.
    """
    z = rounded(matrix)
    if mask is not None and mask.shape == z.shape:
        z = np.where(mask, z, np.nan).astype(np.float32)
    gaps = z.size <= HOVER_TEXT_MAX  # large maps draw without cell gaps: Plotly then paints them in half the time
    trace: dict[str, Any] = dict(
        z=z,
        x=list(range(z.shape[1])),
        y=list(range(z.shape[0])),
        hoverongaps=True,
        xgap=1 if gaps else 0,
        ygap=1 if gaps else 0,
    )
    if z.size <= HOVER_TEXT_MAX:  # every cell names its tokens
        trace.update(
            text=_hover_text(q_tokens, k_tokens, z, values.rstrip("s")), hovertemplate="%{text}<extra></extra>"
        )
    else:  # long inputs: per-cell labels would be most of the bytes sent; positions (1-based) name the cells
        trace.update(
            x=list(range(1, z.shape[1] + 1)),
            y=list(range(1, z.shape[0] + 1)),
            hovertemplate=f"query %{{y}}<br>key %{{x}}<br>{values.rstrip('s')} %{{z:.4f}}<extra></extra>",
        )
    if values == "weights":
        top, named = weight_scale(z, fixed=fixed_scale)
        trace.update(colorscale=WEIGHTS_SCALE, zmin=0.0, zmax=top, colorbar=dict(title=dict(text=named)))
    else:
        m = symmetric_range(z)
        trace.update(
            colorscale=DIVERGING_SCALE,
            zmin=-m,
            zmax=m,
            zmid=0.0,
            colorbar=dict(title=dict(text="score" if values == "scores" else "Δ")),
        )
    fig = go.Figure(go.Heatmap(**trace))
    masked = ~np.isfinite(z)
    if masked.any():  # masked cells in grey (a second, scale-less layer)
        fig.add_trace(
            go.Heatmap(
                z=np.where(masked, 1.0, np.nan).astype(np.float32),
                x=trace["x"],
                y=trace["y"],
                colorscale=[[0, MASKED_BG], [1, MASKED_BG]],
                showscale=False,
                xgap=trace["xgap"],
                ygap=trace["ygap"],
                name="masked (−∞)",
                hoverinfo="skip",
            )
        )
    n_q, n_k = z.shape
    base_layout(fig, title, height=int(min(1500, max(380, 22 * n_q + 190))))
    if values == "difference" and unchanged(matrix):
        fig.add_annotation(**no_change_note(xref="paper", yref="paper", x=0.5, y=0.5))
    first = trace["x"][0]  # 1 where the hover names positions
    fig.update_xaxes(**token_axis(k_tokens, "key (attended to)", first=first), tickangle=-60)
    fig.update_yaxes(**token_axis(q_tokens, "query (attending)", first=first), autorange="reversed")
    return fig


@functools.lru_cache(maxsize=64)
def _grid_layout(rows: int, height: int) -> dict[str, Any]:
    """The layout of a one-column subplot grid, built once per shape (make_subplots is slow)."""
    fig = make_subplots(rows=rows, cols=1, vertical_spacing=min(0.1, 16 / height))
    layout = fig.layout.to_plotly_json()
    for name, axis in layout.items():
        if name.startswith(("xaxis", "yaxis")):
            axis.update(visible=False)
            if name.startswith("yaxis"):
                axis["autorange"] = "reversed"
    layout.update(font=FONT, margin=dict(l=34, r=10, t=86, b=10), plot_bgcolor="white", height=height)
    return layout


def _axis(i: int) -> str:
    return "" if i == 1 else str(i)


@dataclass(frozen=True)
class GridOptions:
    """How ``attention_grid`` draws: ``ablated`` (layer, head) squares are marked 'off'; ``selected`` (layer, head)
    is outlined; ``head_labels`` (layer, head) -> text is written small under each labelled head's square (what
    "What does each head do?" found); ``diverging`` draws differences on a scale symmetric around 0 (else weights,
    0..1, or stretched to 0..max without ``fixed_scale``: ``style.weight_scale``); ``cell`` is the height of one
    layer's row in pixels."""

    ablated: Collection[tuple[int, int]] = ()
    selected: tuple[int, int] | None = None
    head_labels: Mapping[tuple[int, int], str] = field(default_factory=dict)
    diverging: bool = False
    cell: int = 120
    fixed_scale: bool = True

    def __post_init__(self) -> None:
        if self.cell < 1:
            raise ValueError(f"cell must be a positive number of pixels, got {self.cell}")


def attention_grid(
    maps: Sequence[np.ndarray],
    q_tokens: Sequence[str],
    k_tokens: Sequence[str],
    *,
    title: str,
    mask: np.ndarray | None = None,
    options: GridOptions = GridOptions(),
) -> go.Figure:
    """Every layer × head as small heatmaps in one figure: one subplot row per layer ('L1' …), the
    heads side by side in it ('H1' …), separated by a blank column.

    ``maps[layer]`` is (H, Tq, Tk). One trace per layer (far fewer subplots for the browser to
    draw than one per head); hovering names layer, head, query and key. One shared colour scale. ``mask`` (Tq, Tk),
    True where a query may attend: blocked cells are left grey, distinct from a weight of zero. A difference grid
    (``options.diverging``) where nothing changed says so in words; where only some heads are unchanged, each of
    those squares reads 'no change' (an all-white square could also be a drawing that failed).
    """
    n_layers, (n_heads, n_q, n_k) = len(maps), maps[0].shape
    height = n_layers * (options.cell + 16) + 110
    layout = copy.deepcopy(_grid_layout(n_layers, height))
    masked = mask is not None and mask.shape == (n_q, n_k) and not mask.all()
    zs = [np.where(mask[None], m, np.nan) if masked and mask is not None else m for m in maps]
    same = [[options.diverging and unchanged(z[h]) for h in range(n_heads)] for z in zs]  # before pooling, rounding
    fq, fk = -(-n_q // GRID_MAX), -(-n_k // GRID_MAX)
    if fq > 1 or fk > 1:  # long inputs: each square shows the largest weight of a block of tokens (pooled)
        zs = [pool_max(z, fq, fk) for z in zs]
        q_tokens, k_tokens = pooled_labels(q_tokens, fq), pooled_labels(k_tokens, fk)
        n_q, n_k = zs[0].shape[1:]
        title = f"{title} · pooled: largest weight of {fq}×{fk} tokens per square (open a head for every token)"
    zs = [rounded(z, GRID_DECIMALS) for z in zs]
    if masked:
        layout["plot_bgcolor"] = MASKED_BG
    layout["coloraxis"] = _colour_axis(zs, options.diverging, options.fixed_scale)
    layout["title"] = dict(text=title, x=0.0, xanchor="left", font=dict(size=16))
    width = n_k + 1  # one blank column between heads
    keys = [token_label(t) for t in k_tokens] if fk > 1 else unique_labels(k_tokens)  # pooled: '4–6 ␣the…'
    x = [f"H{h + 1} · key {keys[j]}" if j < n_k else "\u200b" * (h + 1) for h in range(n_heads) for j in range(width)]
    y = [token_label(t) for t in q_tokens] if fq > 1 else unique_labels(q_tokens)
    label = dict(showarrow=False, font=dict(size=12, color="#555"))
    notes = [
        dict(text=f"H{h + 1}", xref="x", x=h * width + (n_k - 1) / 2, yref="paper", y=1.0, yanchor="bottom", **label)
        for h in range(n_heads)
    ]
    whole_grid_same = options.diverging and all(all(row) for row in same)  # said once, below
    data, shapes = [], []
    for l, z in enumerate(zs):
        tiled = np.full((n_q, n_heads * width - 1), np.nan, dtype=np.float32)
        for h in range(n_heads):
            tiled[:, h * width : h * width + n_k] = z[h]
        i = _axis(l + 1)
        data.append(
            dict(
                type="heatmap",
                z=tiled,
                x=x[: tiled.shape[1]],
                y=y,
                coloraxis="coloraxis",
                xaxis=f"x{i}",
                yaxis=f"y{i}",
                name=f"L{l + 1}",
                hoverongaps=False,
                hovertemplate=f"L{l + 1} %{{x}}<br>query %{{y}}<br>%{{z:.3f}}<extra></extra>",
            )
        )
        y0, y1 = layout[f"yaxis{i}"]["domain"]
        notes.append(
            dict(
                text=f"L{l + 1}",
                xref="paper",
                x=0.0,
                xanchor="right",
                xshift=-6,
                yref="paper",
                y=(y0 + y1) / 2,
                **label,
            )
        )
        for h in range(n_heads):
            square = _Square(axis=i, layer=l, head=h, x0=h * width, n_q=n_q, n_k=n_k)
            notes += _square_notes(square, options, unchanged_alone=same[l][h] and not whole_grid_same)
            if options.selected == (l, h):
                shapes.append(dict(type="rect", line=dict(color="#e4572e", width=3), **square.box()))
    if whole_grid_same:
        notes.append(no_change_note(xref="paper", yref="paper", x=0.5, y=0.5))
    layout.update(annotations=notes, shapes=shapes)
    return go.Figure(data=data, layout=layout)


def _colour_axis(zs: Sequence[np.ndarray], diverging: bool, fixed: bool) -> dict[str, Any]:
    """One colour scale for every square: symmetric around 0 for differences, the lab's weight scale otherwise."""
    if diverging:
        top = symmetric_range(*zs)
        return dict(
            colorscale=DIVERGING_SCALE, cmin=-top, cmax=top, cmid=0.0, colorbar=dict(title=dict(text="Δ"), thickness=12)
        )
    top, named = weight_scale(*zs, fixed=fixed)
    return dict(colorscale=WEIGHTS_SCALE, cmin=0.0, cmax=top, colorbar=dict(title=dict(text=named), thickness=12))


@dataclass(frozen=True)
class _Square:
    """Where one head's square sits: subplot ``axis`` ('' or '2' …), its first column ``x0``, its size."""

    axis: str
    layer: int
    head: int
    x0: int
    n_q: int
    n_k: int

    def box(self) -> dict[str, Any]:
        i = self.axis
        return dict(
            xref=f"x{i}", yref=f"y{i}", x0=self.x0 - 0.5, x1=self.x0 + self.n_k - 0.5, y0=-0.5, y1=self.n_q - 0.5
        )

    def note(self, text: str, what: str, **where: Any) -> dict[str, Any]:
        """An annotation in the middle of the square (``where`` moves or styles it), named '<what> L1 H2'."""
        return dict(
            text=text,
            x=self.x0 + (self.n_k - 1) / 2,
            y=(self.n_q - 1) / 2,
            xref=f"x{self.axis}",
            yref=f"y{self.axis}",
            showarrow=False,
            name=f"{what} L{self.layer + 1} H{self.head + 1}",
            **where,
        )


def _square_notes(square: _Square, options: GridOptions, *, unchanged_alone: bool) -> list[dict[str, Any]]:
    """The words on one head's square: 'no change' (when it alone is unchanged), 'off', what the head does."""
    notes = []
    key, off = (square.layer, square.head), (square.layer, square.head) in options.ablated
    bg = "rgba(255,255,255,0.75)"
    if unchanged_alone:
        shift = -16 if off else 0  # under the 'off' note
        notes.append(square.note("no change", "no change", yshift=shift, font=dict(size=11, color="#333"), bgcolor=bg))
    if off:
        notes.append(square.note("off", "off", font=dict(size=13, color="#b00020"), bgcolor=bg))
    if key in options.head_labels:
        text = html.escape(options.head_labels[key])
        notes.append(
            square.note(text, "label", font=dict(size=9, color="#444"), yanchor="top") | {"y": square.n_q - 0.5}
        )
    return notes


GRID_MAX = 64  # a grid square shows at most this many tokens per axis; longer inputs are pooled into blocks
GRID_DECIMALS = 3  # the grid is an overview: three decimals (the large head keeps four)


def pool_max(z: np.ndarray, fq: int, fk: int) -> np.ndarray:
    """(..., Tq, Tk) -> (..., ceil(Tq/fq), ceil(Tk/fk)): the largest value of each block by absolute size (sign
    kept, so differences pool too); a block of NaN (masked) only stays NaN."""
    *lead, tq, tk = z.shape
    nq, nk = -(-tq // fq), -(-tk // fk)
    padded = np.full((*lead, nq * fq, nk * fk), np.nan, dtype=np.float64)
    padded[..., :tq, :tk] = z
    blocks = padded.reshape(*lead, nq, fq, nk, fk)
    blocks = np.moveaxis(blocks, -3, -2).reshape(*lead, nq, nk, fq * fk)
    filled = np.where(np.isnan(blocks), -1.0, np.abs(blocks))
    pick = np.take_along_axis(blocks, filled.argmax(-1)[..., None], axis=-1)[..., 0]
    return pick


def pooled_labels(tokens: Sequence[str], f: int) -> list[str]:
    """'4–6 ␣the…' for each block of ``f`` tokens (1-based positions, the block's first piece)."""
    n = len(tokens)
    return [f"{i + 1}–{min(i + f, n)} {tokens[i]}…" if f > 1 else tokens[i] for i in range(0, n, f)]
