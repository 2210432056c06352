"""Masks: padding, causal and the combined mask actually applied; scores → −∞ → softmax for one query."""

from __future__ import annotations

from functools import partial

import numpy as np
import streamlit as st

import core
from core.sites import keep_site, position_bias_site
from viz_app import claims
from viz_app.figures import masking, style
from viz_app.session import checkpoints, errors, params, runs, selection, trace_replay, url
from viz_app.widgets import export, markup, pickers, sentence_bar

PAD = "<pad>"

st.title("Masks")
st.caption(
    "A mask says which keys a query may look at. Blocked scores are set to −∞ before the softmax, so "
    "their weight becomes exactly 0. The **padding mask** hides the `<pad>` filler of shorter sentences "
    "in a batch; the **causal mask** stops the decoder from peeking at later target words."
)


def _mirror(name: str) -> None:
    st.session_state[name] = st.session_state[f"masks_{name}"]


out = sentence_bar.sentence_bar("First sentence")
replaying = trace_replay.replay() is not None
if out is not None:
    if not replaying:  # a second sentence and the switches run the model again
        st.text_input(
            "Second sentence (optional) — makes a padded batch of two, so the padding mask has real "
            "`<pad>` tokens to hide",
            key="text2",
            placeholder="e.g. a much longer sentence",
        )
        t1, t2, _ = st.columns([1, 1, 2])
        for col, name, label in ((t1, "padding", "Padding mask"), (t2, "causal", "Causal mask")):
            st.session_state[f"masks_{name}"] = st.session_state.get(name, True)  # mirrors the sidebar switch
            col.toggle(label, key=f"masks_{name}", on_change=_mirror, args=(name,))
    opts = out.options if replaying else selection.options()
    note = selection.options_note(opts, out.beam_size)
    second = "" if replaying else selection.with_target_code(st.session_state.get("text2", "").strip())
    trace, texts = out.trace, [out.text]
    texts_in = (selection.sentence(), second)
    batch: list[core.Translation] | None = None
    if second:
        batch = errors.guarded(
            lambda: runs.translate_batch(
                checkpoints.ckpt_path(), (selection.sentence(), second), runs.options_key(opts)
            ),
            refused="Cannot make a batch with the second sentence.",
        )
        if batch is not None:
            texts = [one.text for one in batch]
            pieces = [int(one.trace[keep_site("src")].sum()) for one in batch]  # each sentence's, for the labels
            item = st.radio(
                "Look at",
                [0, 1],
                horizontal=True,
                key="mask_item",
                format_func=lambda i: f"sentence {i + 1} ({pieces[i]} pieces)",
            )
            trace = batch[item].trace
            note = selection.options_note(opts) + ", batch of 2 (greedy)"
    src = trace.src_tokens
    tgt = trace.tgt_tokens
    cols = st.columns(len(texts))
    for i, (col, text) in enumerate(zip(cols, texts, strict=True)):
        col.markdown(f"**Translation{f' {i + 1}' if len(texts) > 1 else ''}:** {markup.md(text) or '∅'}")
    baseline = opts.with_changes(causal_mask=True, padding_mask=True)  # every other switch as it is
    if opts != baseline and not second and not replaying:
        ref = selection.current(opts=baseline)
        if ref is not None:
            masks_off = core.InferenceOptions(causal_mask=opts.causal_mask, padding_mask=opts.padding_mask)
            st.caption(
                f"With both masks on the translation is: *{markup.md(ref.text) or '∅'}* — with the "
                f"{masks_off.describe()} the model writes {claims.output_change(ref.text, out.text)}."
            )

    if "mask_kind" not in st.session_state:  # this page opens on the decoder, where both masks are at work
        st.session_state["mask_kind"] = "decoder" if "decoder" in trace.kinds else trace.kinds[0]
    kind = pickers.kind_picker(trace.kinds, key="mask_kind")
    q_tokens, k_tokens = style.query_key_tokens(kind, src, tgt)
    n_q, n_k = len(q_tokens), len(k_tokens)
    padding = trace.mask(kind, "padding")  # the mask's parts, as the trace recorded them
    causal = trace.mask(kind, "causal") if kind == "decoder" else np.ones((n_q, n_k), dtype=bool)
    pad_title = "padding" + ("" if opts.padding_mask else " (off)")
    causal_title = "causal" + (" (not used)" if kind != "decoder" else "" if opts.causal_mask else " (off)")
    panels = {pad_title: padding, causal_title: causal, "applied": trace.mask(kind)}  # short: titles never overlap
    fig = masking.mask_panels(
        panels, q_tokens, k_tokens, title=style.titled(f"Masks of the {params.KINDS[kind]}", note)
    )
    export.chart(fig, f"masks_{kind}", key="mask_panels")
    st.caption(
        "Left: the padding mask (the decoder's own inputs are never padded here, so for decoder self-attention it "
        "allows everything); middle: the causal mask (decoder self-attention only); right: what was applied, both "
        "combined."
    )
    bundle = selection.bundle() if batch is not None else None
    if bundle is not None:  # the batch's sentences are truncated like single ones: say so for each
        for i, text in enumerate(texts_in):
            encoded = errors.guarded(partial(bundle.encode_source, text, truncate=True))
            for notice in encoded[1] if encoded is not None else ():
                st.warning(f"Sentence {i + 1}: {notice}", icon=":material/info:")
    if PAD not in src:
        if second:
            picked = int(st.session_state.get("mask_item", 0)) + 1
            st.caption(
                f"Sentence {picked} is the longest of the batch, so it has no `<pad>` tokens and its padding mask "
                f"allows everything: look at sentence {3 - picked} to see the mask at work."
            )
        else:
            st.caption(
                "This sentence has no `<pad>` tokens, so the padding mask allows everything. "
                "Add a second, longer sentence above to see it at work."
            )

    st.subheader("One query through the three stages", divider="gray")
    layer, head = pickers.layer_head_pickers(trace.n_layers[kind], trace.n_heads)
    url.clamp("query", list(range(n_q)))
    query = st.select_slider(
        "Query token", list(range(n_q)), key="query", format_func=lambda i: f"{i + 1} {style.token_text(q_tokens[i])}"
    )
    weights = trace.attention(kind, layer)[head, query]
    raw = trace.scores(kind, layer, masked=False)[head, query]  # (Tk,) blocked keys' scores before the mask
    model = None if replaying else selection.bundle()
    cfg = model.config if model is not None else None  # None: a replayed trace, the model not at hand
    bias_site = position_bias_site("src" if kind == "encoder" else "tgt")  # T5's, recorded (zeros when off)
    fig = masking.mask_stages(
        raw,
        trace.mask(kind)[query],
        weights,
        k_tokens,
        scores=masking.score_label(
            None if cfg is None else cfg.attention_scale, kind != "cross" and bias_site in trace
        ),
        title=style.titled(
            f"{params.KINDS[kind].capitalize()} · layer {layer + 1} · head {head + 1} · "
            f"query {query + 1} “{style.token_label(q_tokens[query])}”",
            note,
        ),
    )
    export.chart(fig, "mask_stages", key="mask_stages")
    blocked = int((~trace.mask(kind)[query]).sum())
    st.caption(
        f"{blocked} of {n_k} keys are blocked for this query; their weights are exactly 0 "
        f"(sum of the weights: {weights.sum():.4f})."
    )
