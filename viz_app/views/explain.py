"""Why this word? Which heads the translation relied on (switch each off alone) and where attention routes
(rollout) — measures checked against the model itself, beside the raw attention maps."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

import core
from core.analysis import FUSIONS, HeadEffect, HeadImportance, all_heads_but, trace_rollout
from core.analysis.attribution import Attribution, spearman
from core.analysis.patching import PatchingResult
from core.analysis.rollout import concentration, set_aside, special_positions
from viz_app import claims_explain
from viz_app.figures import explain, style
from viz_app.session import checkpoints, errors, params, runs, selection, trace_replay, url
from viz_app.widgets import export, header, markup, sentence_bar

st.title("Why this word?")
st.caption(
    "Attention maps show where heads look, not what the translation needed. Here the model answers for itself: "
    "switch each head off alone and see how much less likely this translation becomes, and follow attention "
    "through all the layers (rollout) to the source words each output word draws on."
)


def _how_to_read(text: str) -> None:
    with st.expander("How to read this", icon=":material/help:"):
        st.markdown(text)


def _show_head(label: str) -> None:
    kind, layer, head = params.parse_head_label(label)
    st.session_state.update(kind=kind, layer=layer, head=head, agg=params.SINGLE_HEAD)


def _importance_tab(out: core.Translation) -> None:
    _how_to_read(
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
    replaying = trace_replay.replay() is not None
    estimate: HeadImportance | None = None
    if replaying:
        result = HeadImportance.from_trace(out.trace)
        if result is None:
            st.info(
                "This saved trace holds no head importance (export it from this page after computing it); close the "
                "trace to compute it with the model.",
                icon=":material/history:",
            )
            return
    else:
        got = _computed_importance(out)
        if got is None:
            return
        result, estimate = got
        _remember(out, *result.to_arrays())
    note = selection.options_note(out.options, 1)
    kinds = [k for k in out.trace.kinds]
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
        url.clamp("explain_head", labels)
        picked = st.selectbox("Look at a head", labels, key="explain_head", help="Most relied-on first.")
        if st.button("Open its attention in Head detail", icon=":material/zoom_in:", key="explain_open"):
            _show_head(picked)
            st.switch_page("views/head_detail.py")
        effect = ranking[labels.index(picked)]
        if replaying:
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


def _computed_importance(out: core.Translation) -> tuple[HeadImportance, HeadImportance | None] | None:
    """The importance to show and, once a long sentence is measured exactly, the estimate shown before it."""
    path, text, key = checkpoints.ckpt_path(), selection.sentence(), runs.options_key(out.options)
    if not _long(out):
        exact = errors.guarded(lambda: runs.importance(path, text, key))
        return None if exact is None else (exact, None)
    estimate = errors.guarded(lambda: runs.importance_estimate(path, text, key))
    if estimate is None:
        return None
    asked = st.session_state.get("explain_exact_for") == _analysis_key(out)
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
    st.session_state["explain_exact_for"] = _analysis_key(out)
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


def _rollout_tab(out: core.Translation) -> None:
    _how_to_read(
        "Rollout follows attention through every layer: each layer is counted as half attention, half the "
        "residual connection (a position keeps its own content), heads fused by the chosen rule, and the "
        "layers multiplied. Each row is one output word; its colours say which source words its decoder "
        "position draws on **if information only moved along attention**. It ignores the values, the "
        "feed-forward layers and the norms — a picture of routing, not proof of use (compare head importance).\n\n"
        "Special tokens such as `</s>` are often **attention sinks**: heads with nothing to do park their "
        "attention there, so rollout counts them although they carry no word. *Set special tokens aside* "
        "removes their columns and renormalises each row over the remaining tokens (on by default when a sink "
        "dominates). The colours run over the range of the values drawn, so small differences between rows show."
    )
    url.clamp("explain_fusion", list(FUSIONS))
    fusion = st.radio("Fuse heads by", list(FUSIONS), horizontal=True, key="explain_fusion")
    result = trace_rollout(out.trace, fusion)
    for note in result.notes:
        st.info(note, icon=":material/info:")
    n = len(out.output_tokens)
    per_output = result.per_output()[:n]
    special = special_positions(out.src_tokens)
    full = concentration(per_output, special)
    sink = claims_explain.sink_note(full, out.src_tokens)
    if sink is not None:
        st.info(sink, icon=":material/info:")
    aside = bool(special) and st.toggle(
        "Set special tokens aside (" + ", ".join(out.src_tokens[j] for j in special) + ")",
        value=full.sink_dominated,  # a new default (another sentence or model) is a new toggle with that default
        help="Remove their columns and renormalise each row over the other source tokens.",
    )
    shown, columns = per_output, list(out.src_tokens)
    if aside:
        shown = set_aside(per_output, special)
        columns = [tok for j, tok in enumerate(out.src_tokens) if j not in special]
    fig = explain.rollout_heatmap(
        shown,
        out.output_tokens,
        columns,
        title=style.titled(
            f"Rollout: source words behind each output word ({fusion} of heads"
            + (", special tokens set aside)" if aside else ")"),
            selection.options_note(out.options, out.beam_size),
        ),
    )
    export.chart(fig, f"rollout_{fusion}{'_words' if aside else ''}", key="rollout")
    heat = fig.data[0]
    drawn = concentration(shown)
    st.caption(
        " ".join(
            [
                claims_explain.colour_note(
                    float(heat.zmin), float(heat.zmax), [out.src_tokens[j] for j in special] if aside else []
                ),
                claims_explain.rows_note(drawn),
                claims_explain.source_share_note(result.source.sum(-1)[:n]),
                "Rows are labelled with the word each decoder position predicted.",
            ]
        )
    )


def _analysis_key(out: core.Translation) -> str:
    return f"{checkpoints.selected()}|{out.source_text}|{runs.options_key(out.options)}"


def _remember(out: core.Translation, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Keep a computed analysis for this translation, so the export below carries it (per session)."""
    store = st.session_state.setdefault("_analysis", {})
    if store.get("key") != _analysis_key(out):
        store.clear()
        store["key"] = _analysis_key(out)
    store.setdefault("arrays", {}).update(arrays)
    store.setdefault("meta", {}).update(meta)


