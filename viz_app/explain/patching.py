"""The "Patching" tab: corrupt one word of the sentence, then copy one site at a time from the clean run into the
corrupted one and show how much of an output word's probability each copy brings back."""

from __future__ import annotations

import streamlit as st

import core
from core.analysis.patching import PatchingResult
from viz_app.explain import analysis_store
from viz_app.explain.common import how_to_read, needs_model, replaying
from viz_app.figures import explain, style
from viz_app.session import checkpoints, errors, runs, selection, url
from viz_app.widgets import export, markup


def tab(out: core.Translation) -> None:
    """Draw the tab for ``out`` (a greedy translation)."""
    how_to_read(
        "Corrupt the sentence by **replacing one word** (pick it and type its replacement, or type the whole "
        "sentence again; it must have the same number of pieces). Both sentences are "
        "run on this translation; the corrupted one makes an output word less likely. Then one site at a time "
        "is copied from the clean run into the corrupted run, and the map shows how much of the clean word's "
        "probability that single copy brings back (1 = all of it, 0 = none). A source position that restores "
        "it carries the word; a head that restores it moves it to the decoder. Heads that share the work each "
        "restore little alone."
    )
    if replaying():
        stored = PatchingResult.from_trace(out.trace)
        if stored is None:
            needs_model()
            return
        result, corrupt = stored
        st.markdown(f"Corrupted sentence (from the saved trace): *{markup.md(corrupt)}*")
        _show(out, result)
        return
    how = st.radio("Corrupt it by", ["picking a word", "typing the sentence"], horizontal=True, key="explain_how")
    corrupt = _corrupted(out, how)
    tokens = out.output_tokens
    choice = st.selectbox(
        "Output word to explain",
        ["the most affected"] + [f"{t + 1}: {style.token_text(tok)}" for t, tok in enumerate(tokens)],
        key="explain_patch_position",
    )
    if not corrupt:
        if how == "picking a word":
            st.caption("Pick the word to replace and type its replacement above (e.g. a noun for another noun).")
        else:
            st.caption("Type the corrupted sentence above: this sentence with one word replaced (e.g. one noun).")
        return
    position = None if choice == "the most affected" else int(choice.split(":")[0]) - 1
    key = runs.options_key(out.options)
    patched = errors.guarded(
        lambda: runs.patching(checkpoints.ckpt_path(), selection.sentence(), corrupt, key, position),
        refused="Cannot patch with this corrupted sentence.",
    )
    if patched is None:
        return
    analysis_store.remember(out, *patched.to_arrays(corrupt))
    _show(out, patched)


def _corrupted(out: core.Translation, how: str) -> str:
    """The corrupted sentence the user made (by replacing a picked word, or typed whole); '' until there is one."""
    if how != "picking a word":
        typed = st.text_input(
            "Corrupted sentence (one word replaced)", key="explain_corrupt", placeholder=out.source_text
        )
        return selection.with_target_code(typed.strip())  # a multilingual model's token, as the clean one has
    words = out.source_text.split()
    c1, c2 = st.columns(2)
    url.clamp("explain_word", list(range(len(words))))
    j = c1.selectbox(
        "Word to replace", list(range(len(words))), key="explain_word", format_func=lambda i: f"{i + 1}: {words[i]}"
    )
    replacement = c2.text_input("Replace it with", key="explain_replacement", placeholder="e.g. dog").strip()
    corrupt = " ".join(replacement if i == j else w for i, w in enumerate(words)) if replacement else ""
    if corrupt:
        st.caption(f"Corrupted sentence: *{markup.md(corrupt)}*")
    return corrupt


def _show(out: core.Translation, result: PatchingResult) -> None:
    tokens = out.output_tokens
    word = style.token_text(tokens[result.position])
    st.markdown(
        f"Output word {result.position + 1} **{markup.md(word)}**: p = {result.p_clean:.3f} with the clean "
        f"sentence, {result.p_corrupt:.3f} with the corrupted one."
    )
    if abs(result.p_clean - result.p_corrupt) < 1e-3:
        st.info("The corruption hardly changes this word's probability: pick another word or another corruption.")
    note = selection.options_note(out.options, 1)
    src = [style.token_label(t) for t in out.src_tokens]
    layers = ["embeddings"] + [f"encoder L{i + 1}" for i in range(result.encoder.shape[0] - 1)]
    fig = explain.labelled_heatmap(
        result.restored(result.encoder),
        layers,
        src,
        value_name="restored",
        title=style.titled("Source position × encoder layer: share restored", note),
    )
    export.chart(fig, "patching_encoder", key="patching_encoder")
    c1, c2 = st.columns(2)
    with c1:
        heads = result.cross_heads
        fig = explain.labelled_heatmap(
            result.restored(heads),
            [f"cross L{i + 1}" for i in range(heads.shape[0])],
            [f"H{h + 1}" for h in range(heads.shape[1])],
            value_name="restored",
            title="One cross-attention head: share restored",
        )
        export.chart(fig, "patching_cross", key="patching_cross")
    with c2:
        dec = result.decoder
        prefix = [style.token_label(t) for t in out.tgt_tokens[: dec.shape[1]]]
        fig = explain.labelled_heatmap(
            result.restored(dec),
            [f"decoder L{i + 1}" for i in range(dec.shape[0])],
            prefix,
            value_name="restored",
            title="Decoder input position × layer: share restored",
        )
        export.chart(fig, "patching_decoder", key="patching_decoder")
