"""The Steps page's sampling: the "sample" choice beside greedy and beam search, its settings (temperature, top-k,
top-p, seed: all in the link, so a link replays the same draws), the sampled translation, and at each step what
temperature and the cut did to the distribution the piece was drawn from (as decoding recorded it:
``viz_app.steps.draws``)."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

import core
from core.sites import draw_site
from viz_app import claims_sampling
from viz_app.figures import sampling as figure
from viz_app.figures import style
from viz_app.session import checkpoints, errors, params, runs, selection, trace_replay, url
from viz_app.steps.draws import trace_draws
from viz_app.widgets import export

SAMPLE = "sample"
CHOICES: list[int | str] = [*params.BEAMS, SAMPLE]
FIRST_TEMPERATURE = 1.0  # the model's own distribution, before any cut


def settle() -> None:
    """Before the sentence bar: sampling draws one piece a step (beam 1; a link's other beam is named), and the
    decoding radio shows what the state holds."""
    ss = st.session_state
    if ss.get("temperature") is not None and ss.get("beam", 1) != 1:
        url.link_problem("beam", "is not used while sampling (a sampled step draws one piece)")
        ss["beam"] = 1
    ss["decoding"] = SAMPLE if ss.get("temperature") is not None else ss.get("beam", 1)


def _changed(then: Callable[[], None]) -> None:
    ss = st.session_state
    choice = ss.get("decoding")
    if choice == SAMPLE:
        ss["beam"] = 1
        if ss.get("temperature") is None:
            ss["temperature"] = FIRST_TEMPERATURE
    else:
        ss["beam"], ss["temperature"] = choice, None
    then()


def decoding_radio(on_change: Callable[[], None]) -> runs.SamplingKey | None:
    """The "Decoding" radio (greedy, beam sizes, sample) and, when sampling, its settings; the settings as a
    ``runs.SamplingKey``, or None when not sampling."""
    st.radio(
        "Decoding",
        CHOICES,
        key="decoding",
        horizontal=True,
        format_func=lambda b: (
            "sample (draw each piece)"
            if b == SAMPLE
            else "greedy (best piece each step)"
            if b == 1
            else f"beam search, {b} beams"
        ),
        on_change=_changed,
        args=(on_change,),  # a "what if" belongs to the decoding it branched from
    )
    ss = st.session_state
    if ss.get("temperature") is None:
        return None
    c1, c2, c3, c4 = st.columns([3, 2, 2, 2])
    c1.slider(
        "Temperature",
        0.0,
        2.0,
        step=0.05,
        key="temperature",
        help="Divides the logits: below 1 sharpens the distribution, above 1 flattens it; 0 takes the top choice.",
    )
    c2.number_input("Top-k", min_value=1, max_value=10**6, step=1, value=None, key="top_k", placeholder="off")
    c3.number_input(
        "Top-p", min_value=0.01, max_value=1.0, step=0.05, value=None, key="top_p", placeholder="off", format="%.2f"
    )
    c4.number_input(
        "Seed", min_value=0, max_value=params.MAX_SEED, step=1, key="seed", help="The same seed draws the same."
    )
    return current()


def current() -> runs.SamplingKey | None:
    """The sampling settings the session state holds (after ``settle``), or None when not sampling."""
    ss = st.session_state
    if ss.get("temperature") is None:
        return None
    top_k, top_p = ss.get("top_k"), ss.get("top_p")
    return (
        float(ss["temperature"]),
        None if top_k is None else int(top_k),
        None if top_p is None else float(top_p),
        int(ss.get("seed", 0)),
    )


def sampled(out: core.Translation, sampling: runs.SamplingKey) -> core.Translation | None:
    """The sampled translation of the page's sentence with ``out``'s switches (None after a message; while a saved
    trace is replayed, ``out``, with a note)."""
    if trace_replay.replay() is not None:
        st.info("Sampling runs the model: close the saved trace in the sidebar to use it.", icon=":material/history:")
        return out
    path, text, key = checkpoints.ckpt_path(), selection.sentence(), runs.options_key(out.options)
    return errors.guarded(lambda: runs.sample(path, text, key, sampling))


def drawn_with(out: core.Translation) -> runs.SamplingKey | None:
    """The settings ``out``'s pieces were drawn with, as its trace records them (its ``meta['sampling']`` beside the
    ``output.draw.*`` sites), or None when it was not sampled: what the page says of a run is the run's own, a
    replayed trace's too, whatever the page's widgets hold."""
    how = out.trace.meta.get("sampling")
    if not how or draw_site("prob") not in out.trace:
        return None
    return (float(how["temperature"]), how["top_k"], how["top_p"], int(how["seed"]))


def draw_section(shown: core.Translation, step: int, sampling: runs.SamplingKey) -> None:
    """At ``step``: the model's distribution and the one the piece was drawn from, and what the draw did, as
    decoding recorded them in ``shown``'s trace, drawn with ``sampling`` (``drawn_with(shown)``)."""
    found = trace_draws(shown.trace)
    if step >= len(found):
        return
    d = found[step]
    temperature, top_k, top_p, _ = sampling
    note = f"{selection.options_note(shown.options)}, {claims_sampling.settings(*sampling)}"
    fig = figure.draw_bars(
        d.pieces, d.before, d.after, d.drawn, d.cut_pieces, title=style.titled(f"The draw at step {step + 1}", note)
    )
    export.chart(fig, f"sampling_step{step + 1}", key="sampling_chart")
    said = claims_sampling.draw_claim(
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        piece=style.token_text(d.piece),
        before=d.before[d.drawn],
        after=d.after[d.drawn],
        rank=d.rank,
        kept=d.kept,
        cut=d.cut,
    )
    st.caption(
        f"{said} Grey: the model's probabilities as greedy decoding reads them; blue: the distribution the piece "
        "was drawn from. The probability shown for each step above stays the model's own."
    )


def settings_note(sampling: runs.SamplingKey) -> None:
    """Under the sampled translation: how it was drawn, and that the link replays it."""
    st.caption(
        f"Sampled: each piece drawn at {claims_sampling.settings(*sampling)}. The same settings and seed (this "
        "page's link carries them) draw the same translation. The steps below walk through the draws."
    )
