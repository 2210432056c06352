"""Pure Plotly builders: numpy arrays + token lists in, ``go.Figure`` out.

Nothing here knows about Streamlit (a test checks it), so every figure can be unit-tested and
reused elsewhere. Conventions: rows are queries, columns are keys; token axes use integer
positions with the model's pieces as tick text (duplicate pieces stay distinct); values are
rounded to ``DECIMALS`` before they are sent to the browser; masked (−∞) scores become gaps.
"""

from __future__ import annotations

import copy
import functools
import html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

DECIMALS = 4
WORD_START = "␣"  # how SentencePiece's "▁" (a space before the piece) is shown
SPECIAL = frozenset({"<s>", "</s>", "<pad>", "<unk>"})
FONT = dict(family="Inter, 'Source Sans Pro', 'DejaVu Sans', Arial, sans-serif", size=13)
WEIGHTS_SCALE = "Blues"
DIVERGING_SCALE = "RdBu_r"
MASKED_BG = "#d0d0d0"  # masked (−∞) cells
ALLOW, BLOCK = "#5fa8d3", "#2b2d42"  # mask colours: may attend / blocked


# ----------------------------------------------------------------------------- helpers
def query_key_tokens(
    kind: str, src: Sequence[str], tgt: Sequence[str], predicted: Sequence[str] = ()
) -> tuple[Sequence[str], Sequence[str]]:
    """The tokens on the query (rows) and key (columns) axes of an attention ``kind``: encoder = source × source,
    decoder = decoder inputs × decoder inputs, cross = decoder inputs × source. With ``predicted`` (the output
    pieces), decoder and cross rows read 'input → predicted' (the row of input '␣O' is where 'gato' was chosen)."""
    rows: Sequence[str] = src if kind == "encoder" else tgt
    if kind != "encoder" and predicted:
        rows = [f"{q} → {predicted[i]}" if i < len(predicted) else q for i, q in enumerate(tgt)]
    return rows, (tgt if kind == "decoder" else src)


def token_text(piece: str) -> str:
    """A piece for display: '▁' (word start) → '␣', invisible characters escaped as \\uXXXX."""
    text = piece if piece in SPECIAL else piece.replace("▁", WORD_START)
    return "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in text) or "∅"


def token_label(piece: str) -> str:
    """``token_text`` made safe for Plotly's HTML-like labels ('<s>' stays visible)."""
    return html.escape(token_text(piece), quote=False)


def token_labels(tokens: Sequence[str]) -> list[str]:
    """``token_label`` of every piece (duplicates kept: axes are positional)."""
    return [token_label(t) for t in tokens]


def unique_labels(tokens: Sequence[str]) -> list[str]:
    """Labels that are unique even for repeated pieces ('3 ␣the', 1-based like layers, heads and steps), for
    categorical axes and hovers."""
    return [f"{i + 1} {token_label(t)}" for i, t in enumerate(tokens)]


def rounded(a: np.ndarray, decimals: int = DECIMALS) -> np.ndarray:
    """float32 copy rounded to ``decimals``; ±inf become NaN (drawn as gaps)."""
    out = np.round(np.asarray(a, dtype=np.float64), decimals)
    out[~np.isfinite(out)] = np.nan
    return out.astype(np.float32)


def share(p: float) -> str:
    """A probability as a percentage that never rounds a small one to 0 % ('0.0032%')."""
    if p <= 0:
        return "0%"
    return f"{p:.1%}" if p >= 0.001 else f"{p * 100:.2g}%"


def titled(what: str, note: str = "") -> str:
    """Figure title: what it shows, then the options in effect ('… — PE off')."""
    return f"{what} — {note}" if note else what


def plot_config(filename: str) -> dict[str, Any]:
    """Plotly config for ``st.plotly_chart``: PNG export (2×) from the toolbar, no logo."""
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in filename)[:80] or "figure"
    return {
        "displaylogo": False,
        "modeBarButtonsToRemove": ["lasso2d", "select2d"],
        "toImageButtonOptions": {"format": "png", "filename": safe, "scale": 2},
    }


