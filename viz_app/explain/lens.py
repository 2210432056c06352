"""The "Logit lens" tab: at each output step, what each decoder layer would say if it were the last — its residual
stream read through the final norm and the output layer — and the layer from which the model settles on each piece."""

from __future__ import annotations

import streamlit as st

import core
from core.analysis.lens import LogitLens
from viz_app import claims_explain
from viz_app.explain import analysis_store
from viz_app.explain.common import how_to_read, needs_model
from viz_app.figures import lens as figures
from viz_app.figures import style
from viz_app.session import checkpoints, errors, runs, selection
from viz_app.widgets import export


def tab(out: core.Translation) -> None:
    """Draw the tab for ``out`` (a greedy translation)."""
    how_to_read(
        "Each cell is one decoder layer (rows, the last at the top) at one output step (columns): that layer's "
        "residual stream is passed through the decoder's final norm and the output layer, as if it were the last "
        "layer, and turned into a distribution over the next piece the way decoding does. The colour is the "
        "probability it gives the piece the model finally chose; the word written in the cell is its own top "
        "choice; hover for its top five. The last row is the model's own distribution.\n\n"
        "**What it is not**: the earlier layers were never trained to be read this way. A layer whose lens looks "
        "wrong may hold the answer in a form only the later layers turn into logits (a *tuned lens* learns that "
        "map); the lens shows when the output layer can already read the choice, not when the model 'decided'."
    )
    found = LogitLens.from_trace(out.trace)  # a saved trace that holds its lens replays it
    if found is None:
        if needs_model():
            return
        path, text = checkpoints.ckpt_path(), selection.sentence()
        key = runs.options_key(out.options.with_changes(shortlist=False))  # the lens reads the whole vocabulary
        shortlisted, ids = bool(out.options.shortlist), tuple(out.output_ids)
        found = errors.guarded(lambda: runs.lens(path, text, key, ids, shortlisted))  # cached: once per translation
        if found is None:
            return
        analysis_store.remember(out, *found.to_arrays())  # the page's export carries it
    title = style.titled("Logit lens: each decoder layer read as the last", selection.options_note(out.options))
    fig = figures.lens_grid(found.chosen_prob, found.top_pieces, found.top_probs, found.chosen, title=title)
    export.chart(fig, "logit_lens", key="explain_lens")
    st.markdown(claims_explain.lens_note(found.chosen, found.first_top, found.n_layers))