def _with_analysis(out: core.Translation) -> core.Translation:
    """The translation whose trace also holds what this session computed on this page (for the export)."""
    store = st.session_state.get("_analysis", {})
    if trace_replay.replay() is not None or store.get("key") != _analysis_key(out) or not store.get("arrays"):
        return out
    return core.Translation(out.trace.with_analysis(store["arrays"], store["meta"]))


IG_STEPS = (32, 64, 128, 256)  # the choices offered for integrated gradients (runs.attribution's default first)


def _completeness(a: Attribution, replaying: bool) -> None:
    """Whether the attributions add up to what they explain, in numbers and one verdict (computed)."""
    st.caption(f"{claims_explain.logp_text(a.logprob)} · baseline: {a.baseline}. {claims_explain.ig_sum_line(a)}")
    certain = claims_explain.certainty_note(a)
    if certain is not None:
        st.caption(certain)
    trusted, verdict = claims_explain.ig_trust(a)
    if trusted:
        st.success(verdict, icon=":material/check:")
        return
    st.warning(verdict, icon=":material/warning:")
    more = [n for n in IG_STEPS if n > a.ig_steps]
    if not replaying and more and a.difference is not None and abs(a.difference) >= claims_explain.TINY_DIFFERENCE:
        st.button(
            f"Integrate again with {more[0]} steps",
            key="explain_ig_more",
            icon=":material/replay:",
            on_click=lambda: st.session_state.update(explain_ig_steps=more[0]),
        )
    elif not replaying and not more:
        st.caption(f"{a.ig_steps} steps is the most this page integrates with.")


def _needs_model() -> bool:
    if trace_replay.replay() is not None:
        st.info("This runs the model again; close the saved trace to compute it.", icon=":material/history:")
        return True
    return False


