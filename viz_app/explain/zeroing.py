"""The "Value zeroing" tab: how much each token's layer output depends on each other token (Mohebbi et al. 2023:
zero one token's value vectors, run the layer again, measure how far each output moved), beside the heads' mean
attention and ALTI+, with how closely their rankings agree."""

from __future__ import annotations

import streamlit as st

import core
from core.analysis.alignment import normalised
from core.analysis.contributions import Contributions
from core.analysis.value_zeroing import ValueZeroing, mean_agreement, rank_agreement, value_zeroing
from viz_app import claims_explain
from viz_app.cache import cached
from viz_app.explain import analysis_store
from viz_app.explain.common import how_to_read, needs_model
from viz_app.figures import attention_maps, style
from viz_app.session import checkpoints, errors, params, runs, selection, url
from viz_app.session.runs import OptionsKey
from viz_app.session.server import load_bundle
from viz_app.widgets import export


@cached("Zeroing each token's values, layer by layer (value zeroing) …")
def measured(path: str, text: str, key: OptionsKey, output_ids: tuple[int, ...]) -> ValueZeroing:
    """Cached value zeroing of the page's translation (its output ids: not decoded again), over the whole
    vocabulary, as the page's analyses run (``runs.analysis_options``)."""
    bundle = load_bundle(path)
    return value_zeroing(bundle, text, options=runs.analysis_options(key), output_ids=output_ids)


def tab(out: core.Translation) -> None:
    """Draw the tab for ``out`` (a greedy translation)."""
    how_to_read(
        "**Value zeroing** asks each layer directly: zero token *j*'s value vectors in every head of one attention "
        "block (its attention weights untouched), run the layer again, and measure how far each other token *i*'s "
        "output moved (cosine distance); each row is then scaled to sum to 1. Unlike an attention weight, it counts "
        "what the values carry and what the rest of the layer (the feed-forward, the norms) makes of it. The "
        "**whole model** row of an output word composes the layers, as the authors compose them.\n\n"
        "**What it is not**: zeroing a value is an intervention the model never saw in training; a large change "
        "says the layer's output depends on that token here, not that the token 'means' anything to it. "
        "**Agreement** is Spearman's rank correlation between a value-zeroing row and the same row of the heads' "
        "mean attention (or of ALTI+): 1 = the same order of tokens."
    )
    found = ValueZeroing.from_trace(out.trace)  # a saved trace that holds it replays it
    alti = Contributions.from_trace(out.trace)
    if found is None:
        if needs_model():
            return
        path = checkpoints.ckpt_path()
        key = runs.options_key(out.options)
        text = selection.sentence()
        found = errors.guarded(lambda: measured(path, text, key, tuple(out.output_ids)))
        alti = errors.guarded(lambda: runs.contributions(path, text, key))
        if found is None:
            return
        analysis_store.remember(out, *found.to_arrays())  # the page's export carries it
    for note in found.notes:
        st.info(note, icon=":material/info:")
    note = selection.options_note(out.options)
    rows, _ = style.query_key_tokens("cross", found.source_pieces, found.prefix_pieces, found.target_pieces)
    c1, c2 = st.columns(2)
    with c1:
        title = style.titled("Value zeroing, whole model: output words × source", note)
        fig = attention_maps.head_heatmap(found.source, rows, found.source_pieces, title=title)
        export.chart(fig, "value_zeroing_source", key="zeroing_source")
    if alti is not None and alti.source_matrix.shape == found.source.shape:  # the same translation scored by both
        with c2:
            title = style.titled("ALTI+, whole model: output words × source", note)
            share = normalised(alti.source_matrix)
            fig = attention_maps.head_heatmap(share, rows, found.source_pieces, title=title)
            export.chart(fig, "alti_source", key="zeroing_alti")
        rho = rank_agreement(found.source, alti.source_matrix)
        st.markdown(claims_explain.zeroing_alti_note(mean_agreement(rho)))
    kinds = list(found.layers)
    url.clamp("zeroing_kind", kinds)
    kind = st.radio(
        "Layer by layer", kinds, key="zeroing_kind", horizontal=True, format_func=lambda k: params.KINDS[k].capitalize()
    )
    n_layers = found.layers[kind].shape[0]
    url.clamp("zeroing_layer", list(range(n_layers)))
    layer = st.selectbox("Layer", list(range(n_layers)), key="zeroing_layer", format_func=lambda i: f"layer {i + 1}")
    q_tokens, k_tokens = style.query_key_tokens(kind, found.source_pieces, found.prefix_pieces, found.target_pieces)
    c1, c2 = st.columns(2)
    where = f"{params.KINDS[kind]} · layer {layer + 1}"
    with c1:
        fig = attention_maps.head_heatmap(
            found.layers[kind][layer], q_tokens, k_tokens, title=style.titled(f"Value zeroing: {where}", note)
        )
        export.chart(fig, "value_zeroing_layer", key="zeroing_layer_map")
    with c2:
        fig = attention_maps.head_heatmap(
            found.attention[kind][layer], q_tokens, k_tokens, title=style.titled(f"Mean attention: {where}", note)
        )
        export.chart(fig, "mean_attention_layer", key="zeroing_attention_map")
    per_layer = [mean_agreement(row) for row in found.attention_agreement(kind)]  # each layer's (Tq,) rows
    st.markdown(claims_explain.zeroing_attention_note(params.KINDS[kind], per_layer))
