"""Positional encoding: the PE table, its curves and similarities, the values added in this run, and a
live comparison of the model with and without it."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np
import streamlit as st

import core
from core.anatomy.positions import position_rows
from core.sites import Side, position_bias_site
from viz_app import claims
from viz_app.figures import attention_maps, positional, style
from viz_app.positional import describe, relative
from viz_app.session import checkpoints, errors, params, runs, selection, server, trace_replay, url
from viz_app.widgets import export, header, markup, scale, sentence_bar

st.title("Positional encoding")
st.caption(
    "Attention itself ignores word order: a sentence is a *set* of vectors to it. A Transformer gives it a "
    "position signal so that order can matter: a vector added to every token embedding (the paper's sinusoids, or "
    "a learned table), or a bias added to the attention scores by distance (T5). Switch it off to see what breaks."
)


TABLE_SIDES = {"src": "the source's", "tgt": "the target's"}
WORD_ORDER = {  # pairs whose meaning is in the order alone: without positions the encoder cannot tell them apart
    "en": [("The dog bit the man.", "The man bit the dog."), ("Anna called Peter.", "Peter called Anna.")],
    "pt": [("O cão mordeu o homem.", "O homem mordeu o cão."), ("A Ana ligou ao Pedro.", "O Pedro ligou à Ana.")],
}


@st.cache_data(max_entries=16, show_spinner=False)
def _table(path: str, side: str, n: int) -> np.ndarray:
    """(n, d_model) position rows ``side`` adds, as the model adds them (``position_rows``): sinusoids, or the learned
    rows (at most as many as it has), from its row offset on. A read-only copy."""
    return position_rows(server.load_bundle(path).model, "tgt" if side == "tgt" else "src", n)


def _table_tab(path: str, cfg: core.ModelConfig) -> None:
    """The PE table itself: matrix, curves per dimension, similarity between positions."""
    table_rows = cfg.position_rows  # a learned table's rows bound the slider; sinusoids have no end
    top = 256 if table_rows is None else min(256, table_rows)
    if int(st.session_state.get("pe_n", 64)) > top:  # a larger value chosen for another model
        st.session_state["pe_n"] = top
    if top <= 8:  # a table this small is shown whole
        n = top
    else:
        n = st.slider("Positions shown", 8, top, min(64, top), step=8 if top % 8 == 0 else 1, key="pe_n")
    side = "src"
    if cfg.separate_positions:
        side = st.radio("Table", ["src", "tgt"], key="pe_table_side", horizontal=True, format_func=TABLE_SIDES.get)
    table = _table(path, side, n)
    learned = cfg.positional == "learned"
    what = f"Learned position table{' (' + TABLE_SIDES[side] + ')' if cfg.separate_positions else ''}"
    k = cfg.position_offset
    offset = f" (position 1 = table row {k + 1})" if k else ""  # rows counted from 1, as positions
    # built at each rerun: st.cache_data would hand out an unpickled copy, which costs as much (about 25 ms at 256)
    export.chart(
        positional.pe_matrix(
            table,
            title=f"{what if learned else 'Positional-encoding table'}: {table.shape[0]} positions × "
            f"{table.shape[1]} dimensions{offset}",
        ),
        "pe_table",
        key="pe_table",
    )
    d = table.shape[1]
    dims = st.multiselect("Dimensions to plot", list(range(d)), default=sorted({0, 1, d // 8, d // 4}), key="pe_dims")
    c1, c2 = st.columns(2)
    with c1:
        export.chart(
            positional.pe_curves(table, dims, title="PE value by position, per dimension"), "pe_curves", key="pe_curves"
        )
        st.caption(
            "Each line is one dimension of the learned vectors, read along the positions."
            if learned
            else "Low dimensions oscillate fast, high ones slowly: together they give every position a "
            "unique pattern, like the hands of a clock."
        )
    with c2:
        export.chart(
            positional.pe_similarity(
                table,
                cosine=learned,
                title="Cosine similarity between positions" if learned else "PE·PE similarity between positions",
            ),
            "pe_similarity",
            key="pe_similarity",
        )
        st.caption(
            "Cosine similarity of two positions' learned vectors (1: the same direction). A bright band along the "
            "diagonal means neighbouring positions learned similar vectors."
            if learned
            else "The dot product depends mostly on the distance between two positions, which makes "
            "relative positions easy to pick up."
        )


def _run_tab(out: core.Translation, note: str) -> None:
    """The PE rows actually added to this sentence's tokens (zeros when switched off on that side)."""
    sides: tuple[tuple[Side, Sequence[str], str], ...] = (
        ("src", out.src_tokens, "source"),
        ("tgt", out.tgt_tokens, "decoder input"),
    )
    for side, tokens, label in sides:
        added = out.trace.positional_encoding(side)
        fig = positional.pe_matrix(
            added, tokens=tokens, title=style.titled(f"PE values added to the {label} tokens", note)
        )
        export.chart(fig, f"pe_added_{side}", key=f"pe_added_{side}")
        off = claims.pe_off(label, added)  # read from the trace: what was added, not what the sidebar says
        if off:
            st.info(off, icon=":material/info:")


