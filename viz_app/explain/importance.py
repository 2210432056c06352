"""The "Head importance" tab: how much less likely this translation becomes with each head switched off alone
(measured, or estimated from one gradient pass on long sentences), the greedy translation without a head and with
only the top k heads."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import core
from core.analysis import HeadEffect, HeadImportance, all_heads_but
from core.analysis.attribution import spearman
from core.sites import AttentionKind
from viz_app.explain import analysis_store
from viz_app.explain.common import how_to_read, replaying
from viz_app.figures import explain, style
from viz_app.session import checkpoints, errors, params, runs, selection, url
from viz_app.widgets import export, markup


def tab(out: core.Translation) -> None:
    """Draw the tab for ``out`` (a greedy translation)."""
    how_to_read(
        "Each square is one head. Its value is the change in the log-probability of **this** translation when "
        "that head alone is switched off (its output zeroed) and everything else runs as before: −5 means the "
        "translation became e⁵ ≈ 150 times less likely. Red heads are the ones this translation relied on. "
        "It is measured on the model itself, so it is faithful — but only for this sentence and one head at a "
        "time: two heads that back each other up each look unimportant alone. “Output changes” says whether "
        "greedy decoding with that head off writes a different translation.\n\n"
        f"On long sentences (over {runs.IMPORTANCE_EXACT_PIECES} pieces in and out) the page first shows an "
        "**estimate** from one gradient pass: how fast log p falls as the head's output is turned down, "
        "extrapolated to switching it off (first order, as in Michel et al. 2019). It ranks heads roughly as the "
        "measurement does; press *Measure exactly* for the real thing (one pass per head) and the agreement."
    )
    replay = replaying()
    estimate: HeadImportance | None = None
    if replay:
        result = HeadImportance.from_trace(out.trace)
        if result is None:
            st.info(
                "This saved trace holds no head importance (export it from this page after computing it); close the "
                "trace to compute it with the model.",
                icon=":material/history:",
            )
            return
    else:
        got = _computed(out)
        if got is None:
            return
        result, estimate = got
        analysis_store.remember(out, *result.to_arrays())
    kinds = list(out.trace.kinds)
    shared = _maps(out, result, kinds)
    ranking = result.ranking()
    if result.exact:
        changed = sum(bool(e.output_changed) for e in ranking)
        measured = f"{changed} of {len(ranking)} heads change the greedy translation when switched off alone."
    else:
        measured = "Estimated: whether switching a head off changes the translation is not measured."
    agreement = ""
    if estimate is not None:  # the same heads paired by kind, layer and head
        exact_d = np.concatenate([result.matrix(k).ravel() for k in kinds])
        est_d = np.concatenate([estimate.matrix(k).ravel() for k in kinds])
        agreement = f" The one-pass estimate ranked the heads with ρ = {spearman(exact_d, est_d):.2f} against this."
    st.caption(
        f"log p(translation) = {result.base_logprob:.2f} over {result.n_tokens} tokens with every head on. "
        f"{measured} Colours saturate at ±{shared:.2f} (hover a square for its value).{agreement}"
    )
    labels = [params.head_label(e.kind, e.layer, e.head) for e in ranking]
    table = pd.DataFrame(
        {
            "head": labels,
            "Δ log p" if result.exact else "Δ log p (estimate)": [round(e.delta_logprob, 3) for e in ranking],
            "output changes": [
                "not measured" if e.output_changed is None else "yes" if e.output_changed else "no" for e in ranking
            ],
        }
    )
    left, right = st.columns([3, 2])
    left.dataframe(table, hide_index=True, height=320, width="stretch")
    with right:
        _head_picker(out, result, ranking, labels, replay)


def _maps(out: core.Translation, result: HeadImportance, kinds: list[AttentionKind]) -> float:
    """One importance map per kind of attention, side by side; returns the colour scale's end they share."""
    note = selection.options_note(out.options, 1)
    # one colour scale for every kind, so colours compare; it saturates at the 90th percentile of |Δ| so that one
    # dominant head does not wash out the rest (hover gives every exact value)
    shared = max(float(np.percentile([abs(e.delta_logprob) for e in result.effects], 90)), 0.5)
    cols = st.columns(len(kinds))
    for col, kind in zip(cols, kinds, strict=True):
        fig = explain.importance_heatmap(
            result.matrix(kind),
            title=style.titled(params.KINDS[kind].capitalize(), note),
            scale=shared,
            estimate=not result.exact,
        )
        with col:
            export.chart(fig, f"importance_{kind}", key=f"importance_{kind}")
    if "decoder" not in kinds:
        st.caption(
            "This model's decoder reads the target with an SSRU (a recurrence), not self-attention: its heads are the "
            "encoder's and the cross-attention's."
        )
    return shared


