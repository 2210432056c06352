"""The Model map page's numbers: the parameter accounting as tables (every block with its formula, every layer,
the total), the paper's table 3 beside the current model, and the decoding cost with and without the key/value
cache — each sentence that states an outcome built here from ``core.anatomy``'s results.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core import sites
from core.anatomy import DecodingCost, MeasuredSteps, PaperCount, ParameterTable, parameter_table
from core.anatomy import paper as paper_module
from viz_app.figures.style import base_layout

CACHED, UNCACHED = "#2a9d8f", "#e4572e"
SELF_KV, CROSS_KV, STATE = "#457b9d", "#a8dadc", "#f4a261"


# ----------------------------------------------------------------------------- parameters
def layer_name(group: str) -> str:
    """A block's group (or any name inside a layer) as the pages count layers: 'encoder.0' -> 'encoder layer 1',
    'decoder.1.cross.heads' -> 'decoder layer 2'; a name outside the layers ('embeddings') stays."""
    where = sites.parse_layer(group)
    return f"{where[0]} layer {where[1] + 1}" if where else group


def block_frame(table: ParameterTable) -> pd.DataFrame:
    """One row per block, in the order data flows: its layer, what it is, the formula, the formula with this
    model's numbers, what it adds to the total (0 for a second use of a shared matrix) and which block counts it."""
    return pd.DataFrame(
        {
            "layer": [layer_name(b.group) for b in table.blocks],
            "block": [b.label for b in table.blocks],
            "formula": [b.formula for b in table.blocks],
            "with this model's numbers": [b.numbers for b in table.blocks],
            "parameters": [b.count for b in table.blocks],
            "shared": [
                f"same matrix as {table.block(b.shared_with).label}: counted there" if b.shared_with else ""
                for b in table.blocks
            ],
        }
    )


def layer_frame(table: ParameterTable) -> pd.DataFrame:
    """One row per group ('embeddings', 'encoder layer 1', …, 'output') with the sum of its blocks' formulas and its
    count, then the total (the model's ``sum(p.numel())``) and each group's share of it."""
    groups: dict[str, list] = {}
    for b in table.blocks:
        groups.setdefault(b.group, []).append(b)
    names, formulas, counts = [], [], []
    for group, blocks in groups.items():
        names.append(layer_name(group))
        counted = [b for b in blocks if b.count]
        formulas.append(" + ".join(f"({b.formula})" if "+" in b.formula else b.formula for b in counted) or "0")
        counts.append(sum(b.count for b in blocks))
    names.append("total")
    formulas.append("")
    counts.append(table.total)
    share = [f"{c / table.total:.1%}" if table.total else "" for c in counts]
    return pd.DataFrame({"layer": names, "formula": formulas, "parameters": counts, "share": share})


def total_sentence(table: ParameterTable, numel: int) -> str:
    """What the accounting adds up to, against the model's own count."""
    shared = ", ".join(f"{b.label} (= {table.block(b.shared_with).label})" for b in table.shared if b.shared_with)
    same = (
        f"the same as the model's own count of its tensors (sum of p.numel(): {numel:,})"
        if table.total == numel
        else f"but the model's tensors hold {numel:,}: the accounting misses {numel - table.total:,}"
    )
    said = f"The blocks add up to **{table.total:,} parameters**, {same}."
    return said + (f" Counted once though used twice: {shared}." if shared else " No matrix is shared.")


# ----------------------------------------------------------------------------- the paper's table 3
def paper_frame(counts: Sequence[PaperCount]) -> pd.DataFrame:
    """Every row of table 3: its hyperparameters, the count by this accounting (millions), the paper's figure."""
    return pd.DataFrame(
        {
            "row": [c.row.label for c in counts],
            "N": [c.row.N for c in counts],
            "d_model": [c.row.d_model for c in counts],
            "d_ff": [c.row.d_ff for c in counts],
            "h": [c.row.h for c in counts],
            "d_k": [c.row.d_k for c in counts],
            "d_v": [c.row.d_v for c in counts],
            "counted (×10⁶)": [round(c.parameters / 1e6, 2) for c in counts],
            "printed (×10⁶)": [c.row.published for c in counts],
            "agrees": [_agrees(c) for c in counts],
        }
    )


