"""Compare two runs: run A (the sidebar's checkpoint, sentence and switches) beside run B (its own checkpoint,
sentence and switches), their translations and what changed between them, head by head."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import streamlit as st

import core
from core.analysis.compare import MEASURE, MEASURE_NOTE, Comparison, compare, shared_maps
from core.analysis.heads import kind_tokens
from core.inputs import MAX_CHARS
from viz_app import claims_compare
from viz_app.claims import md
from viz_app.compare import presets
from viz_app.compare.runs import RunB, checkpoint_b, run_b
from viz_app.figures import attention_maps, explain, head_roles, sources
from viz_app.session import checkpoints, errors, params, runs, selection, trace_replay, url
from viz_app.widgets import export, markup, scale, sentence_bar

st.title("Compare two runs")
st.caption(
    "Run **A** is the sidebar's: its checkpoint, this sentence and its switches. Run **B** changes one thing — "
    "another sentence (a minimal pair), another checkpoint (a student's teacher) or a switch — and the page shows "
    "both translations and how much each attention head changed between them."
)
TOP = 15  # heads in the ranked table


def _logprob(out: core.Translation) -> float:
    return float(sum(np.log(max(step.prob, 1e-45)) for step in out.steps))


def _run_b_controls(bundle: core.Bundle) -> None:
    language = bundle.languages[0]
    choices = presets.presets(language, bundle.info)
    st.selectbox(
        "Preset",
        list(choices),
        format_func=lambda k: choices[k],
        key="cmp_preset",
        on_change=lambda: presets.apply(str(st.session_state.get("cmp_preset", "")), language, bundle.info),
    )
    c1, c2 = st.columns([3, 2])
    c1.text_input("B's sentence (empty: A's)", key="text_b", max_chars=MAX_CHARS)
    names = ["", *checkpoints.checkpoint_names()]
    url.clamp("ckpt_b", names)
    c2.selectbox("B's checkpoint", names, key="ckpt_b", format_func=lambda n: n or "as A")
    c3, c4, c5 = st.columns(3)
    c3.selectbox("B's positional encoding", list(params.PE_B), key="pe_b", format_func=lambda v: params.PE_B[v])
    c4.selectbox(
        "B's causal mask", ["same", "on", "off"], key="causal_b", format_func=lambda v: "as A" if v == "same" else v
    )
    c5.checkbox(
        "B reads A's translation",
        key="forced_b",
        help="Where B reads the same source pieces with the same vocabulary, its decoder is fed A's translation "
        "(teacher forcing): every map then has the same rows, and what changed is the switch's or the model's doing.",
    )


def _outputs(a: core.Translation, b: RunB, a_name: str) -> None:
    left, right = markup.marked_words(a.text, b.out.text)
    c1, c2 = st.columns(2)
    c1.markdown(f"**A** · {md(a_name)} · {md(selection.options_note(a.options))}  \n{md(a.source_text)}")
    c1.markdown(f"#### {left}")
    c1.caption(f"log-probability {_logprob(a):.3f}")
    how = "reading A's translation" if b.forced else "its own translation"
    c2.markdown(
        f"**B** · {md(b.checkpoint)} · {md(selection.options_note(b.out.options))} · {how}  \n{md(b.out.source_text)}"
    )
    c2.markdown(f"#### {right}")
    c2.caption(f"log-probability {_logprob(b.out):.3f}")
    st.markdown(claims_compare.outputs_note(a.text, b.out.text))


def _heads(found: Comparison, a: core.Translation, b: RunB, a_name: str) -> None:
    st.subheader("Head by head: how much did each head change?")
    st.caption(f"The measure: {MEASURE} — {MEASURE_NOTE}.")
    note = claims_compare.counterpart_note(found, params.KINDS, a_name, b.checkpoint)
    if note:
        st.info(note, icon=":material/info:")
    fixed = scale.fixed_scale()  # the lab's one colour-scale switch: 0–1, or each map to its own largest change
    for kind, change in found.kinds.items():
        name = params.KINDS[kind].capitalize()
        top = 1.0 if fixed else None
        export.chart(
            head_roles.stat_heatmap(change.change, title=f"{name}: change from A to B", value_name="change", zmax=top),
            f"compare-{kind}",
            key=f"cmp_map_{kind}",
        )
        st.markdown(claims_compare.kind_note(change, name))
        unmatched = claims_compare.unmatched_note(change, name)
        if unmatched:
            st.caption(unmatched)
    ranked = found.ranked(TOP)
    if not ranked:
        return
    st.subheader(claims_compare.ranked_title([v for *_, v in ranked]))
    labels = [params.head_label(kind, layer, head) for kind, layer, head, _ in ranked]
    st.caption("Click a row's left edge, or pick below, to open that head's two maps.")
    st.dataframe(
        pd.DataFrame(
            [
                {"kind": params.KINDS[k], "layer": layer + 1, "head": head + 1, "change": round(v, 4)}
                for k, layer, head, v in ranked
            ]
        ),
        hide_index=True,
        key="cmp_table",
        on_select=functools.partial(_pick_row, labels),
        selection_mode="single-row",
    )
    url.clamp("cmp_head", labels)
    picked = st.selectbox("Open a head", labels, key="cmp_head")
    kind, layer, head = params.parse_head_label(picked)
    _pair_maps(a.trace, b.out.trace, kind, layer, head)


def _pick_row(labels: list[str]) -> None:
    """A row selected in the ranked table opens that head (before the picker below is drawn)."""
    rows = st.session_state["cmp_table"]["selection"]["rows"]
    if rows and rows[0] < len(labels):
        st.session_state["cmp_head"] = labels[rows[0]]


def _pair_maps(a: core.Trace, b: core.Trace, kind: core.AttentionKind, layer: int, head: int) -> None:
    """The head's two maps side by side, and B − A over the pieces both share."""
    (qa, ka), (qb, kb) = kind_tokens(a, kind), kind_tokens(b, kind)
    ma, mb = a.attention(kind, layer)[head], b.attention(kind, layer)[head]
    where = f"{params.KINDS[kind]} L{layer + 1} H{head + 1}"
    c1, c2 = st.columns(2)
    with c1:
        export.chart(attention_maps.head_heatmap(ma, qa, ka, title=f"A: {where}"), "compare-a", key="cmp_a")
    with c2:
        export.chart(attention_maps.head_heatmap(mb, qb, kb, title=f"B: {where}"), "compare-b", key="cmp_b")
    shared = shared_maps(a, b, kind, layer)  # the pieces both share, as the change is measured over them
    if shared is not None:
        sub_a, sub_b, queries, keys = shared
        title = f"B − A over the shared pieces: {where}"
        fig = attention_maps.head_heatmap(sub_b[head] - sub_a[head], queries, keys, title=title, values="difference")
        export.chart(fig, "compare-difference", key="cmp_diff")