def _head_picker(
    out: core.Translation, result: HeadImportance, ranking: list[HeadEffect], labels: list[str], replay: bool
) -> None:
    """Pick a head: open it in Head detail, translate without it, keep only the top k heads."""
    url.clamp("explain_head", labels)
    picked = st.selectbox("Look at a head", labels, key="explain_head", help="Most relied-on first.")
    if st.button("Open its attention in Head detail", icon=":material/zoom_in:", key="explain_open"):
        kind, layer, head = params.parse_head_label(picked)
        st.session_state.update(kind=kind, layer=layer, head=head, agg=params.SINGLE_HEAD)
        st.switch_page("views/head_detail.py")
    effect = ranking[labels.index(picked)]
    if replay:
        st.caption("The translations without a head need the model: close the saved trace to see them.")
        return
    on_request = _long(out)  # each of these translations decodes the whole sentence again
    _without(out, effect, on_request)
    st.divider()
    total = len(ranking)
    k = st.slider("Keep only the top k heads on", 1, total, min(total, max(1, total // 4)), key="explain_k")
    if not on_request or st.toggle("Translate with only these heads", key="explain_k_translate"):
        keep_only = out.options.with_changes(ablate=out.options.ablate | all_heads_but(result.shape, result.top(k)))
        kept = selection.current(beam=1, opts=keep_only)
        if kept is not None:
            st.markdown(f"With only these {k} of {total} heads: *{markup.md(kept.text) or '∅ (no words)'}*")


def _computed(out: core.Translation) -> tuple[HeadImportance, HeadImportance | None] | None:
    """The importance to show and, once a long sentence is measured exactly, the estimate shown before it."""
    path, text, key = checkpoints.ckpt_path(), selection.sentence(), runs.options_key(out.options)
    if not _long(out):
        exact = errors.guarded(lambda: runs.importance(path, text, key))
        return None if exact is None else (exact, None)
    estimate = errors.guarded(lambda: runs.importance_estimate(path, text, key))
    if estimate is None:
        return None
    asked = st.session_state.get("explain_exact_for") == analysis_store.analysis_key(out)
    if not asked:
        st.info(
            f"A long sentence ({_pieces(out)} pieces in and out): these maps are an **estimate** from one gradient "
            "pass. "
            f"Measuring every head switched off takes one teacher-forced pass per head "
            f"({len(estimate.effects)} here, several seconds).",
            icon=":material/speed:",
        )
        if not st.button("Measure exactly (switch each head off)", icon=":material/science:", key="explain_exact"):
            return estimate, None
    exact = errors.guarded(lambda: runs.importance(path, text, key))
    if exact is None:  # the message is shown; the button stays for another try
        return estimate, None
    st.session_state["explain_exact_for"] = analysis_store.analysis_key(out)
    return exact, estimate


def _pieces(out: core.Translation) -> int:
    return len(out.src_tokens) + len(out.output_tokens)


def _long(out: core.Translation) -> bool:
    """More pieces in and out than head importance measures at once (the page then computes on request)."""
    return _pieces(out) > runs.IMPORTANCE_EXACT_PIECES


def _without(out: core.Translation, effect: HeadEffect, on_request: bool) -> None:
    """The greedy translation with ``effect``'s head also switched off: shown when the measurement says it changes
    (on request for long sentences, the only ones that are estimated)."""
    if effect.output_changed is False:
        st.markdown("Without it the translation stays the same.")
        return
    if on_request and not st.toggle("Translate without it", key="explain_without"):
        return
    alone = out.options.with_changes(ablate=out.options.ablate | {(effect.kind, effect.layer, effect.head)})
    without = selection.current(beam=1, opts=alone)
    if without is None:
        return
    if effect.first_change is not None:
        st.markdown(f"Without it (changes at word {effect.first_change + 1}): *{markup.md(without.text) or '∅'}*")
    elif without.text == out.text:
        st.markdown("Without it the translation stays the same.")
    else:
        st.markdown(f"Without it: *{markup.md(without.text) or '∅'}*")