def _agrees(c: PaperCount) -> str:
    if c.row.published is None:
        return "— (no figure printed)"
    return "✓" if c.matches else f"✗ ({c.millions})"


def paper_beside(count: PaperCount, current: ParameterTable, name: str) -> pd.DataFrame:
    """One row of table 3 and the current model side by side, counted the same way."""
    paper = parameter_table(paper_module.architecture(count.row, count.vocab))
    columns = {}
    for label, table in ((f"paper: {count.row.label}", paper), (f"this model: {name}", current)):
        arch, groups = table.architecture, table.group_totals()
        enc = groups.get(sites.layer_name("encoder", 0), 0)
        dec = groups.get(sites.layer_name("decoder", 0), 0)
        columns[label] = [
            f"{arch.src_vocab:,}" + ("" if arch.share_embeddings else f" / {arch.tgt_vocab:,}"),
            f"{arch.n_encoder_layers} + {arch.n_decoder_layers}",
            str(arch.d_model),
            str(arch.d_ff),
            f"{arch.n_heads} × {arch.d_k}",
            f"{arch.norm}-norm, {arch.decoder_self} decoder",
            f"{groups.get('embeddings', 0):,}",
            f"{enc:,}",
            f"{dec:,}",
            f"{table.total:,}",
        ]
    columns[f"paper: {count.row.label}"].append(str(count.row.published or "none printed"))
    columns[f"this model: {name}"].append("")
    index = [
        "vocabulary (shared)",
        "layers (encoder + decoder)",
        "d_model",
        "d_ff",
        "heads × d_k",
        "layout",
        "embeddings",
        "one encoder layer",
        "one decoder layer",
        "total",
        "paper's printed figure (×10⁶)",
    ]
    return pd.DataFrame(columns, index=index)


def vocabulary_sentence() -> str:
    """Which vocabulary reproduces the paper's printed figures, computed from ``core.anatomy.paper``."""
    rows = paper_module.TABLE_3
    base, big = paper_module.row("base"), paper_module.row("big")
    not_big = paper_module.common_vocab([r for r in rows if r.group != "big"])
    big_interval = paper_module.vocab_interval(big)
    both = paper_module.common_vocab([base, big])
    at_paper = paper_module.row_parameters(base, paper_module.PAPER_VOCAB) / 1e6
    said = (
        f'The paper names no exact vocabulary ("about {paper_module.PAPER_VOCAB:,} tokens"): at '
        f"{paper_module.PAPER_VOCAB:,} the base model counts {at_paper:.1f} million, not {base.published}. "
    )
    if not_big is not None:
        said += (
            f"Every printed figure but big's is reproduced by any shared vocabulary from {not_big[0]:,} to "
            f"{not_big[1]:,} (the rows are counted at {paper_module.fitted_vocab():,}). "
        )
    if big_interval is not None:
        said += f"Big's {big.published} needs {big_interval[0]:,} to {big_interval[1]:,}, "
        said += (
            f"so **no single vocabulary gives both base's {base.published} and big's {big.published}**."
            if both is None
            else f"and {both[0]:,} to {both[1]:,} gives both base's and big's."
        )
    return said