def _beyond(a: core.Translation, b: RunB) -> None:
    """Each output word's source share (ALTI+) in A and in B, and for a minimal pair which source piece moved the
    first output piece where the two translations part (integrated gradients, in each run)."""
    st.subheader("Beyond attention: where each output word comes from")
    path_a = checkpoints.ckpt_path()
    path_b = str(checkpoints.checkpoint_root() / b.checkpoint)
    key_a, key_b = runs.options_key(a.options), runs.options_key(b.out.options)
    ca = errors.guarded(lambda: runs.contributions(path_a, a.source_text, key_a))
    fed = tuple(b.out.output_ids) if b.forced else None  # A's pieces as B read them
    cb = errors.guarded(lambda: runs.contributions(path_b, b.out.source_text, key_b, output_ids=fed))
    if ca is None or cb is None:
        return
    c1, c2 = st.columns(2)
    for column, run, found in ((c1, "A", ca), (c2, "B", cb)):
        with column:
            title = f"{run}: each output piece's source share (ALTI+)"
            fig = sources.source_share_bars(list(found.target_pieces), found.token_source_share, None, title=title)
            export.chart(fig, f"compare-share-{run}", key=f"cmp_share_{run}")
    st.markdown(claims_compare.share_note(float(ca.source_share), float(cb.source_share)))
    if b.forced or a.source_text == b.out.source_text:
        return
    position = next((i for i, (x, y) in enumerate(zip(a.output_ids, b.out.output_ids, strict=False)) if x != y), None)
    if position is None:
        return
    found_a = errors.guarded(lambda: runs.attribution(path_a, a.source_text, key_a, position))
    found_b = errors.guarded(lambda: runs.attribution(path_b, b.out.source_text, key_b, position))
    if found_a is None or found_b is None:
        return
    pieces = (a.output_tokens[position], b.out.output_tokens[position])
    c1, c2 = st.columns(2)
    for column, run, out, att, piece in ((c1, "A", a, found_a, pieces[0]), (c2, "B", b.out, found_b, pieces[1])):
        with column:
            ig = np.abs(att.source_ig)
            title = f"{run}: what moved output piece {position + 1}, “{piece.replace('▁', '')}”"
            bars = explain.attribution_bars(out.src_tokens, {"integrated gradients |IG|": ig}, title=title)
            export.chart(bars, f"compare-attribution-{run}", key=f"cmp_attr_{run}")
    top_a = a.src_tokens[int(np.argmax(np.abs(found_a.source_ig)))]
    top_b = b.out.src_tokens[int(np.argmax(np.abs(found_b.source_ig)))]
    st.markdown(claims_compare.attribution_note(pieces[0], top_a, pieces[1], top_b))