def aggregate(attention: np.ndarray, how: str) -> np.ndarray:
    """Combine heads of (H, Tq, Tk) weights: 'mean' or 'max' over heads -> (Tq, Tk)."""
    if how == "mean":
        return attention.mean(axis=0)
    if how == "max":
        return attention.max(axis=0)
    raise ValueError(f"unknown aggregation {how!r}; use 'mean' or 'max'")


TITLE_TOP = 70  # px above the plot area for a one-line title (it starts 20 px from the top)
TITLE_LINE = 22  # px each further title line takes (16 px font)
NO_CHANGE_TOL = 1e-9  # a difference smaller than this is no difference
NO_CHANGE = "no change: every weight is the same in both runs"


def wrap_title(text: str, width: int | None) -> str:
    """``text`` broken at spaces into lines of at most ``width`` characters, joined by '<br>' (Plotly's line break),
    so that a title in a narrow column wraps instead of running past the chart's right edge (Plotly never wraps
    on its own). Where what the chart shows and the options ('… — PE off') each fit a line, the break comes before
    the options; otherwise between words. A word longer than ``width`` keeps a line to itself; ``width`` None leaves
    the title as it is."""
    if width is None or len(text) <= width:
        return text
    what, dash, note = text.rpartition(" — ")
    if dash and len(what) <= width and len(note) + 2 <= width:
        return f"{what}<br>— {note}"
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines)


def title_lines(title: str) -> int:
    """How many lines a (wrapped) title takes."""
    return title.count("<br>") + 1


def base_layout(fig: go.Figure, title: str, height: int, *, wrap: int | None = None, top: int = 0) -> go.Figure:
    """Title (left-aligned, wrapped at ``wrap`` characters: the top margin grows by a line for each), height, font,
    margins and a white plot area. ``top``: extra px above the plot area (for a legend placed there)."""
    title = wrap_title(title, wrap)
    extra = TITLE_LINE * (title_lines(title) - 1) + top
    fig.update_layout(
        title=dict(
            text=title,
            x=0.0,
            xanchor="left",
            y=1.0,
            yref="container",
            yanchor="top",
            pad=dict(t=20),
            font=dict(size=16),
        ),
        height=height + extra,
        font=FONT,
        margin=dict(l=10, r=10, t=TITLE_TOP + extra, b=10),
        plot_bgcolor="white",
    )
    return fig


def unchanged(values: np.ndarray, tol: float = NO_CHANGE_TOL) -> bool:
    """True when every finite value of a difference is zero (|x| < ``tol``): the two runs agree there. NaN and ±inf
    (masked cells) are left out."""
    z = np.asarray(values, dtype=np.float64)
    return bool(np.all(np.abs(z[np.isfinite(z)]) < tol))


def no_change_note(**where: Any) -> dict[str, Any]:
    """The annotation a difference map gets where nothing changed (blank otherwise: white on white, no word)."""
    spec: dict[str, Any] = dict(
        text=NO_CHANGE,
        showarrow=False,
        font=dict(size=15, color="#333"),
        bgcolor="rgba(255,255,255,0.9)",
        bordercolor="#888",
        borderpad=6,
        name="no change",
    )
    spec.update(where)
    return spec


MAX_TICKS = 50  # above this many tokens an axis labels every k-th one (hover and zoom still name each)