# ----------------------------------------------------------------------------- decoding cost
def cost_figure(cost: DecodingCost, measured: MeasuredSteps | None = None, *, title: str) -> go.Figure:
    """Per decoding step: what the decoder keeps (bytes, per layer: self-attention K/V growing, the source's K/V,
    an SSRU's cell), the multiply-adds with and without the cache, and (``measured``) the time each way."""
    steps = (cost.steps + 1).tolist()
    n = 3 if measured is not None else 2
    names = ["kept between steps, per layer (bytes)", "multiply-adds per step (all layers)"]
    names += ["measured time per step (ms)"] if measured is not None else []
    fig = make_subplots(rows=1, cols=n, subplot_titles=names, horizontal_spacing=0.08)
    kept = [
        ("self-attention K, V (grows)", cost.self_kv_bytes, SELF_KV),
        ("cross-attention K, V of the source", np.full(cost.out_len, cost.cross_kv_bytes), CROSS_KV),
        ("SSRU cell c", np.full(cost.out_len, cost.state_bytes), STATE),
    ]
    for name, values, colour in kept:
        if np.any(values):
            fig.add_trace(go.Bar(x=steps, y=values, name=name, marker_color=colour), row=1, col=1)
    for name, values, colour in (
        ("with the cache", cost.macs_cached, CACHED),
        ("without", cost.macs_uncached, UNCACHED),
    ):
        fig.add_trace(
            go.Scatter(x=steps, y=values, name=f"work {name}", mode="lines+markers", line=dict(color=colour, width=3)),
            row=1,
            col=2,
        )
    if measured is not None:
        for name, values, colour in (
            ("with the cache", measured.cached, CACHED),
            ("without", measured.uncached, UNCACHED),
        ):
            fig.add_trace(
                go.Scatter(
                    x=list(range(1, measured.out_len + 1)), y=np.round(values * 1e3, 3), name=f"time {name}",
                    mode="lines+markers", line=dict(color=colour, width=3, dash="dot"),
                ),
                row=1,
                col=3,
            )  # fmt: skip
    base_layout(fig, title, height=440)
    fig.update_layout(barmode="stack", legend=dict(orientation="h", y=-0.22, yanchor="top", x=0, font=dict(size=13)))
    fig.update_xaxes(title=dict(text="decoding step"), dtick=1 if cost.out_len <= 20 else None)
    fig.update_layout(margin=dict(b=110))
    return fig


def cache_sentence(cost: DecodingCost) -> str:
    """How the key/value cache grows over this translation (or what an SSRU decoder keeps instead)."""
    last = int(cost.cache_bytes[-1])
    layers = f"{cost.n_layers} decoder layer{'s' if cost.n_layers != 1 else ''}"
    if cost.decoder_self == "ssru":
        return (
            f"This SSRU decoder keeps no growing cache: per layer a cell of {cost.state_bytes:,} bytes, overwritten "
            f"each step, beside the source's K and V ({cost.cross_kv_bytes:,} bytes) — {last:,} bytes for its "
            f"{layers}, the same at every one of the {cost.out_len} steps."
        )
    growth = int(cost.self_kv_bytes[1] - cost.self_kv_bytes[0]) if cost.out_len > 1 else int(cost.self_kv_bytes[0])
    return (
        f"Each step adds one position's K and V, {growth:,} bytes per layer; with the source's K and V "
        f"({cost.cross_kv_bytes:,} bytes per layer, made at the first step) the cache grows from "
        f"{int(cost.cache_bytes[0]):,} to **{last:,} bytes** by the last step ({cost.out_len}) over its {layers}."
    )


def work_sentence(cost: DecodingCost) -> str:
    """How much more work decoding this sentence does without the cache."""
    cached, uncached = int(cost.macs_cached.sum()), int(cost.macs_uncached.sum())
    if uncached <= cached:
        return (
            f"With one step the cache saves nothing yet: both ways do {cached:,} multiply-adds (the cache pays off "
            "from the second step on)."
        )
    last = float(cost.macs_uncached[-1] / cost.macs_cached[-1])
    return (
        f"Without the cache the decoder does **{cost.saving:.1f}× the work** for this sentence ({uncached:,} "
        f"multiply-adds instead of {cached:,}); at the last step alone {last:.1f}×, and the gap grows with every "
        f"step. The encoder runs once either way ({cost.encoder_macs:,})."
    )


