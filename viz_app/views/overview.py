"""Translate & overview: the translation, its tokens, and every layer × head of every attention kind."""

from __future__ import annotations

import numpy as np
import streamlit as st

import core
from viz_app import claims
from viz_app.figures import attention_maps, overview, style
from viz_app.session import checkpoints, errors, params, runs, selection, trace_replay, url
from viz_app.widgets import ablation, export, header, markup, pickers, scale, sentence_bar

st.title("Translate & overview")
st.caption(
    "Type a sentence, press Enter, and see the translation together with what every attention head "
    "looked at. Each small square is one head: rows are the tokens that ask (queries), columns the "
    "tokens they look at (keys); darker = more attention."
)


def _difference_runs(out: core.Translation) -> tuple[core.Translation, core.Translation] | None:
    """The as-trained translation fed (teacher-forced) through the model as trained and with the switches: the
    same decoder inputs, so every map has the same shape and the difference is the switches' doing."""
    if out.options == core.InferenceOptions() or trace_replay.replay() is not None:
        return None
    trained = selection.current(beam=out.beam_size, opts=core.InferenceOptions())
    if trained is None or not trained.text:
        return None
    path, text = checkpoints.ckpt_path(), selection.sentence()
    forced = errors.guarded(
        lambda: tuple(
            runs.rerun(path, text, trained.output_ids, runs.options_key(o))
            for o in (core.InferenceOptions(), out.options)
        )
    )
    return (forced[0], forced[1]) if forced else None


def _generation_rows(out: core.Translation, kind: str) -> tuple[list[np.ndarray], np.ndarray | None] | None:
    """With the causal mask off: each decoding step's own rows (what the model computed while generating), and
    for decoder self-attention the mask of keys that existed at that step; None when there is nothing to show."""
    trace = out.trace
    if out.options.causal_mask or kind == "encoder" or kind not in trace.kinds:
        return None
    if trace.step_rows(kind, 0) is None:
        return None
    maps = [np.asarray(trace.step_rows(kind, layer)) for layer in range(trace.n_layers[kind])]
    n_q, n_k = maps[0].shape[1:]
    mask = np.tril(np.ones((n_q, n_k), dtype=bool)) if kind == "decoder" else None
    return maps, mask