def ordinal(n: int) -> str:
    """2 -> '2nd', 3 -> '3rd', 11 -> '11th', 21 -> '21st'."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def token_axis(
    tokens: Sequence[str],
    title: str,
    scale: float = 1.0,
    *,
    max_ticks: int = MAX_TICKS,
    note: bool = True,
    first: int = 0,
) -> dict[str, Any]:
    """Axis settings for a token axis: integer positions, pieces as tick text, smaller font when crowded, and
    beyond ``max_ticks`` tokens only every k-th labelled (with its 1-based position) so the labels stay legible.
    note: say so in the title (a title left empty stays empty; side-by-side panels say it once). first: the
    coordinate of the first token (1 where a large map's hover names 1-based positions)."""
    n = len(tokens)
    size = 12 if n * scale <= 30 else 10 if n * scale <= 60 else 8
    step = -(-n // max_ticks)
    labels = token_labels(tokens)
    shown = list(range(0, n, step))
    said = f"{title} — every {ordinal(step)} labelled; hover or zoom for each"
    return dict(
        title=dict(text=said if step > 1 and note and title else title),
        tickmode="array",
        tickvals=[i + first for i in shown],
        ticktext=[labels[i] if step == 1 else f"{i + 1} {labels[i]}" for i in shown],
        tickfont=dict(size=size),
        showgrid=False,
        zeroline=False,
    )


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


def symmetric_range(*arrays: np.ndarray) -> float:
    """Largest finite |value| over ``arrays`` (1.0 if none): the half-width of a symmetric colour scale."""
    finite = [np.abs(a[np.isfinite(a)]).max() for a in arrays if np.isfinite(a).any()]
    return float(max(finite)) if finite and max(finite) > 0 else 1.0


# ----------------------------------------------------------------------------- attention
def head_heatmap(
    matrix: np.ndarray,
    q_tokens: Sequence[str],
    k_tokens: Sequence[str],
    *,
    title: str,
    values: str = "weights",
    fixed_scale: bool = False,
    mask: np.ndarray | None = None,
) -> go.Figure:
    """One large (Tq, Tk) map with tokens on both axes and exact values on hover.

    ``values``: 'weights' (0..max, or 0..1 with ``fixed_scale``), 'scores' (pre-softmax, diverging
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
        top = 1.0 if fixed_scale or not np.isfinite(z).any() else max(float(np.nanmax(z)), 1e-6)
        trace.update(colorscale=WEIGHTS_SCALE, zmin=0.0, zmax=top, colorbar=dict(title=dict(text="weight")))
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


def attention_grid(
    maps: Sequence[np.ndarray],
    q_tokens: Sequence[str],
    k_tokens: Sequence[str],
    *,
    title: str,
    ablated: Sequence[tuple[int, int]] = (),
    selected: tuple[int, int] | None = None,
    diverging: bool = False,
    cell: int = 120,
    head_labels: Mapping[tuple[int, int], str] | None = None,
    mask: np.ndarray | None = None,
) -> go.Figure:
    """Every layer × head as small heatmaps in one figure: one subplot row per layer ('L1' …), the
    heads side by side in it ('H1' …), separated by a blank column.

    ``maps[layer]`` is (H, Tq, Tk). One trace per layer (far fewer subplots for the browser to
    draw than one per head); hovering names layer, head, query and key. One shared colour scale:
    0..max for weights, or symmetric around 0 with ``diverging`` (differences). ``ablated``
    heads are marked 'off'; ``selected`` (layer, head) is outlined; ``head_labels`` (layer, head) -> text is
    written small under each labelled head's square (what "What does each head do?" found). ``mask`` (Tq, Tk),
    True where a query may attend: blocked cells are left grey, distinct from a weight of zero. A difference grid
    (``diverging``) where nothing changed says so in words; where only some heads are unchanged, each of those
    squares reads 'no change' (an all-white square could also be a drawing that failed).
    """
    n_layers, (n_heads, n_q, n_k) = len(maps), maps[0].shape
    height = n_layers * (cell + 16) + 110
    layout = copy.deepcopy(_grid_layout(n_layers, height))
    masked = mask is not None and mask.shape == (n_q, n_k) and not mask.all()
    zs = [np.where(mask[None], m, np.nan) if masked and mask is not None else m for m in maps]
    same = [[diverging and unchanged(z[h]) for h in range(n_heads)] for z in zs]  # before pooling and rounding
    fq, fk = -(-n_q // GRID_MAX), -(-n_k // GRID_MAX)
    if fq > 1 or fk > 1:  # long inputs: each square shows the largest weight of a block of tokens (pooled)
        zs = [pool_max(z, fq, fk) for z in zs]
        q_tokens, k_tokens = pooled_labels(q_tokens, fq), pooled_labels(k_tokens, fk)
        n_q, n_k = zs[0].shape[1:]
        title = f"{title} · pooled: largest weight of {fq}×{fk} tokens per square (open a head for every token)"
    zs = [rounded(z, GRID_DECIMALS) for z in zs]
    if masked:
        layout["plot_bgcolor"] = MASKED_BG
    width = n_k + 1  # one blank column between heads
    if diverging:
        top = symmetric_range(*zs)
        layout["coloraxis"] = dict(
            colorscale=DIVERGING_SCALE, cmin=-top, cmax=top, cmid=0.0, colorbar=dict(title=dict(text="Δ"), thickness=12)
        )
    else:
        top = max((float(np.nanmax(z)) for z in zs if np.isfinite(z).any()), default=1.0)
        layout["coloraxis"] = dict(
            colorscale=WEIGHTS_SCALE,
            cmin=0.0,
            cmax=max(top, 1e-6),
            colorbar=dict(title=dict(text="weight"), thickness=12),
        )
    layout["title"] = dict(text=title, x=0.0, xanchor="left", font=dict(size=16))
    keys = [token_label(t) for t in k_tokens] if fk > 1 else unique_labels(k_tokens)  # pooled: '4–6 ␣the…'
    x = [f"H{h + 1} · key {keys[j]}" if j < n_k else "\u200b" * (h + 1) for h in range(n_heads) for j in range(width)]
    y = [token_label(t) for t in q_tokens] if fq > 1 else unique_labels(q_tokens)
    centre = [h * width + (n_k - 1) / 2 for h in range(n_heads)]
    label = dict(showarrow=False, font=dict(size=12, color="#555"))
    notes = [
        dict(text=f"H{h + 1}", xref="x", x=c, yref="paper", y=1.0, yanchor="bottom", **label)
        for h, c in enumerate(centre)
    ]
    data, shapes, off = [], [], set(ablated)
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
            box = dict(xref=f"x{i}", yref=f"y{i}", x0=h * width - 0.5, x1=h * width + n_k - 0.5, y0=-0.5, y1=n_q - 0.5)
            if same[l][h] and not all(all(row) for row in same):  # the whole grid unchanged: said once, below
                notes.append(
                    dict(
                        text="no change",
                        x=h * width + (n_k - 1) / 2,
                        y=(n_q - 1) / 2,
                        xref=f"x{i}",
                        yref=f"y{i}",
                        yshift=-16 if (l, h) in off else 0,  # under the 'off' note
                        showarrow=False,
                        font=dict(size=11, color="#333"),
                        bgcolor="rgba(255,255,255,0.75)",
                        name=f"no change L{l + 1} H{h + 1}",
                    )
                )
            if (l, h) in off:
                notes.append(
                    dict(
                        text="off",
                        x=h * width + (n_k - 1) / 2,
                        y=(n_q - 1) / 2,
                        xref=f"x{i}",
                        yref=f"y{i}",
                        showarrow=False,
                        font=dict(size=13, color="#b00020"),
                        bgcolor="rgba(255,255,255,0.75)",
                        name=f"off L{l + 1} H{h + 1}",
                    )
                )
            if selected == (l, h):
                shapes.append(dict(type="rect", line=dict(color="#e4572e", width=3), **box))
            if head_labels and (l, h) in head_labels:
                notes.append(
                    dict(
                        text=html.escape(head_labels[(l, h)]),
                        x=h * width + (n_k - 1) / 2,
                        y=n_q - 0.5,
                        xref=f"x{i}",
                        yref=f"y{i}",
                        yanchor="top",
                        showarrow=False,
                        font=dict(size=9, color="#444"),
                        name=f"label L{l + 1} H{h + 1}",
                    )
                )
    if diverging and all(all(row) for row in same):
        notes.append(no_change_note(xref="paper", yref="paper", x=0.5, y=0.5))
    layout.update(annotations=notes, shapes=shapes)
    return go.Figure(data=data, layout=layout)


HOVER_TEXT_MAX = 64 * 64  # beyond this many cells a large map's hover names positions instead of tokens
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


COLUMN_TITLE = 60  # characters a title may take on a line in a two-thirds column (about 540 px at 1280 px wide)


def step_attention(
    rows: Sequence[np.ndarray], key_tokens: Sequence[str], *, title: str, wrap: int | None = COLUMN_TITLE
) -> go.Figure:
    """At one decoding step: every layer/head's attention row (y = 'L1 H1' …, x = keys). The title wraps at ``wrap``
    characters (the Steps page shows this chart in a column two thirds wide: one line ran past its edge)."""
    z = rounded(np.concatenate(list(rows), axis=0))  # (L*H, n_key)
    n_heads = rows[0].shape[0]
    labels = [f"L{l + 1} H{h + 1}" for l in range(len(rows)) for h in range(n_heads)]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(z.shape[1])),
            y=labels,
            colorscale=WEIGHTS_SCALE,
            zmin=0.0,
            zmax=max(float(np.nanmax(z)), 1e-6) if z.size else 1.0,
            xgap=1,
            ygap=1,
            customdata=[unique_labels(key_tokens)] * z.shape[0],
            hovertemplate="%{y}<br>key %{customdata}<br>weight %{z:.4f}<extra></extra>",
            colorbar=dict(title=dict(text="weight")),
        )
    )
    base_layout(fig, title, height=int(max(260, 18 * z.shape[0] + 170)), wrap=wrap)
    fig.update_xaxes(**token_axis(key_tokens, "key"), tickangle=-60)
    fig.update_yaxes(autorange="reversed", showgrid=False, tickfont=dict(size=10))
    return fig


# ----------------------------------------------------------------------------- masks
def mask_panels(
    panels: dict[str, np.ndarray], q_tokens: Sequence[str], k_tokens: Sequence[str], *, title: str
) -> go.Figure:
    """Boolean masks side by side (True = may attend), e.g. padding / causal / combined. Beyond
    ``HOVER_TEXT_MAX`` cells the hover names positions (1-based) instead of tokens and the cells have no gaps: per-cell
    labels, three times over, would be most of the bytes sent and of the browser's drawing."""
    names = list(panels)
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=names, horizontal_spacing=0.06)
    scale = [[0.0, BLOCK], [0.5, BLOCK], [0.5, ALLOW], [1.0, ALLOW]]
    large = len(q_tokens) * len(k_tokens) > HOVER_TEXT_MAX
    first = 1 if large else 0
    cells: dict[str, Any] = (
        dict(
            x=list(range(1, len(k_tokens) + 1)),
            y=list(range(1, len(q_tokens) + 1)),
            hovertemplate="query %{y}<br>key %{x}<br>%{z} (1 = may attend)<extra>%{fullData.name}</extra>",
        )
        if large
        else dict(
            text=[[f"query {q}<br>key {k}" for k in unique_labels(k_tokens)] for q in unique_labels(q_tokens)],
            hovertemplate="%{text}<br>%{z}<extra>%{fullData.name}</extra>",
            xgap=1,
            ygap=1,
        )
    )
    for c, name in enumerate(names, start=1):
        z = np.asarray(panels[name], dtype=np.int8)
        fig.add_trace(
            go.Heatmap(
                z=z,
                name=name,
                colorscale=scale,
                zmin=0,
                zmax=1,
                showscale=c == len(names),
                colorbar=dict(tickvals=[0.25, 0.75], ticktext=["blocked", "may attend"], thickness=12),
                **cells,
            ),
            row=1,
            col=c,
        )
        middle = c == (len(names) + 1) // 2  # one note under the panels, not one per panel (they overlapped)
        x_axis = token_axis(
            k_tokens, "key", scale=len(names), max_ticks=MAX_TICKS // len(names), note=middle, first=first
        )
        y_axis = token_axis(q_tokens, "query" if c == 1 else "", first=first)
        fig.update_xaxes(**x_axis, tickangle=-90, row=1, col=c)
        fig.update_yaxes(**y_axis, autorange="reversed", showticklabels=c == 1, row=1, col=c)
    return base_layout(fig, title, height=int(min(900, max(360, 16 * len(q_tokens) + 220))))


def mask_stages(
    raw_scores: np.ndarray, mask_row: np.ndarray, weights: np.ndarray, k_tokens: Sequence[str], *, title: str
) -> go.Figure:
    """One query's row through the three stages: scaled scores → masked (−∞) → softmax weights.

    Masked keys have no bar in stage 2; a grey '−∞' marker sits at the axis bottom instead.
    """
    raw, w = rounded(raw_scores), rounded(weights)
    mask_row = np.asarray(mask_row, dtype=bool)
    masked = np.where(mask_row, raw, np.nan)
    x = list(range(len(k_tokens)))
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.09,
        subplot_titles=(
            "1 · scaled scores  q·k / √d_k",
            "2 · + mask: blocked keys become −∞",
            "3 · softmax → attention weights",
        ),
    )
    fig.add_trace(
        go.Bar(x=x, y=raw, marker_color="#8d99ae", name="score", hovertemplate="%{y:.4f}<extra></extra>"), row=1, col=1
    )
    fig.add_trace(
        go.Bar(x=x, y=masked, marker_color="#5fa8d3", name="masked score", hovertemplate="%{y:.4f}<extra></extra>"),
        row=2,
        col=1,
    )
    blocked = [i for i in x if not mask_row[i]]
    if blocked:
        finite = masked[np.isfinite(masked)]
        floor = float(finite.min()) if finite.size else 0.0
        fig.add_trace(
            go.Scatter(
                x=blocked,
                y=[min(floor, 0.0)] * len(blocked),
                mode="markers+text",
                text=["−∞"] * len(blocked),
                textposition="top center",
                textfont=dict(size=13, color="#495057"),
                marker=dict(symbol="x", color="#6c757d", size=9),
                name="−∞ (masked)",
                hovertemplate="masked: −∞<extra></extra>",
            ),
            row=2,
            col=1,
        )
    fig.add_trace(
        go.Bar(x=x, y=w, marker_color="#1d3557", name="weight", hovertemplate="%{y:.4f}<extra></extra>"), row=3, col=1
    )
    fig.update_xaxes(**token_axis(k_tokens, ""), tickangle=-60)
    fig.update_xaxes(title=dict(text="key"), row=3, col=1)
    fig.update_layout(showlegend=False, bargap=0.15)
    fig = base_layout(fig, title, height=620)
    fig.update_layout(plot_bgcolor="white")
    return fig


