"""The "Source or prefix?" tab: how much of each output word comes from the source sentence and how much from the
words already written (ALTI+, ``core.analysis.contributions``); its source map beside cross-attention, rollout and
integrated gradients with their rank agreement; a translation the user types, scored the same way (teacher-forced).
Also the one line Step-by-step decoding shows per step (``step_share``)."""

from __future__ import annotations

import numpy as np
import streamlit as st

import core
from core.analysis import trace_rollout
from core.analysis.attribution import spearman
from core.analysis.contributions import Contributions
from viz_app import claims_explain
from viz_app.cache import peek
from viz_app.explain import analysis_store
from viz_app.explain.attribution import IG_STEPS
from viz_app.explain.common import how_to_read, needs_model, replaying
from viz_app.figures import sources, style
from viz_app.session import checkpoints, errors, runs, selection
from viz_app.widgets import export, share_links

ALTI = "ALTI+ (source part)"


def tab(out: core.Translation) -> None:
    """Draw the tab for ``out`` (a greedy translation)."""
    how_to_read(
        "ALTI+ splits every attention block's output into one vector per input word and follows each output word "
        "back through all the layers: its **source share** is how much of it comes from the source sentence, the "
        "rest from the words already written (the prefix).\n\n"
        "A word with a low source share may come from the prefix alone — a fluent continuation, not a translation; "
        "a whole translation with a low share is how detached hallucinations show (Dale et al., 2023)."
    )
    note = selection.options_note(out.options, 1)
    if replaying():
        _replayed(out, note)
        return
    path, text, key = checkpoints.ckpt_path(), selection.sentence(), runs.options_key(out.options)
    typed = st.text_input(
        "Score a translation of your own (teacher-forced)",
        key="explain_src_typed",
        placeholder="Type a translation — a wrong one too — to see where its words come from",
        help="The model reads your translation word by word as if it had written it; each word's source share is "
        "measured the same way as for the model's own translation.",
    ).strip()
    c = errors.guarded(lambda: runs.contributions(path, text, key, typed or None), "Cannot score this translation.")
    if c is None:
        return
    if not typed:
        analysis_store.remember(out, *c.to_arrays())  # the export below carries it
    shares = errors.guarded(lambda: runs.builtin_source_shares(path, key))
    threshold = None if shares is None else claims_explain.low_share_threshold(shares[1])
    _shares(c, threshold, note)
    if shares is not None and threshold is not None:
        shown = [style.token_text(t) for t in c.target_pieces]  # '␣para', not the raw '▁para'
        st.markdown(claims_explain.low_share_note(shown, c.token_source_share, threshold))
        st.caption(claims_explain.sentence_share_note(c.source_share, shares[0]))
        share_links.share_links("sentence")
    if typed:
        own = errors.guarded(lambda: runs.contributions(path, text, key, None))
        if own is not None:
            st.markdown(claims_explain.typed_share_note(c.source_share, own.source_share))
    run = errors.guarded(lambda: runs.teacher_forced(path, text, typed, key)) if typed else out
    if run is not None:
        _maps(run, c, note, None if typed else (path, text, key))
    _value_norms(c, path, text, key, typed or None, note)


def _replayed(out: core.Translation, note: str) -> None:
    """A saved trace: the contributions it holds (exported from this tab), else what it takes to compute them."""
    c = Contributions.from_trace(out.trace)
    if c is None:
        needs_model()
        return
    _shares(c, None, note)
    st.caption(
        "Replayed from the saved trace. Comparing with the built-in sentences, scoring a typed translation and "
        "integrated gradients run the model: close the saved trace for them."
    )
    _maps(out, c, note, None)


def _shares(c: Contributions, threshold: float | None, note: str) -> None:
    """The notes, and each output word's source share as a bar (below ``threshold`` marked)."""
    for said in c.notes:
        st.info(said, icon=":material/info:")
    who = "your translation (teacher-forced)" if c.forced else "the model's translation"
    fig = sources.source_share_bars(
        c.target_pieces,
        c.token_source_share,
        threshold,
        title=style.titled(f"Source share of each word of {who}", note),
    )
    export.chart(fig, "source_share", key="explain_source_share")