def _exports(found: Comparison, a: core.Translation, b: RunB) -> None:
    st.caption("Export both runs (each opens again in the sidebar's saved-trace replay) and the comparison table")
    table = pd.DataFrame(
        [
            {"kind": k, "layer": layer + 1, "head": head + 1, "change": v, "measure": MEASURE}
            for k, layer, head, v in found.ranked()
        ]
    )
    c1, c2, c3 = st.columns(3)
    for column, run, out in ((c1, "A", a), (c2, "B", b.out)):  # named as every page's export, after model and text
        name = f"compare-{run}_{checkpoints.export_stem(out)}.json"
        column.download_button(
            f"⬇ Run {run} (JSON)", data=out.trace.to_json, file_name=name, on_click="ignore", key=f"cmp_dl_{run}"
        )
    c3.download_button(
        "⬇ Comparison (CSV)",
        data=lambda: str(table.to_csv(index=False)),  # made when clicked
        file_name="compare-heads.csv",
        on_click="ignore",
        key="cmp_dl_table",
    )


if trace_replay.replay() is not None:
    st.info(
        "Comparing runs the model twice; it is not available while a saved trace is replayed (close the trace in "
        "the sidebar to use the model).",
        icon=":material/history:",
    )
    st.stop()
bundle = selection.bundle()
out = sentence_bar.sentence_bar("Sentence A") if bundle is not None else None
if out is not None and out.beam_size != 1:  # B is greedy, and so are the analyses below: A is too
    st.caption("Beam search is on in the sidebar; this page compares greedy translations (beam 1).")
    out = selection.current(beam=1)
if bundle is not None and out is not None:
    a_run = out
    _run_b_controls(bundle)
    if st.session_state.get("ckpt_b") and checkpoint_b() != st.session_state.get("ckpt_b"):
        st.warning("B's checkpoint is not one of the listed ones: B uses A's.", icon=":material/inventory_2:")
    found_b = errors.guarded(lambda: run_b(a_run))
    if found_b is not None:
        a_name = str(checkpoints.selected() or "")
        _outputs(out, found_b, a_name)
        comparison = compare(out.trace, found_b.out.trace)
        _heads(comparison, out, found_b, a_name)
        _beyond(out, found_b)
        _exports(comparison, out, found_b)
