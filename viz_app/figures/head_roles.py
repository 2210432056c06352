"""Pure builders for "What does each head do?": a statistic per head, word alignments, and the table of every head.

Nothing here knows about Streamlit."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from core.analysis.heads import STAT_TITLES, STATS
from viz_app.figures.style import DECIMALS, HOVER_TEXT_MAX, TITLE_TOP, WEIGHTS_SCALE, base_layout, token_axis

SHORT = {  # a label's few letters, written in its square
    "previous-token": "prev",
    "next-token": "next",
    "self/diagonal": "self",
    "EOS sink": "eos",
    "first-token sink": "1st",
    "punctuation": "punct",
    "broad/uniform": "broad",
    "alignment": "align",
}


def stat_heatmap(
    matrix: np.ndarray,
    *,
    title: str,
    value_name: str,
    labels: Mapping[tuple[int, int], Sequence[str]] | None = None,
    unsteady: AbstractSet[tuple[int, int, str]] = frozenset(),
    zmax: float | None = None,
    reverse: bool = False,
) -> go.Figure:
    """(layers, heads) values of one statistic, each square carrying its heads' labels (short) and, on hover,
    the value and the labels in full; a (layer, head, label) in ``unsteady`` (its label holds on too few sentences
    alone, ``core.analysis.head_spread``) is marked "?". NaN (undefined for this kind) is left blank. ``reverse``:
    low is dark (for error rates)."""
    n_layers, n_heads = matrix.shape
    z = np.round(matrix.astype(np.float64), DECIMALS)
    labels = labels or {}
    finite = z[np.isfinite(z)]
    top = zmax if zmax is not None else (float(finite.max()) if finite.size else 1.0)
    hover, text = [], []
    for layer in range(n_layers):
        hover_row, text_row = [], []
        for h in range(n_heads):
            found = list(labels.get((layer, h), ()))
            mark = ["?" if (layer, h, x) in unsteady else "" for x in found]
            value = "not defined for this kind" if np.isnan(z[layer, h]) else f"{value_name} {z[layer, h]:.3f}"
            named = ", ".join(x + m for x, m in zip(found, mark, strict=True)) or "no label"
            hover_row.append(f"layer {layer + 1} · head {h + 1}<br>{value}<br>{named}")
            text_row.append(" ".join(SHORT.get(x, x) + m for x, m in zip(found, mark, strict=True)))
        hover.append(hover_row)
        text.append(text_row)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[f"H{h + 1}" for h in range(n_heads)],
            y=[f"L{layer + 1}" for layer in range(n_layers)],
            customdata=hover,
            text=text,
            texttemplate="%{text}",
            textfont=dict(size=10),
            hovertemplate="%{customdata}<extra></extra>",
            colorscale=WEIGHTS_SCALE + ("_r" if reverse else ""),
            zmin=0.0,
            zmax=max(top, 1e-6),
            xgap=2,
            ygap=2,
            colorbar=dict(title=dict(text=value_name)),
        )
    )
    base_layout(fig, title, height=int(max(220, 38 * n_layers + 150)))
    fig.update_yaxes(autorange="reversed")
    return fig


WORD_FONT = 12  # px, the words of the link diagram
WORD_ROW = 22  # px between two neighbouring words of a column (a 12 px line is about 15 px tall)
CHAR_PX = 7.5  # px a character may take at 12 px (generous: wide letters and accents)
WORD_MAX = 24  # characters of a word written in the diagram; a longer one is cut with '…' (hover has it whole)


def word_label(word: str) -> str:
    """A word as the link diagram writes it: cut to ``WORD_MAX`` characters, HTML-escaped."""
    cut = word if len(word) <= WORD_MAX else word[: WORD_MAX - 1] + "…"
    return html.escape(cut, quote=False)


def label_px(word: str) -> int:
    """Width in px that a word of the diagram may take (an estimate that errs wide)."""
    return int(np.ceil(min(len(word), WORD_MAX) * CHAR_PX))


def alignment_links(
    src_words: Sequence[str],
    tgt_words: Sequence[str],
    links: set[tuple[int, int]],
    *,
    title: str,
    gold: tuple[set[tuple[int, int]], set[tuple[int, int]]] | None = None,
) -> go.Figure:
    """The source sentence down the left, the translation down the right, a line per link (source word i, target
    word j). One word per line, ``WORD_ROW`` px apart, so words never run into each other at any sentence length
    (side by side in a row they did: 'lighthousekeeper'); the figure grows taller instead, and the side margins are
    as wide as the longest word.

    With ``gold`` (sure, possible): links that are sure are solid green, possible dashed green, wrong red;
    gold links the heads missed are grey dotted."""
    n = max(len(src_words), len(tgt_words), 1)
    ys = np.linspace(0, n - 1, len(src_words)) if len(src_words) > 1 else np.array([0.0])
    yt = np.linspace(0, n - 1, len(tgt_words)) if len(tgt_words) > 1 else np.array([0.0])
    fig = go.Figure()
    sure, possible = gold if gold is not None else (set(), set())

    groups: dict[tuple[str, str, str], list[tuple[int, int]]] = {}  # one trace per colour and dash, not per link

    def line(i: int, j: int, colour: str, dash: str, name: str) -> None:
        groups.setdefault((colour, dash, name), []).append((i, j))

    for i, j in sorted(links):
        if gold is None:
            line(i, j, "#1f77b4", "solid", "link")
        elif (i, j) in sure:
            line(i, j, "#2a9d3f", "solid", "sure in gold")
        elif (i, j) in possible:
            line(i, j, "#2a9d3f", "dash", "possible in gold")
        else:
            line(i, j, "#d62728", "solid", "not in gold")
    for i, j in sorted(sure - links):
        line(i, j, "#9a9a9a", "dot", "gold link missed")
    for (colour, dash, name), pairs in groups.items():
        x: list[float | None] = []
        y: list[float | None] = []
        text: list[str] = []
        for i, j in pairs:  # segments separated by gaps (None)
            label = f"{html.escape(src_words[i])} → {html.escape(tgt_words[j])} ({name})"
            x += [0.0, 1.0, None]
            y += [float(ys[i]), float(yt[j]), None]
            text += [label, label, ""]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines",
                line=dict(color=colour, width=2.5, dash=dash),
                hoverinfo="text",
                text=text,
                name=name,
                showlegend=False,
            )
        )
    for side, (xpos, ypos, words) in enumerate(((0.0, ys, src_words), (1.0, yt, tgt_words))):
        fig.add_trace(
            go.Scatter(
                x=[xpos] * len(words),
                y=list(ypos),
                mode="markers+text",
                text=[word_label(w) for w in words],
                hovertext=[
                    f"{'source' if side == 0 else 'target'} word {k + 1}: {html.escape(w)}" for k, w in enumerate(words)
                ],
                textposition="middle left" if side == 0 else "middle right",
                textfont=dict(size=WORD_FONT, color="#222"),
                marker=dict(size=7, color="#333"),
                hoverinfo="text",
                cliponaxis=False,  # the words stand in the side margins, outside the plot area
                name="source words" if side == 0 else "target words",
                showlegend=False,
            )
        )
    base_layout(fig, title, height=max(n * WORD_ROW, 120) + TITLE_TOP + 10)  # plot area: a row per word
    pad = 16  # the marker, and a gap between it and its word
    left = max((label_px(w) for w in src_words), default=0) + pad
    right = max((label_px(w) for w in tgt_words), default=0) + pad
    fig.update_layout(margin=dict(l=10 + left, r=10 + right, b=10))
    fig.update_xaxes(visible=False, range=[0.0, 1.0], fixedrange=True)
    fig.update_yaxes(visible=False, range=[n - 0.5, -0.5], fixedrange=True)  # first words on top
    head = dict(xref="paper", yref="paper", y=1.0, yanchor="bottom", showarrow=False, font=dict(size=12, color="#555"))
    fig.add_annotation(text="source", x=0.0, xanchor="right", xshift=-6, **head)
    fig.add_annotation(text="translation", x=1.0, xanchor="left", xshift=6, **head)
    return fig


MATRIX_X_TICKS = 16  # source words labelled at most on the alignment matrix's x axis (about 20 px apart)


def alignment_matrix(
    matrix: np.ndarray, src_words: Sequence[str], tgt_words: Sequence[str], links: set[tuple[int, int]], *, title: str
) -> go.Figure:
    """(target words, source words) weights, with a dot on each link. Beyond ``HOVER_TEXT_MAX`` cells the hover
    names word positions (1-based, as the axes do) instead of the words, and long axes label every k-th word."""
    z = np.round(matrix.astype(np.float64), DECIMALS)
    large = z.size > HOVER_TEXT_MAX
    first = 1 if large else 0  # 1-based coordinates where the hover names positions
    cells: dict[str, Any] = (
        dict(hovertemplate="target word %{y} ← source word %{x}<br>share %{z:.3f}<extra></extra>")
        if large
        else dict(
            customdata=[[f"{t} ← {s}" for s in src_words] for t in tgt_words],
            hovertemplate="%{customdata}<br>share %{z:.3f}<extra></extra>",
            xgap=1,
            ygap=1,
        )
    )
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(first, len(src_words) + first)),
            y=list(range(first, len(tgt_words) + first)),
            colorscale=WEIGHTS_SCALE,
            zmin=0.0,
            zmax=1.0,
            colorbar=dict(title=dict(text="share")),
            **cells,
        )
    )
    if links:
        i, j = zip(*sorted(links), strict=True)
        fig.add_trace(
            go.Scatter(
                x=[v + first for v in i],
                y=[v + first for v in j],
                mode="markers",
                marker=dict(color="#e4572e", size=8 if not large else 5),
                hoverinfo="skip",
                name="link",
            )
        )
    base_layout(fig, title, height=int(min(700, max(260, 26 * len(tgt_words) + 170))))
    # the matrix stands in a column two fifths wide: beyond MATRIX_X_TICKS words the labels ran into each other,
    # so every k-th is labelled, with its position (the axis title stays short: a long one would be cut)
    x_axis = token_axis(src_words, "source word", first=first, max_ticks=MATRIX_X_TICKS, note=False)
    fig.update_xaxes(**x_axis, tickangle=-45)
    fig.update_yaxes(**token_axis(tgt_words, "target word", first=first), autorange="reversed")
    fig.update_layout(showlegend=False)
    return fig


# ----------------------------------------------------------------------------- the table of every head
MISSING = "—"  # a cell with no value (pandas' NaN would be drawn as the word 'None')
AER = "alignment AER"


@dataclass(frozen=True)
class HeadTable:
    """The table of every head: ``frame`` (one row per head; the labels right after the head's name so they are
    seen without scrolling), ``help`` (column -> what it holds and, where some cells are empty, why), ``widths``
    (column -> px, for the text columns: sized by their longest cell, as the grid sizes them by the first rows only
    and cut 'EOS sink' to 'EOS sin') and ``note`` (a line under the table, '' when every cell has a value)."""

    frame: pd.DataFrame
    help: dict[str, str]
    widths: dict[str, int]
    note: str
    as_text: tuple[str, ...] = ()  # number columns with a missing value, written as text (see ``numbers_as_text``)


def missing_reason(column: str, kind: str) -> str:
    """Why the statistic ``column`` has no value for a head of ``kind``."""
    if column == AER:
        if kind != "cross":
            return "only cross-attention heads are scored as word aligners"
        return "the hand-aligned gold sentences gave this head no score"
    if kind == "cross" and column in ("previous", "next"):
        return "cross-attention has no previous or next token (its keys are the source)"
    if kind == "decoder" and column == "next":
        return "the causal mask hides the next token from the decoder"
    return "no query row defines it (a row that may see one key only is left out)"


def head_table(rows: Sequence[Mapping[str, Any]], kind_names: Mapping[str, str]) -> HeadTable:
    """``HeadStatistics.table()`` rows as the page shows them: the kind by its short name ('cross', the column's help
    names each in full from ``kind_names``), each missing value's reason in its column's help, by kind ('— for
    cross: cross-attention has no previous or next token …')."""
    frame = pd.DataFrame(list(rows))
    if frame.empty:
        return HeadTable(frame, {}, {}, "")
    order = ["kind", "layer", "head", "labels", *[c for c in (*STATS, AER) if c in frame.columns], "evidence"]
    frame = frame[[c for c in order if c in frame.columns]]
    helps: dict[str, str] = {"labels": "What the head does, by the rules under 'How to read this'"}
    helps["evidence"] = "The statistic behind each label, and over how many query rows"
    for column in (*STATS, AER):
        if column not in frame.columns:
            continue
        what = STAT_TITLES.get(column, "alignment error rate on hand-aligned sentences, 0 = perfect (cross heads)")
        empty = frame[column].isna()
        reasons: dict[str, list[str]] = {}
        for kind in dict.fromkeys(frame.loc[empty, "kind"]):
            reasons.setdefault(missing_reason(column, kind), []).append(kind)
        said = "; ".join(f"{MISSING} for {' and '.join(kinds)}: {why}" for why, kinds in reasons.items())
        helps[column] = f"{what[0].upper()}{what[1:]}." + (f" {said}." if said else "")
    helps["kind"] = "; ".join(f"{k} = {kind_names.get(k, k)}" for k in dict.fromkeys(frame["kind"]))
    columns = [c for c in (*STATS, AER) if c in frame.columns and frame[c].isna().any()]
    note = (
        f"{MISSING} marks a statistic with no value for that head ({', '.join(columns)}); hover the column's name "
        "for why."
        if columns
        else ""
    )
    widths = {c: text_column_px(frame[c]) for c in ("kind", "labels", "evidence") if c in frame.columns}
    for c in columns:
        frame[c] = numbers_as_text(frame[c])
    return HeadTable(frame, helps, widths, note, tuple(columns))


def numbers_as_text(values: pd.Series, decimals: int = 3) -> list[str]:
    """A number column with gaps as text: '0.458', and ``MISSING`` for no value (Streamlit's table draws an empty
    number as the word 'None', whatever the formatting says). Padded on the left with spaces to one width, so that
    sorting the text still sorts by value (' 3.650' before '12.100'; '—' after every number)."""
    shown = [None if pd.isna(v) else f"{float(v):.{decimals}f}" for v in values]
    width = max((len(x) for x in shown if x is not None), default=0)
    return [MISSING if x is None else x.rjust(width) for x in shown]


TABLE_CHAR_PX = 7.5  # px a character of the table's 14 px font may take (errs wide)


def text_column_px(values: pd.Series, *, most: int = 480) -> int:
    """Width in px that shows a text column's longest cell and its name whole (at most ``most``)."""
    longest = max([len(str(values.name)), *(len(str(v)) for v in values)])
    return int(min(most, np.ceil(longest * TABLE_CHAR_PX) + 28))
