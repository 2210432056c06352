"""What does each head do? Statistics and labels per head, word alignment from cross-attention, and which
cross heads align words best against hand-aligned gold sentences."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import core
from core.analysis.alignment import AlignmentScores, Method, links, word_matrix, word_spans
from core.analysis.head_spread import HeadSpread
from core.analysis.heads import ALIGNMENT_AER, LABEL_RULES, STAT_TITLES, STATS, HeadStatistics, sentence_statistics
from viz_app.figures import head_roles
from viz_app.session import checkpoints, errors, params, runs, selection, trace_replay, url
from viz_app.widgets import export, header, heads_over_set, sentence_bar

st.title("What does each head do?")
st.caption(
    "Each head has habits: some look at the previous word, some at the end of the sentence, some spread "
    "their attention thin, and some cross-attention heads line up each output word with the source word it "
    "translates. Here every head is measured, labelled with the evidence, and the cross-attention heads are "
    "scored as word aligners against sentences aligned by hand."
)

with st.expander("How to read this", icon=":material/help:"):
    rules = "\n".join(
        f"- **{label}**: {stat} ≥ {threshold} ({', '.join(kinds)})" for label, stat, threshold, kinds in LABEL_RULES
    )
    st.markdown(
        "**Statistics** (the mean over query rows; a row that may see one key only says nothing and is left out): "
        + "; ".join(f"*{s}* = {STAT_TITLES[s]}" for s in STATS)
        + ". For cross-attention the diagonal is scaled onto the source sentence, and there is no previous/next "
        "token.\n\n**Labels** — a head gets every label whose rule holds:\n"
        + rules
        + f"\n- **alignment** (cross-attention): its word alignment has an error rate (AER) ≤ {ALIGNMENT_AER} "
        "on the hand-aligned sentences.\n\n"
        "**Alignment**: a cross-attention row is where the decoder predicted the next output piece, so output "
        "word *w* is linked to the source word its row (shift 0) attends to most (argmax), or to every source "
        "word with at least 30 % of its weight (threshold). **AER** (alignment error rate, Och & Ney 2003) is "
        "0 for a perfect match with the hand-made links and 1 for none; 'possible' links are not counted as "
        "errors. Heads trained with guided alignment (Marian's production models: layer last, head 1) score "
        "far better than the rest — that is the head CTranslate2 and Marian read alignments from by default."
    )


out = sentence_bar.sentence_bar()
if out is not None:
    header.translation_header(out)
    replaying = trace_replay.replay() is not None
    path = "" if replaying else checkpoints.ckpt_path()
    url.clamp("heads_scope", ["sentence", "set"])
    scope = st.radio(
        "Statistics over",
        ["sentence", "set"],
        key="heads_scope",
        horizontal=True,
        format_func=lambda s: "this sentence" if s == "sentence" else "the built-in set (240 sentences, as trained)",
        disabled=replaying,
    )
    stats: HeadStatistics | None
    spread: HeadSpread | None = None
    if scope == "set" and not replaying:
        survey = errors.guarded(lambda: runs.head_spread(path))
        stats, spread = (survey[0], survey[1]) if survey else (None, None)
        if survey:
            st.caption(
                f"Over the greedy translations of {survey[0].n_sentences} built-in {survey[2]} sentences "
                "(measured once per checkpoint and kept on disk)."
            )
    else:
        stats = HeadStatistics.from_trace(out.trace) or sentence_statistics(out.trace)
    scores: AlignmentScores | None = None
    if not replaying:
        scores = errors.guarded(lambda: runs.alignment(path))
    elif "alignment" in out.trace.meta.get("analysis", {}):
        scores = AlignmentScores.from_dict(out.trace.meta["analysis"]["alignment"])
    if stats is not None:
        if scores is not None:
            stats = stats.with_alignment(scores.head_aer)
        st.subheader("Every head, one statistic at a time")
        url.clamp("heads_stat", list(STATS))
        stat = st.selectbox("Statistic", list(STATS), key="heads_stat", format_func=lambda s: STAT_TITLES[s])
        stabilities = spread.stability(stats) if spread is not None else []
        labels_by_kind: dict[str, dict[tuple[int, int], list[str]]] = {}
        for x in stats.labels():
            labels_by_kind.setdefault(x.kind, {}).setdefault((x.layer, x.head), []).append(x.label)
        tabs = st.tabs([params.KINDS[k].capitalize() for k in stats.kinds])
        for tab, kind in zip(tabs, stats.kinds, strict=True):
            with tab:
                export.chart(
                    head_roles.stat_heatmap(
                        stats.mean(kind, stat),
                        title=f"{params.KINDS[kind].capitalize()}: {STAT_TITLES[stat]}",
                        value_name=stat,
                        labels=labels_by_kind.get(kind, {}),
                        unsteady={(x.layer, x.head, x.label) for x in stabilities if x.kind == kind and not x.steady},
                        zmax=1.0 if stat != "distance" else None,
                    ),
                    f"heads-{kind}-{stat}",
                    key=f"stat_{kind}",
                )
                if spread is not None:
                    heads_over_set.spread_maps(spread, kind, stat)
        st.caption("The words in the squares are the heads' labels (hover for the evidence).")
        table = head_roles.head_table(stats.table(), params.KINDS)
        st.dataframe(
            table.frame.style.format(precision=3),
            width="stretch",
            hide_index=True,
            height=320,
            column_config={
                c: st.column_config.Column(
                    help=table.help.get(c),
                    width=table.widths.get(c),
                    alignment="right" if c in table.as_text else None,
                )
                for c in table.help.keys() | table.widths.keys()
            },
        )
        st.caption(" ".join(x for x in ("Click a column's name to sort by it.", table.note) if x))
        if spread is not None:
            heads_over_set.stability(stabilities, spread.n_sentences)

    st.subheader("Word alignment from cross-attention")
    trace = out.trace
    n_layers, n_heads = trace.n_layers["cross"], trace.n_heads
    choices = ["best"] if scores is not None else []
    choices += [f"layer {i + 1}" for i in range(n_layers)] + ["all"]
    choices += [f"L{i + 1} H{h + 1}" for i in range(n_layers) for h in range(n_heads)]
    url.clamp("align_by", choices)

    def _name(c: str) -> str:
        if c == "best" and scores is not None:
            return f"best head on the gold sentences (L{scores.best_head[0] + 1} H{scores.best_head[1] + 1})"
        return {"all": "every cross head averaged"}.get(c, c + (" (heads averaged)" if c.startswith("layer") else ""))

    c1, c2, c3 = st.columns([2, 1, 1])
    by = c1.selectbox("Read the alignment from", choices, key="align_by", format_func=_name)
    methods: list[Method] = ["argmax", "threshold"]
    method = c2.radio("Links", methods, key="align_method", horizontal=True)
    shift = c3.radio(
        "Row", [0, 1], key="align_shift", horizontal=True, format_func=lambda s: "predicting" if s == 0 else "input"
    )
    if by == "best" and scores is not None:
        cross = trace.attention("cross", scores.best_head[0])[scores.best_head[1]]
    elif by == "all":
        cross = np.mean([trace.attention("cross", i).mean(0) for i in range(n_layers)], axis=0)
    elif by.startswith("layer"):
        cross = trace.attention("cross", int(by.split()[1]) - 1).mean(0)
    else:
        layer_s, head_s = by.split()
        cross = trace.attention("cross", int(layer_s[1:]) - 1)[int(head_s[1:]) - 1]
    src, tgt = trace.src_tokens, trace.output_tokens
    matrix = word_matrix(cross, src, tgt, shift=int(shift))
    found = links(matrix, method)
    src_words = ["".join(src[i] for i in w).replace("▁", "") for w in word_spans(src)]
    tgt_words = ["".join(tgt[i] for i in w).replace("▁", "") for w in word_spans(tgt)]
    if not tgt_words or not src_words:
        st.info("The translation is empty: there are no words to align.", icon=":material/info:")
    else:
        left, right = st.columns([3, 2])
        with left:
            export.chart(
                head_roles.alignment_links(src_words, tgt_words, found, title=f"Links read from {_name(by)}"),
                "alignment-links",
                key="align_links",
            )
        with right:
            export.chart(
                head_roles.alignment_matrix(matrix, src_words, tgt_words, found, title="Alignment matrix"),
                "alignment-matrix",
                key="align_matrix",
            )

    st.subheader("Which cross-attention heads align words?")
    if scores is None and replaying:
        st.info("This saved trace holds no alignment scores (export it from this page to keep them).")
    elif scores is None:
        bundle = selection.bundle()
        pair = "→".join(bundle.languages) if bundle is not None else "these languages"
        st.info(
            f"There are no hand-aligned sentences for {pair}, so the heads cannot be scored here. "
            "`python -m core heads --checkpoint … --gold FILE` scores them on yours (format in the README).",
            icon=":material/info:",
        )
    else:
        layer, head = scores.best_head
        m1, m2, m3 = st.columns(3)
        m1.metric(f"Best head · AER {scores.head_aer[layer, head]:.3f}", f"L{layer + 1} H{head + 1}")
        combo = " + ".join(f"L{a + 1}H{b + 1}" for a, b in scores.best_k)
        m2.metric(f"Best combination · AER {scores.best_k_aer:.3f}", combo)
        m3.metric("Every cross head averaged", f"AER {scores.all_aer:.3f}")
        export.chart(
            head_roles.stat_heatmap(
                scores.head_aer,
                title=f"AER of each cross head on {scores.n_pairs} hand-aligned sentence pairs (lower is better)",
                value_name="AER",
                zmax=1.0,
                reverse=True,
            ),
            "alignment-aer",
            key="aer_map",
        )
        rows = [[f"layer {i + 1} average", v] for i, v in enumerate(scores.layer_aer)]
        rows += [[f"baseline: {k}", v] for k, v in scores.baselines.items()]
        st.dataframe(pd.DataFrame(rows, columns=["read from", "AER"]).round(3), hide_index=True)
        st.caption(
            f"The gold sentences' targets are the checkpoint's own translations (for other checkpoints of the same "
            f"languages, and read in reverse for the opposite direction, the gold target is fed to the decoder). "
            f"Shift {scores.shift}, {scores.method}."
        )
    if not replaying and stats is not None:
        arrays, details = stats.to_arrays()
        extra = {"alignment": scores.to_dict()} if scores is not None else {}
        export.export_trace(core.Translation(out.trace.with_analysis(arrays, {**details, **extra})))
        st.caption("The export holds these statistics and alignment scores; opened again, they replay here.")