def _patching_tab(out: core.Translation) -> None:
    _how_to_read(
        "Corrupt the sentence by **replacing one word** (pick it and type its replacement, or type the whole "
        "sentence again; it must have the same number of pieces). Both sentences are "
        "run on this translation; the corrupted one makes an output word less likely. Then one site at a time "
        "is copied from the clean run into the corrupted run, and the map shows how much of the clean word's "
        "probability that single copy brings back (1 = all of it, 0 = none). A source position that restores "
        "it carries the word; a head that restores it moves it to the decoder. Heads that share the work each "
        "restore little alone."
    )
    if trace_replay.replay() is not None:
        stored = PatchingResult.from_trace(out.trace)
        if stored is None:
            _needs_model()
            return
        result, corrupt = stored
        st.markdown(f"Corrupted sentence (from the saved trace): *{markup.md(corrupt)}*")
        _show_patching(out, result)
        return
    how = st.radio("Corrupt it by", ["picking a word", "typing the sentence"], horizontal=True, key="explain_how")
    if how == "picking a word":
        words = out.source_text.split()
        c1, c2 = st.columns(2)
        url.clamp("explain_word", list(range(len(words))))
        j = c1.selectbox(
            "Word to replace", list(range(len(words))), key="explain_word", format_func=lambda i: f"{i + 1}: {words[i]}"
        )
        replacement = c2.text_input("Replace it with", key="explain_replacement", placeholder="e.g. dog").strip()
        corrupt = " ".join(replacement if i == j else w for i, w in enumerate(words)) if replacement else ""
        if corrupt:
            st.caption(f"Corrupted sentence: *{markup.md(corrupt)}*")
    else:
        corrupt = st.text_input(
            "Corrupted sentence (one word replaced)", key="explain_corrupt", placeholder=out.source_text
        ).strip()
    tokens = out.output_tokens
    choice = st.selectbox(
        "Output word to explain",
        ["the most affected"] + [f"{t + 1}: {style.token_text(tok)}" for t, tok in enumerate(tokens)],
        key="explain_patch_position",
    )
    if not corrupt:
        if how == "picking a word":
            st.caption("Pick the word to replace and type its replacement above (e.g. a noun for another noun).")
        else:
            st.caption("Type the corrupted sentence above: this sentence with one word replaced (e.g. one noun).")
        return
    position = None if choice == "the most affected" else int(choice.split(":")[0]) - 1
    key = runs.options_key(out.options)
    result = errors.guarded(
        lambda: runs.patching(checkpoints.ckpt_path(), selection.sentence(), corrupt, key, position),
        refused="Cannot patch with this corrupted sentence.",
    )
    if result is None:
        return
    _remember(out, *result.to_arrays(corrupt))
    _show_patching(out, result)


def _show_patching(out: core.Translation, result: PatchingResult) -> None:
    tokens = out.output_tokens
    word = style.token_text(tokens[result.position])
    st.markdown(
        f"Output word {result.position + 1} **{markup.md(word)}**: p = {result.p_clean:.3f} with the clean "
        f"sentence, {result.p_corrupt:.3f} with the corrupted one."
    )
    if abs(result.p_clean - result.p_corrupt) < 1e-3:
        st.info("The corruption hardly changes this word's probability: pick another word or another corruption.")
    note = selection.options_note(out.options, 1)
    src = [style.token_label(t) for t in out.src_tokens]
    layers = ["embeddings"] + [f"encoder L{i + 1}" for i in range(result.encoder.shape[0] - 1)]
    fig = explain.labelled_heatmap(
        result.restored(result.encoder),
        layers,
        src,
        value_name="restored",
        title=style.titled("Source position × encoder layer: share restored", note),
    )
    export.chart(fig, "patching_encoder", key="patching_encoder")
    c1, c2 = st.columns(2)
    with c1:
        heads = result.cross_heads
        fig = explain.labelled_heatmap(
            result.restored(heads),
            [f"cross L{i + 1}" for i in range(heads.shape[0])],
            [f"H{h + 1}" for h in range(heads.shape[1])],
            value_name="restored",
            title="One cross-attention head: share restored",
        )
        export.chart(fig, "patching_cross", key="patching_cross")
    with c2:
        dec = result.decoder
        prefix = [style.token_label(t) for t in out.tgt_tokens[: dec.shape[1]]]
        fig = explain.labelled_heatmap(
            result.restored(dec),
            [f"decoder L{i + 1}" for i in range(dec.shape[0])],
            prefix,
            value_name="restored",
            title="Decoder input position × layer: share restored",
        )
        export.chart(fig, "patching_decoder", key="patching_decoder")


