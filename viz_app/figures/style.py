"""Shared style of every figure: colours, fonts, token labels and axes, titles and layout.

Pure Plotly helpers: numpy arrays + token lists in, settings out. Conventions: rows are queries, columns are keys;
token axes use integer positions with the model's pieces as tick text (duplicate pieces stay distinct); values are
rounded to ``DECIMALS`` before they are sent to the browser; masked (−∞) scores become gaps.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from viz_app.claims import SAME_WEIGHT

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


# Characters a title may take on a line: a chart across the page at 1024 px with the sidebar open is about 660 px
# wide, one in a two-thirds column at 1280 px about 600 px (16 px bold: about 8 px a character); a chart in a third
# of the page (side by side with two others, or beside a wider one) is about 290 px at 1280 px.
TITLE_CHARS = 64
NARROW_TITLE = 32
TITLE_TOP = 70  # px above the plot area for a one-line title (it starts 20 px from the top)
TITLE_LINE = 22  # px each further title line takes (16 px font)
NO_CHANGE_TOL = SAME_WEIGHT  # one threshold: the grid's 'no change' and the caption's (viz_app/claims.py) agree
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


def base_layout(fig: go.Figure, title: str, height: int, *, wrap: int | None = TITLE_CHARS, top: int = 0) -> go.Figure:
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


def scaled_fonts(fig: go.Figure, factor: float) -> go.Figure:
    """A copy of ``fig`` with every font size set in it (the layout's, titles', ticks', annotations', traces' text)
    times ``factor``, and its height and top margin grown as much: the same figure for a projector."""
    spec = fig.to_dict()

    def grow(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key.endswith("font") and isinstance(value, dict) and isinstance(value.get("size"), int | float):
                    value["size"] = round(value["size"] * factor, 1)
                grow(value)
        elif isinstance(node, list):
            for item in node:
                grow(item)

    grow(spec)
    layout = spec.setdefault("layout", {})
    if isinstance(layout.get("height"), int | float):
        layout["height"] = int(layout["height"] * factor)
    margin = layout.get("margin", {})
    if isinstance(margin.get("t"), int | float):
        margin["t"] = int(margin["t"] * factor)
    return go.Figure(spec)


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


def weight_scale(*arrays: np.ndarray, fixed: bool = True) -> tuple[float, str]:
    """The lab's one colour policy for attention weights: (the top of the scale, the colour bar's title naming it).
    By default a fixed 0–1 scale, so that near-uniform attention (0.07 everywhere) looks faint as it is; stretched
    (``fixed`` False), 0 to the largest weight of ``arrays``, which the title then says."""
    if fixed:
        return 1.0, "weight<br>(0–1)"
    top = max((float(np.nanmax(a)) for a in arrays if np.isfinite(a).any()), default=1.0)
    top = max(top, 1e-6)
    return top, f"weight<br>(0–{top:.2g},<br>stretched)"


def symmetric_range(*arrays: np.ndarray) -> float:
    """Largest finite |value| over ``arrays`` (1.0 if none): the half-width of a symmetric colour scale."""
    finite = [np.abs(a[np.isfinite(a)]).max() for a in arrays if np.isfinite(a).any()]
    return float(max(finite)) if finite and max(finite) > 0 else 1.0


HOVER_TEXT_MAX = 64 * 64  # beyond this many cells a large map's hover names positions instead of tokens
LEGEND_ROW = 28  # px for a one-row horizontal legend above the plot area
LEGEND_NAME = 30  # a legend entry longer than this is named generically (a long list of switches would wrap)