def timing_sentence(measured: MeasuredSteps) -> str:
    """What the measurement found on this machine."""
    cached, uncached = float(measured.cached.sum()), float(measured.uncached.sum())
    ratio = uncached / cached if cached > 0 else float("nan")
    faster = "faster" if ratio > 1 else "slower"
    return (
        f"Measured on this machine ({measured.device}, {measured.threads} thread{'s' if measured.threads != 1 else ''}"
        f", median of {measured.repeats}): the {measured.out_len} steps took {cached * 1e3:.1f} ms with the cache "
        f"and {uncached * 1e3:.1f} ms without — the cache was {ratio:.1f}× {faster} here (the encoder: "
        f"{measured.encoder * 1e3:.1f} ms, once either way). Times vary with the machine's load."
    )


def layout_sentence(table: ParameterTable) -> str:
    """How this model's layers are arranged, as its config says (what the flow draws)."""
    arch = table.architecture
    norm = (
        "pre-norm: each sub-layer reads LayerNorm(x) and adds its output to x; each stack ends with a LayerNorm"
        if arch.norm == "pre"
        else "post-norm, as in the paper: LayerNorm(x + sub-layer(x)) after each sub-layer"
    )
    decoder = (
        "the decoder's self-attention is replaced by an SSRU (a simple recurrent unit: no causal mask, no K/V cache)"
        if arch.decoder_self == "ssru"
        else "the decoder's self-attention is masked (causal)"
    )
    tied = "the output projection is the token embedding matrix" if arch.tie_output else "the output has its own matrix"
    shared = (
        "source and target share one embedding matrix" if arch.share_embeddings else "each side has its own embeddings"
    )
    return f"This model is {norm}; {decoder}; {shared}; {tied}."


def paper_verdict(count: PaperCount) -> str:
    """One row of table 3: its count at the vocabulary used, against the printed figure."""
    counted = (
        f"By this accounting **{count.row.label}** has **{count.parameters:,}** parameters at a shared "
        f"vocabulary of {count.vocab:,}"
    )
    if count.row.published is None:
        said = f"{counted} ({count.millions} million). The paper prints no parameter figure for this row."
        return said + " " + bias_sentence(count)
    agree = "which rounds to the printed figure" if count.matches else "which does not round to the printed figure"
    interval = count.vocab_interval
    needs = (
        f" The printed {count.row.published} million needs a vocabulary from {interval[0]:,} to {interval[1]:,}."
        if interval
        else ""
    )
    said = f"{counted}: {count.millions} million, {agree} of **{count.row.published} million**.{needs}"
    return said + " " + bias_sentence(count)


def bias_sentence(count: PaperCount) -> str:
    """One encoder layer of the row without and with biases on the attention projections (the lab's have them)."""
    layer = {
        bias: parameter_table(paper_module.architecture(count.row, count.vocab, attention_bias=bias)).group_totals()[
            sites.layer_name("encoder", 0)
        ]
        for bias in (False, True)
    }
    return (
        f"One encoder layer (d_model {count.row.d_model}, d_ff {count.row.d_ff}) holds {layer[False]:,} parameters "
        f"as the paper's equations write it (no biases in the attention projections), {layer[True]:,} with them, "
        "as this lab's models have."
    )


def paper_figure(counts: Sequence[PaperCount]) -> go.Figure:
    """Each row of table 3: counted (millions) beside the printed figure where the paper prints one."""
    labels = [c.row.label for c in counts]
    fig = go.Figure(
        [
            go.Bar(
                x=labels,
                y=[round(c.parameters / 1e6, 2) for c in counts],
                name=f"counted (V = {counts[0].vocab:,})",
                marker_color="#457b9d",
            ),
            go.Bar(x=labels, y=[c.row.published for c in counts], name="printed in the paper", marker_color="#e9c46a"),
        ]
    )
    base_layout(fig, "Table 3: parameters (millions), counted and printed", height=380, top=30)
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0))
    fig.update_xaxes(tickangle=-40)
    fig.update_yaxes(title=dict(text="×10⁶ parameters"))
    return fig
