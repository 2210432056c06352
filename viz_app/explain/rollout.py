"""The "Attention rollout" tab: attention followed through every layer to the source words each output word draws
on, with special tokens (attention sinks) set aside on request."""

from __future__ import annotations

import streamlit as st

import core
from core.analysis import FUSIONS, trace_rollout
from core.analysis.rollout import concentration, set_aside, special_positions
from viz_app import claims_explain
from viz_app.explain.common import how_to_read
from viz_app.figures import explain, style
from viz_app.session import selection, url
from viz_app.widgets import export, share_links


def tab(out: core.Translation) -> None:
    """Draw the tab for ``out`` (a greedy translation)."""
    how_to_read(
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
    shown, positions = per_output, list(range(len(out.src_tokens)))
    if aside:
        shown = set_aside(per_output, special)
        positions = [j for j in positions if j not in special]  # each kept token keeps its place in the sentence
    fig = explain.rollout_heatmap(
        shown,
        out.output_tokens,
        [out.src_tokens[j] for j in positions],
        src_positions=positions,
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
    share_links.share_links("rollout")
