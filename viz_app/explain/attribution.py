"""The "Attribution" tab: for one output word, integrated gradients and gradient × input over the source tokens and
the decoder inputs, beside its cross-attention and rollout, with how well they agree and whether the attributions
add up to what they explain."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import core
from core.analysis import trace_rollout
from core.analysis.attribution import Attribution, spearman
from viz_app import claims_explain
from viz_app.explain import analysis_store
from viz_app.explain.common import how_to_read, needs_model, replaying
from viz_app.figures import explain, style
from viz_app.session import checkpoints, errors, params, runs, selection
from viz_app.widgets import export, markup

IG_STEPS = (32, 64, 128, 256)  # the choices offered for integrated gradients (runs.attribution's default first)


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
