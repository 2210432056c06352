"""The translation header: the translation, the options it was made with, the teacher beside a distilled
student, and with switches on the as-trained translation beside it.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

import core
from core.sites import output_site
from viz_app import claims, claims_rules
from viz_app.figures import overview
from viz_app.figures.style import token_text
from viz_app.session import checkpoints, errors, runs, selection, trace_replay
from viz_app.widgets import teacher
from viz_app.widgets.export import chart
from viz_app.widgets.markup import EMPTY, marked_words, md


def translation_header(out: core.Translation) -> None:
    """The translation in large type plus the options it was made with; with switches on, the as-trained
    translation beside it (changed words marked) and what the switches do to its probabilities."""
    note = selection.options_note(out.options, out.beam_size)
    st.markdown(f"#### {md(out.text) or EMPTY}")
    source, output = (
        claims.counted(len(out.src_tokens), "source piece"),
        claims.counted(len(out.output_tokens), "output piece"),
    )
    st.caption(f"Translation · {source} → {output} · {note}")
    rules_note(out)
    teacher.beside(out)  # a distilled model: its teacher's translation, the differing words marked
    if out.options != core.InferenceOptions() and trace_replay.replay() is None:
        before_after(out)


def rules_note(out: core.Translation) -> None:
    """Which generation rules of the model's folder shaped this output, read from its trace (nothing for a model
    without any: every checkpoint trained here)."""
    said = claims_rules.rules_in_force_of(out.trace.meta)
    if said:
        st.caption(said)


def before_after(out: core.Translation) -> None:
    """As trained next to the current translation, and the as-trained output's tokens scored by both models."""
    note = selection.options_note(out.options, out.beam_size)
    if not out.text:
        why = (
            "Without positions in the decoder every step looks alike to it, and this model answers by ending the "
            "sentence at once. "
            if not out.options.pe_on("tgt")
            else ""
        )
        st.caption(
            f"With these switches ({note}) the model ends the sentence at once. {why}The maps below show what it "
            "looked at instead; the token-by-token comparison feeds the as-trained translation through the "
            "switched model, so you still see what changes. **Reset switches** in the sidebar brings the normal "
            "translation back."
        )
        if checkpoints.selected() and (not out.options.pe_on("src") or not out.options.pe_on("tgt")):
            st.page_link(
                "views/positional.py", label="Compare the maps with and without positions", icon=":material/waves:"
            )
    trained = selection.current(beam=out.beam_size, opts=core.InferenceOptions()) if checkpoints.selected() else None
    if trained is None:
        return
    if trained.text == out.text:
        only_shortlist = out.options == core.InferenceOptions(shortlist=True)  # it leaves attention alone
        st.caption(claims.switches_effect(trained, out, note, shortlist_only=only_shortlist))
    else:
        before, after = marked_words(trained.text, out.text)
        c1, c2 = st.columns(2)
        c1.markdown(f"**As trained:** {before}")
        c2.markdown(f"**With {md(note)}:** {after}")
    if not trained.text:
        return
    path = checkpoints.ckpt_path()
    text = selection.sentence()
    forced = errors.guarded(lambda: runs.rerun(path, text, trained.output_ids, runs.options_key(out.options)))
    if forced is None:
        return
    with st.expander("How likely is the as-trained translation with these switches? (token by token)"):
        tokens = [token_text(t) for t in trained.output_tokens]
        p_trained = np.asarray(trained.trace[output_site("probs")], dtype=np.float64)
        p_switched = np.asarray(forced.trace[output_site("probs")], dtype=np.float64)
        n = min(len(tokens), len(p_trained), len(p_switched))
        chart(
            overview.token_logprob_bars(tokens[:n], p_trained[:n], p_switched[:n], note=note),
            "as-trained-logprobs",
            key="before_after_logp",
        )
        st.caption(
            "Each as-trained output piece, fed to the decoder one after the other (teacher forcing): its "
            "log-probability as trained and with the switches. A bar far below its partner is a piece the switched "
            "model would not have written there."
        )
        if not out.options.causal_mask:  # why the pieces move, counted from the two passes
            st.caption(claims.causal_leak_effect(p_trained[:n], p_switched[:n]))
