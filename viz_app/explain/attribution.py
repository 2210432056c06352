"""The "Attribution" tab: for one output word, integrated gradients and gradient × input over the source tokens and
the decoder inputs, beside its cross-attention and rollout, with how well they agree and whether the attributions
add up to what they explain."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import core
from core.analysis import trace_rollout
from core.analysis.attribution import Attribution, ContrastKind, contrast_id, spearman
from core.sites import output_site
from viz_app import claims_explain
from viz_app.explain import analysis_store
from viz_app.explain.common import how_to_read, needs_model, replaying
from viz_app.figures import explain, style
from viz_app.session import checkpoints, errors, params, runs, selection
from viz_app.widgets import export, markup

IG_STEPS = (32, 64, 128, 256)  # the choices offered for integrated gradients (runs.attribution's default first)
TYPED = "another piece, typed …"  # the alternatives' last choice: any piece typed in
CONTRAST_LABELS: dict[ContrastKind, str] = {
    "logit_diff": "difference of log-probabilities",
    "prob_diff": "difference of probabilities",
}


def tab(out: core.Translation) -> None:
    """Draw the tab for ``out`` (a greedy translation)."""
    how_to_read(
        "For one output word: **integrated gradients** add up, along a path from “no tokens, positions kept” "
        "to the real input, how the word's log-probability responds to each source token — they sum to the "
        "total change (the *delta* says how closely). **Gradient × input** is the same at the input only; it "
        "vanishes when the model is already certain. Next to them: the word's cross-attention (mean of heads, "
        "last layer) and rollout. ρ is the rank correlation with integrated gradients: high ρ means the "
        "attention points where the attribution does — agreement, not proof."
    )
    tokens = out.output_tokens
    replay = replaying()
    stored = [t for t in range(len(tokens)) if Attribution.from_trace(out.trace, t) is not None]
    if replay and not stored:
        needs_model()
        return
    t = st.select_slider(
        "Output word",
        stored if replay else list(range(len(tokens))),
        key="explain_attr_position",
        format_func=lambda i: f"{i + 1}: {style.token_text(tokens[i])}",
    )
    a = Attribution.from_trace(out.trace, t) if replay else _computed(out, t)
    if a is None:
        return
    ig = np.abs(a.source_ig)
    rhos = _charts(out, a, t, ig)
    _completeness(a, replay)
    table = pd.DataFrame({"head": list(rhos), "ρ with |IG|": [round(v, 3) for v in rhos.values()]})
    st.dataframe(table.sort_values("ρ with |IG|", ascending=False), hide_index=True, height=240, width="stretch")
    if not replay:  # the contrast needs the model
        _contrast(out, t, a.ig_steps)
    else:  # a saved trace's own contrast, if its export holds one
        kept = Attribution.from_trace(out.trace, t, contrast=True)
        if kept is not None and kept.contrast_id is not None:
            st.markdown("#### … and not which word? (as saved)")
            _show_contrast(out, kept, t)


def _computed(out: core.Translation, t: int) -> Attribution | None:
    """Output word ``t``'s attribution with the integration steps picked here (remembered for the export)."""
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
        analysis_store.remember(out, *a.to_arrays())
    return a


def _charts(out: core.Translation, a: Attribution, t: int, ig: np.ndarray) -> dict[str, float]:
    """The attribution beside the attention over the source and over the decoder inputs, and the head that agrees
    best; returns each cross-attention head's ρ with |IG|."""
    tokens, trace = out.output_tokens, out.trace
    last = trace.n_layers["cross"] - 1
    cross = trace.attention("cross", last)[:, t]  # (H, Ts)
    roll = trace_rollout(trace).per_output()[t]
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
    return rhos


def _completeness(a: Attribution, replay: bool) -> None:
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
    if not replay and more and a.difference is not None and abs(a.difference) >= claims_explain.TINY_DIFFERENCE:
        st.button(
            f"Integrate again with {more[0]} steps",
            key="explain_ig_more",
            icon=":material/replay:",
            on_click=lambda: st.session_state.update(explain_ig_steps=more[0]),
        )
    elif not replay and not more:
        st.caption(f"{a.ig_steps} steps is the most this page integrates with.")


