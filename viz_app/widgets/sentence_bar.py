"""The sentence bar every page opens with: the text box, the examples, the sentence picker of a longer text."""

from __future__ import annotations

import streamlit as st

import core
from core.text.language import check_language
from core.text.segment import split_sentences
from viz_app import claims_sampling
from viz_app.session import checkpoints, errors, runs, selection, trace_replay, url
from viz_app.widgets.markup import md


def _example_picked() -> None:
    choice = st.session_state.get("example")
    if choice:
        st.session_state["text"] = choice


def sentence_bar(
    label: str = "Sentence to translate", *, qkv: bool = False, sampling: runs.SamplingKey | None = None
) -> core.Translation | None:
    """Text input (Enter translates) with example sentences; returns the cached translation (with q/k/v
    when ``qkv``) or None. While a saved trace is replayed: its source sentence, and the trace. ``sampling``: the
    page samples with these settings (the Steps page), so the whole text's line is sampled too."""
    saved = trace_replay.replay()
    if saved is not None:
        st.markdown(f"**{label} (from the saved trace):** {md(saved.source_text) or '—'}")
        errors.show_notices(saved)
        return saved
    bundle = selection.bundle()
    if bundle is None:
        return None
    src = bundle.languages[0]
    examples = selection.EXAMPLES.get(src, selection.EXAMPLES["en"])
    left, right = st.columns([3, 1])
    left.text_input(
        f"{label} ({src} → {bundle.languages[1]}) — press Enter",
        key="text",
        placeholder="Type a sentence and press Enter",
    )
    right.selectbox(
        "…or pick an example", examples, index=None, key="example", on_change=_example_picked, placeholder="Examples"
    )
    _target_code(bundle)
    _sentence_picker(sampling)
    out = selection.current(qkv=qkv)
    if out is not None:
        errors.show_notices(out)
        other = check_language(out.source_text, *bundle.languages, output=out.text).message()
        if other:  # the text does not look like the model's source language (core.text.language)
            st.warning(other, icon=":material/translate:")
    return out


def _target_code(bundle: core.Bundle) -> None:
    """A multilingual Opus-MT model translates into the language whose token starts the source ('>>pt<<'): offer
    the tokens its vocabulary has, the checkpoint's target language first chosen where it has one."""
    codes = list(bundle.tokenizer.target_codes)
    if not codes:
        return
    ss = st.session_state
    if not ss.get("target_code"):
        ss["target_code"] = next((c for c in codes if c == f">>{bundle.languages[1]}<<"), codes[0])
    url.clamp("target_code", codes)  # a link's token the model does not have is named
    st.selectbox(
        "Target language (a token the model reads first)",
        codes,
        key="target_code",
        help="This model is multilingual: the token before the sentence says which language to translate into.",
    )


def _sentence_picker(sampling: runs.SamplingKey | None) -> None:
    """When the text has several sentences: say so, let the person pick the one to look inside, and show the
    whole text's translation (each sentence translated on its own, as production translators do; sampled with
    ``sampling`` when given, as the page shows the picked one)."""
    found = selection.sentences()
    total = len(split_sentences(str(st.session_state.get("text", ""))))
    url.clamp("sentence", list(range(len(found))))  # a link's ?sentence= beyond the text is named
    if len(found) < 2:
        return
    st.info(
        f"This text has {total} sentences. Like production translators, the lab translates one sentence at a "
        "time; pick the one to look inside."
        + (f" Only the first {len(found)} are offered." if total > len(found) else ""),
        icon=":material/segment:",
    )
    st.selectbox(
        "Sentence",
        list(range(len(found))),
        key="sentence",
        format_func=lambda i: f"{i + 1} · {found[i][:90]}{'…' if len(found[i]) > 90 else ''}",
    )
    bundle = selection.bundle()
    if bundle is None or trace_replay.replay() is not None:
        return
    path, key = checkpoints.ckpt_path(), runs.options_key(selection.options())
    beam = int(st.session_state.get("beam", 1))
    texts = [selection.with_target_code(s) for s in found]
    if sampling is None:
        parts = errors.guarded(lambda: [runs.translate(path, text, key, beam).text for text in texts])
        how = ""
    else:
        parts = errors.guarded(lambda: [runs.sample(path, text, key, sampling).text for text in texts])
        how = f", each sampled ({claims_sampling.settings(*sampling)})"
    if parts:
        st.caption(f"Whole text, sentence by sentence{how}: " + " ".join(md(p) or "∅" for p in parts))