out = sentence_bar.sentence_bar()
if out is not None:
    header.translation_header(out)
    c1, c2 = st.columns(2)
    with c1:
        st.markdown("**Source pieces** (encoder input)")
        markup.token_pills(out.src_tokens)
    with c2:
        st.markdown("**Output pieces** (what the decoder predicted)")
        markup.token_pills(out.output_tokens)
    st.caption(
        f"`␣` marks a piece that starts a new word; `</s>` ends the sentence; `{out.trace.start_piece}` starts the "
        "decoder."
    )

    trace = out.trace
    note = selection.options_note(out.options, out.beam_size)
    kinds = ["encoder", "decoder", "cross"]
    labels = [params.KINDS[k].capitalize() if k in trace.kinds else "Decoder (SSRU, no self-attention)" for k in kinds]
    show, diff = "run", None
    if out.options != core.InferenceOptions() and trace_replay.replay() is None:
        url.clamp("overview_show", ["run", "difference"])
        show = st.radio(
            "The maps show",
            ["run", "difference"],
            key="overview_show",
            horizontal=True,
            format_func=lambda v: (
                "this run"
                if v == "run"
                else "what the switches change (with switches − as trained, on the as-trained translation)"
            ),
        )
        if show == "difference":  # the two teacher-forced passes run only when asked for
            diff = _difference_runs(out)  # (as trained, switched); None when the as-trained output is empty
            if diff is None:
                st.info("As trained the model writes nothing here, so there is no translation to compare on.")
                show = "run"
    bundle = selection.bundle() if trace_replay.replay() is None else None
    if bundle is not None:
        ablation.head_matrix(bundle.config)
    fixed = scale.fixed_scale(disabled=show == "difference")  # differences: a scale centred on 0 of their own
    url.clamp("overview_tab", labels)
    tabs = st.tabs(labels, key="overview_tab", on_change="rerun")  # lazy: only the open tab is drawn
    axes = {kind: style.query_key_tokens(kind, out.src_tokens, out.tgt_tokens, out.output_tokens) for kind in kinds}
    for kind, tab in zip(kinds, tabs, strict=True):
        if not tab.open:
            continue
        with tab:
            if kind not in trace.kinds:
                st.info(
                    "This model's decoder has **no self-attention**: it is an SSRU (a simple recurrent unit) "
                    "that carries a memory from step to step. Its forget gates decide, per dimension, how much "
                    "of that memory to keep (1) or overwrite (0).",
                    icon=":material/info:",
                )
                for layer in range(trace.n_layers.get("cross", 0)):
                    title = style.titled(f"SSRU forget gates · decoder layer {layer + 1}", note)
                    fig = overview.ssru_gates(trace.gates(layer), out.tgt_tokens, title=title)
                    export.chart(fig, f"ssru_gates_L{layer + 1}", key=f"ssru_{layer}")
                continue
            q_tokens, k_tokens = axes[kind]
            maps = [trace.attention(kind, layer) for layer in range(trace.n_layers[kind])]
            mask: np.ndarray | None = trace.mask(kind)  # None: no mask drawn
            as_generated = _generation_rows(out, kind)
            if as_generated is not None and show != "difference":
                rows = st.radio(
                    "Rows shown (the causal mask is off)",
                    ["generation", "recompute"],
                    key=f"causal_rows_{kind}",
                    horizontal=True,
                    format_func=lambda v: (
                        "as each step computed them during generation"
                        if v == "generation"
                        else "recomputed over the finished output (what a teacher-forced pass sees)"
                    ),
                )
                if rows == "generation":
                    maps, mask = as_generated
                    masked = selection.current(beam=out.beam_size, opts=out.options.with_changes(causal_mask=True))
                    if masked is not None:
                        st.caption(
                            claims.causal_off(masked.text, out.text)
                            + "The other view recomputes every row over the finished output: there early rows look "
                            "at later words, which never happened during generation. To see the leak itself, open "
                            "the token-by-token comparison at the top: fed the as-trained translation, each "
                            "position can read the piece it must predict next."
                        )
            if show == "difference" and diff is not None:
                trained_run, switched_run = diff
                maps = [
                    switched_run.trace.attention(kind, layer) - trained_run.trace.attention(kind, layer)
                    for layer in range(trace.n_layers[kind])
                ]
                q_tokens, k_tokens = style.query_key_tokens(
                    kind, trained_run.src_tokens, trained_run.tgt_tokens, trained_run.output_tokens
                )
                mask = None
            ablated = [(l, h) for k, l, h in out.options.ablate if k == kind]
            selected = (
                (st.session_state.get("layer", 0), st.session_state.get("head", 0))
                if st.session_state.get("kind") == kind
                else None
            )
            title = style.titled(f"{params.KINDS[kind].capitalize()}: every layer × head", note)
            roles = {h: ", ".join(x) for h, x in pickers.head_labels(kind).items()}
            if show == "difference":
                title = f"{params.KINDS[kind].capitalize()}: every layer × head — change made by {note}"
            fig = attention_maps.attention_grid(
                maps,
                q_tokens,
                k_tokens,
                title=title,
                mask=mask,
                options=attention_maps.GridOptions(
                    ablated=ablated,
                    selected=selected,
                    head_labels=roles,
                    diverging=show == "difference",
                    fixed_scale=fixed,
                ),
            )
            export.chart(fig, f"{kind}_grid", key=f"grid_{kind}")
            st.caption(
                "Hover a square for the exact weights; pick a head below to open it large (it gets a red outline here)."
            )

    st.subheader("One head, large", divider="gray")
    kind = pickers.kind_picker(trace.kinds)
    layer, head = pickers.layer_head_pickers(trace.n_layers[kind], trace.n_heads, kind=kind)
    q_tokens, k_tokens = axes[kind]
    name = f"{params.KINDS[kind].capitalize()} · layer {layer + 1} · head {head + 1}"
    if show == "difference" and diff is not None:
        trained_run, switched_run = diff
        q_tokens, k_tokens = style.query_key_tokens(
            kind, trained_run.src_tokens, trained_run.tgt_tokens, trained_run.output_tokens
        )
        fig = attention_maps.head_heatmap(
            switched_run.trace.attention(kind, layer)[head] - trained_run.trace.attention(kind, layer)[head],
            q_tokens,
            k_tokens,
            title=f"{name} — change made by {note} (red: more attention with the switches)",
            values="difference",
        )
    else:
        fig = attention_maps.head_heatmap(
            trace.attention(kind, layer)[head],
            q_tokens,
            k_tokens,
            title=style.titled(name, note),
            mask=trace.mask(kind),
            fixed_scale=fixed,
        )
    export.chart(fig, f"{kind}_L{layer + 1}_H{head + 1}", key="overview_head")
    st.page_link(
        "views/head_detail.py",
        label="More options for this head (scores, mean/max over heads) → Head detail",
        icon=":material/zoom_in:",
    )
    export.export_trace(out)