# ----------------------------------------------------------------------------- decoding
def topk_bars(top_k: Sequence[tuple[str, float]], chosen: str, *, title: str) -> go.Figure:
    """Horizontal bars of the top-k next-token candidates; the chosen piece is highlighted. When the best one
    takes nearly everything the axis is logarithmic, so the others stay visible (with their exact shares)."""
    labels = [f"{r + 1}. {token_label(p)}" for r, (p, _) in enumerate(top_k)]
    probs = [float(f"{float(q):.4g}") for _, q in top_k]  # four significant digits: small ones stay non-zero
    colours = ["#e4572e" if p == chosen else "#5fa8d3" for p, _ in top_k]
    fig = go.Figure(
        go.Bar(
            x=probs,
            y=labels,
            orientation="h",
            marker_color=colours,
            text=[share(q) for q in probs],
            textposition="auto",
            hovertemplate="%{y}: %{x:.3g}<extra></extra>",
        )
    )
    base_layout(fig, title, height=max(260, 26 * len(labels) + 110))
    fig.update_layout(plot_bgcolor="white")
    positive = [q for q in probs if q > 0]
    if positive and min(positive) < max(positive) / 100:
        low = np.log10(min(positive)) - 0.3
        fig.update_xaxes(title=dict(text="probability (log scale)"), type="log", range=[low, 0.05])
    else:
        fig.update_xaxes(title=dict(text="probability"), range=[0, max(probs + [0.01]) * 1.1])
    fig.update_yaxes(autorange="reversed", type="category")
    return fig