def _attribution_tab(out: core.Translation) -> None:
    _how_to_read(
        "For one output word: **integrated gradients** add up, along a path from “no tokens, positions kept” "
        "to the real input, how the word's log-probability responds to each source token — they sum to the "
        "total change (the *delta* says how closely). **Gradient × input** is the same at the input only; it "
        "vanishes when the model is already certain. Next to them: the word's cross-attention (mean of heads, "
        "last layer) and rollout. ρ is the rank correlation with integrated gradients: high ρ means the "
        "attention points where the attribution does — agreement, not proof."
    )
    tokens = out.output_tokens
    replaying = trace_replay.replay() is not None
    stored = [t for t in range(len(tokens)) if Attribution.from_trace(out.trace, t) is not None]
    if replaying and not stored:
        _needs_model()
        return
    t = st.select_slider(
        "Output word",
        stored if replaying else list(range(len(tokens))),
        key="explain_attr_position",
        format_func=lambda i: f"{i + 1}: {style.token_text(tokens[i])}",
    )
    if replaying:
        a = Attribution.from_trace(out.trace, t)
    else:
        steps = st.select_slider(
            "Integration steps",
            IG_STEPS,
            key="explain_ig_steps",
            help="Points on the path from the baseline to the input. More steps make the attributions add up more "
            "closely (the delta below) and take longer: the points run as one batch.",
        )
        key = runs.options_key(out.options)
        a = errors.guarded(lambda: runs.attribution(checkpoints.ckpt_path(), selection.sentence(), key, t, steps))
        if a is not None:
            _remember(out, *a.to_arrays())
    if a is None:
        return
    trace = out.trace
    last = trace.n_layers["cross"] - 1
    cross = trace.attention("cross", last)[:, t]  # (H, Ts)
    roll = trace_rollout(trace).per_output()[t]
    ig = np.abs(a.source_ig)
    series = {
        "integrated gradients |IG|": ig,
        "gradient × input |g·x|": np.abs(a.source_grad_x_input),
        f"cross-attention L{last + 1} (mean of heads)": cross.mean(0),
        f"cross-attention L{last + 1} (max of heads)": cross.max(0),
        "rollout": roll,
    }
    fig = explain.attribution_bars(
        out.src_tokens,
        series,
        title=style.titled(
            f"Output word {t + 1} “{style.token_label(tokens[t])}”: attribution and attention",
            selection.options_note(out.options, 1),
        ),
    )
    export.chart(fig, f"attribution_{t + 1}", key="attribution")
    prefix = out.tgt_tokens[: len(a.target_ig)]  # up to this word (every decoder input with the causal mask off)
    fig = explain.attribution_bars(
        prefix,
        {"integrated gradients |IG|": np.abs(a.target_ig), "gradient × input |g·x|": np.abs(a.target_grad_x_input)},
        title=f"… and over the decoder inputs (1–{len(prefix)})",
        axis_title="decoder input",
    )
    export.chart(fig, f"attribution_prefix_{t + 1}", key="attribution_prefix")
    rhos = {
        params.head_label("cross", layer, h): spearman(ig, trace.attention("cross", layer)[h, t])
        for layer in range(trace.n_layers["cross"])
        for h in range(trace.n_heads)
    }
    finite = {k: v for k, v in rhos.items() if np.isfinite(v)}
    if finite:
        best = max(finite, key=lambda k: finite[k])
        st.markdown(
            f"**{markup.md(best)}** agrees best with the attribution for this word (ρ = {finite[best]:.2f}); "
            f"rollout ρ = {spearman(ig, roll):.2f}, mean cross-attention ρ = {spearman(ig, cross.mean(0)):.2f}."
        )
    _completeness(a, replaying)
    table = pd.DataFrame({"head": list(rhos), "ρ with |IG|": [round(v, 3) for v in rhos.values()]})
    st.dataframe(table.sort_values("ρ with |IG|", ascending=False), hide_index=True, height=240, width="stretch")


def _replay_opens_on_rollout() -> None:
    """A saved trace without head importance opens on what it can show without the model (rollout) the first
    time this page shows it; after that the tab is the user's."""
    replay = trace_replay.replay()
    if replay is None or st.session_state.get("_explain_replay_tab") == id(replay):
        return
    st.session_state["_explain_replay_tab"] = id(replay)
    if st.session_state.get("explain_tab") == "Head importance" and HeadImportance.from_trace(replay.trace) is None:
        st.session_state["explain_tab"] = "Attention rollout"


out = sentence_bar.sentence_bar()
if out is not None and out.beam_size != 1:  # the analyses explain greedy decoding ("output changes" follows it)
    st.caption("Beam search is on in the sidebar; this page explains the greedy translation (beam 1).")
    out = selection.current(beam=1)
if out is not None:
    header.translation_header(out)
    if out.options.shortlist:
        st.caption(
            "The shortlist switch is on: these analyses still score every word of the vocabulary (log p of the "
            "chosen words among all of them); the shortlist only narrows what decoding may pick."
        )
    _replay_opens_on_rollout()
    tabs = st.tabs(
        ["Head importance", "Attention rollout", "Patching", "Attribution"], key="explain_tab", on_change="rerun"
    )  # the open tab is kept in the link (?explain_tab=, params.PARAMS)
    if tabs[0].open:
        with tabs[0]:
            _importance_tab(out)
    if tabs[1].open:
        with tabs[1]:
            _rollout_tab(out)
    if tabs[2].open:
        with tabs[2]:
            _patching_tab(out)
    if tabs[3].open:
        with tabs[3]:
            _attribution_tab(out)
    export.export_trace(_with_analysis(out))
    st.caption("The export holds the analyses computed above for this sentence; opened again, they replay here.")