def _maps(run: core.Translation, c: Contributions, note: str, greedy: tuple[str, str, runs.OptionsKey] | None) -> None:
    """ALTI+'s source map beside the last cross-attention layer and rollout of the same run, and their rank
    agreement; for the model's own translation (``greedy``: its path, text, options) also integrated gradients."""
    trace, T = run.trace, len(c.target_pieces)
    last = trace.n_layers["cross"] - 1
    cross_name = f"cross-attention L{last + 1} (mean of heads)"
    maps = {
        ALTI: c.source_matrix,
        cross_name: trace.attention("cross", last).mean(0)[:T],
        "attention rollout": trace_rollout(trace).per_output()[:T],
    }
    fig = sources.source_maps(
        maps,
        c.target_pieces,
        c.source_pieces,
        title=style.titled("Where each word's source part comes from, by three measures (rows scaled to 1)", note),
    )
    export.chart(fig, "source_maps", key="explain_source_maps")
    rhos = {name: _mean_rho(c.source_matrix, m) for name, m in maps.items() if name != ALTI}
    if greedy is not None:
        rhos.update(_ig_agreement(c, *greedy))
    st.markdown(claims_explain.agreement_note(rhos))


def _value_norms(c: Contributions, path: str, text: str, key: runs.OptionsKey, typed: str | None, note: str) -> None:
    """The second view, on request: the last cross-attention layer's value-weighted norms beside its weights."""
    if not st.toggle(
        "Second view: value-weighted norms (Kobayashi et al., 2020)",
        key="explain_src_norms",
        help="How big a vector each source word sends, not only how much attention it gets: ‖Σ_h α·f(x)‖.",
    ):
        return
    vn = errors.guarded(lambda: runs.weighted_norms(path, text, key, typed))
    if vn is None:
        return
    last = max(layer for kind, layer in vn.combined if kind == "cross")
    T = len(c.target_pieces)
    maps = {
        f"cross-attention L{last + 1} weights (mean of heads)": vn.weights[("cross", last)].mean(0)[:T],
        f"value-weighted norms L{last + 1} ‖Σ_h α·f(x)‖": vn.combined[("cross", last)][:T],
    }
    fig = sources.source_maps(
        maps, c.target_pieces, c.source_pieces, title=style.titled("Attention weights and value-weighted norms", note)
    )
    export.chart(fig, "value_norms", key="explain_value_norms")
    st.markdown(claims_explain.agreement_note({name: _mean_rho(c.source_matrix, m) for name, m in maps.items()}))


def _mean_rho(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman ρ of each row pair, averaged over the rows where it is defined (NaN when none is)."""
    rows = [
        spearman(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)) for x, y in zip(a, b, strict=True)
    ]
    finite = [r for r in rows if np.isfinite(r)]
    return float(np.mean(finite)) if finite else float("nan")


def _ig_agreement(c: Contributions, path: str, text: str, key: runs.OptionsKey) -> dict[str, float]:
    """Integrated gradients of one output word (computed on request; shared with the Attribution tab's cache) and
    their ρ with that word's ALTI+ row."""
    T = len(c.target_pieces)
    t = st.select_slider(
        "Output word for integrated gradients",
        list(range(T)),
        key="explain_src_ig_word",
        format_func=lambda i: f"{i + 1}: {style.token_text(c.target_pieces[i])}",
    )
    a = peek(runs.attribution, path, text, key, t, IG_STEPS[0])  # as the Attribution tab computes it by default
    if a is None and st.button("Compute integrated gradients for this word", key="explain_src_ig"):
        a = errors.guarded(lambda: runs.attribution(path, text, key, t, IG_STEPS[0]))
    if a is None:
        st.caption("Integrated gradients run the model once per integration step: computed on request.")
        return {}
    name = f"integrated gradients |IG| (word {t + 1} “{style.token_text(c.target_pieces[t])}” only)"
    return {name: spearman(np.abs(a.source_ig), c.source_matrix[t])}


def step_share(shown: core.Translation, step: int, forced: bool) -> None:
    """Step-by-step decoding's line for ``step`` of ``shown``: its source share (ALTI+). The greedy translation is
    scored as decoded; a beam's winner or a "what if" translation (``forced``) teacher-forced on its text."""
    if replaying() or not checkpoints.selected():
        return
    path, text, key = checkpoints.ckpt_path(), selection.sentence(), runs.options_key(shown.options)
    greedy = shown.beam_size == 1 and not forced
    c = errors.guarded(lambda: runs.contributions(path, text, key, None if greedy else shown.text))
    if c is None or step >= len(c.token_source_share):
        return
    found = peek(runs.builtin_source_shares, path, key)
    threshold = None if found is None else claims_explain.low_share_threshold(found[1])
    st.caption(claims_explain.step_share_note(float(c.token_source_share[step]), threshold))
    share_links.share_links("step")