def _compare_grids(a: core.Translation, b: core.Translation, compared: claims.PEComparison) -> None:
    """Every attention map as trained and with PE switched off (same decoder inputs), and their difference."""
    kinds = list(a.trace.kinds)
    if compared.switched.pe_on("src"):  # positions off on the decoder only: the encoder's maps cannot change
        kinds = [k for k in kinds if k != "encoder"] + [k for k in kinds if k == "encoder"]  # open where they do
    labels = [params.KINDS[k].capitalize() for k in kinds]
    url.clamp("pe_cmp_tab", labels)
    names = {
        "with": compared.as_trained_label,
        "without": compared.switched_label,
        "difference": f"the difference ({compared.switched_label} − as trained)",
    }
    fixed = scale.fixed_scale()  # the weights' colours (a difference: a scale centred on 0 of its own)
    for kind, tab in zip(kinds, st.tabs(labels, key="pe_cmp_tab", on_change="rerun"), strict=True):
        if not tab.open:
            continue
        with tab:
            q_tok, k_tok = style.query_key_tokens(kind, a.src_tokens, a.tgt_tokens)
            n_layers = a.trace.n_layers[kind]
            maps_a = [a.trace.attention(kind, l) for l in range(n_layers)]
            maps_b = [b.trace.attention(kind, l) for l in range(n_layers)]
            off = [(l, h) for k, l, h in compared.as_trained.ablate if k == kind]
            show = st.radio(
                "Show",
                ["with", "without", "difference"],
                key=f"pe_cmp_show_{kind}",
                horizontal=True,
                index=2,
                format_func=names.get,
            )  # one grid at full width: two side by side leave a few pixels per token
            if show == "difference":
                maps = [mb - ma for ma, mb in zip(maps_a, maps_b, strict=True)]
                title = (
                    f"Difference ({compared.switched_label} − as trained), {params.KINDS[kind]} — red: more attention "
                    f"{compared.switched_label}, blue: less"
                )
            else:
                maps = maps_a if show == "with" else maps_b
                opts = compared.as_trained if show == "with" else compared.switched
                title = style.titled(claims.first_upper(names[show]), selection.options_note(opts))
            export.chart(
                attention_maps.attention_grid(
                    maps,
                    q_tok,
                    k_tok,
                    title=title,
                    options=attention_maps.GridOptions(
                        ablated=off,
                        diverging=show == "difference",
                        fixed_scale=fixed,
                    ),
                ),
                f"{kind}_pe_{show}",
                key=f"cmp_{kind}",
            )
            if show == "difference":
                st.caption(claims.maps_change(maps_a, maps_b))


def _encoder_outputs(
    path: str, pair: tuple[str, str], keys: Sequence[runs.OptionsKey]
) -> list[list[tuple[list[str], np.ndarray]]]:
    """Each sentence of ``pair`` through the encoder, for each switch setting in ``keys``: [setting][sentence]."""
    return [[runs.encoder_output(path, s, k) for s in pair] for k in keys]