def ssru_gates(gates: np.ndarray, tokens: Sequence[str], *, title: str) -> go.Figure:
    """SSRU forget gates (T, D): heatmap positions × dimensions, plus the mean gate per step."""
    z = rounded(gates)
    fig = make_subplots(
        rows=2,
        cols=1,
        row_heights=[0.72, 0.28],
        vertical_spacing=0.08,
        subplot_titles=("forget gate f_t per dimension (1 = keep memory, 0 = overwrite)", "mean forget gate per step"),
    )
    fig.add_trace(
        go.Heatmap(
            z=z.T,
            x=list(range(z.shape[0])),
            colorscale="Viridis",
            zmin=0.0,
            zmax=1.0,
            colorbar=dict(title=dict(text="f"), len=0.7, y=0.64),
            hovertemplate="step %{x}<br>dim %{y}<br>f %{z:.4f}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=list(range(z.shape[0])),
            y=rounded(z.mean(axis=1)),
            mode="lines+markers",
            line=dict(color="#1d3557"),
            hovertemplate="step %{x}: %{y:.4f}<extra></extra>",
        ),
        row=2,
        col=1,
    )
    for r in (1, 2):
        fig.update_xaxes(
            **token_axis(tokens, "decoder input" if r == 2 else ""), tickangle=-60, showticklabels=r == 2, row=r, col=1
        )
    fig.update_yaxes(title=dict(text="dimension"), row=1, col=1)
    fig.update_yaxes(range=[0, 1], row=2, col=1)
    fig.update_layout(showlegend=False)
    return base_layout(fig, title, height=560)