def _contrast(out: core.Translation, t: int, steps: int) -> None:
    """Why output word ``t`` and not an alternative: one of the model's own top pieces at that step, or a piece
    typed in; integrated gradients of the difference (``runs.attribution`` with a contrast) with a computed sentence."""
    st.markdown("#### … and not which word?")
    chosen = out.output_tokens[t]
    top_ids = [int(i) for i in out.trace[output_site("top_ids")][t]]
    offered = {piece: (i, p) for i, (piece, p) in zip(top_ids, out.steps[t].top_k, strict=True) if piece != chosen}
    left, right = st.columns(2)
    pick = left.selectbox(
        "Alternative",
        [*offered, TYPED],
        key="explain_contrast",
        format_func=lambda x: x if x == TYPED else f"{style.token_text(x)} (p = {offered[x][1]:.4f})",
        help="The model's own next choices at this step (after the same words), most likely first; or type any "
        "piece of the target vocabulary.",
    )
    kind = right.radio(
        "Explain the",
        list(CONTRAST_LABELS),
        key="explain_contrast_kind",
        format_func=CONTRAST_LABELS.__getitem__,
        horizontal=True,
        help="log p(word) − log p(alternative) (the two logits' difference: the softmax's normaliser cancels), or "
        "p(word) − p(alternative).",
    )
    if pick == TYPED:
        typed = left.text_input("Typed alternative", key="explain_contrast_typed", placeholder="one word or piece")
        bundle = selection.bundle() if typed.strip() else None
        if bundle is None:
            return
        other = errors.guarded(
            lambda: contrast_id(bundle, typed, token_id=out.output_ids[t]),
            "Cannot contrast with this alternative.",
        )
        if other is None:
            return
    else:
        other = offered[pick][0]
    key, path = runs.options_key(out.options), checkpoints.ckpt_path()
    explained: ContrastKind = kind or "logit_diff"
    a = errors.guarded(lambda: runs.attribution(path, selection.sentence(), key, t, steps, other, explained))
    if a is None:
        return
    analysis_store.remember(out, *a.to_arrays())  # the page's export carries it
    _show_contrast(out, a, t)


def _show_contrast(out: core.Translation, a: Attribution, t: int) -> None:
    """The contrast's sentence, bars, completeness and verdict (``a``: a contrastive attribution)."""
    assert a.contrast_id is not None
    chosen, piece = out.output_tokens[t], out.trace.piece(a.contrast_id)
    prefix = out.tgt_tokens[: len(a.target_ig)]
    st.markdown(claims_explain.contrast_note(a, chosen, piece, out.src_tokens, prefix))
    both = f"Output word {t + 1}: “{style.token_label(chosen)}” rather than “{style.token_label(piece)}”"
    fig = explain.attribution_bars(
        out.src_tokens,
        {"integrated gradients": a.source_ig, "gradient × input": a.source_grad_x_input},
        title=style.titled(
            f"{both} (above 0: towards “{style.token_label(chosen)}”)", selection.options_note(out.options, 1)
        ),
    )
    export.chart(fig, f"attribution_contrast_{t + 1}", key="attribution_contrast")
    fig = explain.attribution_bars(
        prefix,
        {"integrated gradients": a.target_ig, "gradient × input": a.target_grad_x_input},
        title=f"… and over the decoder inputs (1–{len(prefix)})",
        axis_title="decoder input",
    )
    export.chart(fig, f"attribution_contrast_prefix_{t + 1}", key="attribution_contrast_prefix")
    st.caption(claims_explain.contrast_sum_line(a, chosen, piece))
    trusted, verdict = claims_explain.contrast_trust(a)
    (st.success if trusted else st.warning)(verdict, icon=":material/check:" if trusted else ":material/warning:")