def _word_order(out: core.Translation) -> None:
    """Built-in pairs whose meaning is in the word order alone, translated as trained and with PE switched off,
    and what the encoder makes of each pair: its two outputs matched piece by piece, with and without positions."""
    bundle = selection.bundle()
    if bundle is None or trace_replay.replay() is not None:
        return
    pairs = WORD_ORDER.get(bundle.languages[0], [])
    if not pairs:
        return
    st.markdown("##### Who did what to whom? Word order without positions")
    compared = claims.pe_comparison(out.options)
    path, beam = checkpoints.ckpt_path(), 1
    keys = runs.options_key(compared.as_trained), runs.options_key(compared.switched)
    rows = errors.guarded(
        lambda: [
            (s, runs.translate(path, s, keys[0], beam).text, runs.translate(path, s, keys[1], beam).text)
            for pair in pairs
            for s in pair
        ]
    )
    if not rows:
        return
    st.dataframe(
        [{"sentence": s, compared.as_trained_label: a or "∅", compared.switched_label: b or "∅"} for s, a, b in rows],
        hide_index=True,
        width="stretch",
    )
    legend = claims.empty_legend([t for _, a, b in rows for t in (a, b)])  # said where the table shows ∅
    if legend:
        st.caption(legend)
    for pair in pairs:
        found = errors.guarded(partial(_encoder_outputs, path, pair, keys))
        if not found:
            continue
        (a_with, b_with), (a_off, b_off) = found
        with_pe = claims.order_comparison(a_with[0], a_with[1], b_with[0], b_with[1])
        switched = claims.order_comparison(a_off[0], a_off[1], b_off[0], b_off[1])
        if with_pe is not None and switched is not None:
            st.markdown(claims.word_order(pair, with_pe, switched, compared.switched_label))
    st.caption(
        "Each pair has the same words in another order. The comparison above is computed live: each piece of the "
        "first sentence is matched with the same piece of the second, and the encoder's output vectors there are "
        "subtracted. Put one of the sentences in the text box and turn on the comparison below to see the "
        "attention maps change."
    )


def _compare_tab(out: core.Translation) -> None:
    """A live toggle: run again with PE switched off; translations and every attention map side by side."""
    compared = claims.pe_comparison(out.options)
    _word_order(out)
    st.toggle(f"Run the model as trained and {compared.switched_label}, and compare", key="compare")
    if not st.session_state.get("compare"):
        st.caption(
            f"Turn the switch on to translate the sentence as trained and {compared.switched_label}, and see every "
            "attention map side by side with the difference."
        )
        return
    base, free = selection.current(opts=compared.as_trained), selection.current(opts=compared.switched)
    if base is None or free is None:
        return
    c1, c2 = st.columns(2)
    c1.markdown(f"**{claims.first_upper(compared.as_trained_label)}:** {markup.md(base.text) or '∅'}")
    c2.markdown(f"**{claims.first_upper(compared.switched_label)}:** {markup.md(free.text) or '∅'}")
    st.caption(
        f"{claims.first_upper(compared.switched_label)} the model writes {claims.output_change(base.text, free.text)}."
    )
    if not base.text:
        st.info("As trained the model produced no words, so there is no output to compare attention on.")
        return
    path, text = checkpoints.ckpt_path(), selection.sentence()
    a = errors.guarded(lambda: runs.rerun(path, text, base.output_ids, runs.options_key(compared.as_trained)))
    b = errors.guarded(lambda: runs.rerun(path, text, base.output_ids, runs.options_key(compared.switched)))
    if a is not None and b is not None:
        st.caption(
            "Both runs are fed the same decoder inputs (the as-trained translation), so every map has the "
            "same shape and can be subtracted."
        )
        _compare_grids(a, b, compared)


out = sentence_bar.sentence_bar()
if out is not None:
    header.translation_header(out)
replaying = trace_replay.replay() is not None
bundle = None if replaying else selection.bundle()
if out is not None and (bundle is not None or replaying):
    cfg = bundle.config if bundle is not None else None
    if cfg is None:
        st.caption(
            "Replaying a saved trace: the values added in this run are in the trace; the PE table and a "
            "run without it need the model."
        )
    elif cfg.positional == "sinusoidal":
        st.latex(describe.PE_FORMULAS[cfg.pe_layout])
        st.caption(describe.summary(cfg))
    else:
        st.markdown(describe.summary(cfg))
    rel = cfg is not None and cfg.positional == "relative"
    tabs = st.tabs(
        ["The learned bias" if rel else "The PE table", "Added in this run", "Switch it off"],
        key="pe_tab",
        on_change="rerun",
        default="Switch it off"
        if st.session_state.get("compare") and not replaying
        else "Added in this run"
        if replaying
        else None,
    )  # lazy: only the open tab runs
    if tabs[0].open:
        with tabs[0]:
            if replaying:
                st.info(
                    "The PE table comes from the model; close the saved trace to see it.", icon=":material/history:"
                )
            elif rel:
                relative.table_tab(checkpoints.ckpt_path())
            elif cfg is not None:
                _table_tab(checkpoints.ckpt_path(), cfg)
    if tabs[1].open:
        with tabs[1]:
            note = selection.options_note(out.options, out.beam_size)
            if rel or position_bias_site("src") in out.trace:  # a replayed T5 trace holds the bias, not PE rows to show
                relative.run_tab(out, note)
            else:
                _run_tab(out, note)
    if tabs[2].open:
        with tabs[2]:
            _compare_tab(out)