LEGEND_ROW = 28  # px for a one-row horizontal legend above the plot area
LEGEND_NAME = 30  # a legend entry longer than this is named generically (a long list of switches would wrap)
FULL_TITLE = 100  # characters a title may take on a line across the page (about 820 px at 1280 px wide)


def token_logprob_bars(tokens: Sequence[str], p_trained: np.ndarray, p_switched: np.ndarray, *, note: str) -> go.Figure:
    """Grouped bars: each output piece's log-probability as trained and with the switches (same decoder inputs)."""
    floor = -30.0  # log(0) would be -inf: drawn at the floor, with the exact value on hover
    lp = [np.maximum(np.log(np.clip(p, 1e-300, None)), floor) for p in (p_trained, p_switched)]
    x = [f"{i + 1} {html.escape(t)}" for i, t in enumerate(tokens)]
    switched = note if len(note) <= LEGEND_NAME else "with the switches"  # the title names them all
    fig = go.Figure(
        [
            go.Bar(x=x, y=lp[0], name="as trained", marker_color="#4c72b0", customdata=p_trained),
            go.Bar(x=x, y=lp[1], name=html.escape(switched), marker_color="#dd8452", customdata=p_switched),
        ]
    )
    fig.update_traces(hovertemplate="%{x}<br>log p %{y:.3f} (p %{customdata:.4f})<extra>%{fullData.name}</extra>")
    base_layout(
        fig,
        titled("Log-probability of each as-trained output piece: as trained (blue) and with the switches", note),
        height=320,
        wrap=FULL_TITLE,
        top=LEGEND_ROW,
    )
    # the legend sits in its own row between the title and the plot area (inside it, it covered the last bars)
    fig.update_layout(barmode="group", legend=dict(orientation="h", x=0, xanchor="left", y=1.0, yanchor="bottom"))
    fig.update_yaxes(title=dict(text="log p"))
    return fig
