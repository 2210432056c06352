"""Widgets shared by the pages: the sidebar, the sentence bar, head pickers, token pills, export."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
import torch

import core
from core.language import check_language
from core.segment import split_sentences
from viz_app import claims, teacher
from viz_app.figures import overview
from viz_app.figures.style import plot_config, token_text
from viz_app.session import checkpoints, errors, params, runs, selection, server, trace_replay, url

HOW_TO_GET_ONE = (
    "No checkpoint found under `{root}`. Get one with **`make run`** (imports the pretrained "
    "Bergamot en↔pt models) or **`make train`** (trains `ding-en-de`), or point the app at another "
    "folder with the environment variable `LAB_CHECKPOINT_ROOT`."
)


md = claims.md  # user or model text made literal for st.markdown (no accidental bold, links, HTML or LaTeX)


def _example_picked() -> None:
    choice = st.session_state.get("example")
    if choice:
        st.session_state["text"] = choice


def _checkpoint_changed() -> None:
    """Switching to a model with another source language: swap an example sentence for one it can read."""
    ss = st.session_state
    b = errors.guarded(lambda: server.load_bundle(checkpoints.ckpt_path()))
    if b is None:
        return
    src = b.languages[0]
    if src in selection.EXAMPLES and any(
        ss.get("text") in ex for lang, ex in selection.EXAMPLES.items() if lang != src
    ):
        ss["text"] = selection.EXAMPLES[src][0]


def _count(n: int) -> str:
    return f"{n / 1e6:.1f} M" if n >= 100_000 else f"{n / 1e3:.1f} k"


def _reset() -> None:
    st.session_state.update(pe=True, pe_side="both", causal=True, padding=True, shortlist=False, ablate=[], beam=1)


def _ablated(kind: str) -> set[tuple[int, int]]:
    return {(l, h) for k, l, h in map(params.parse_head_label, st.session_state.get("ablate", [])) if k == kind}


def _set_ablated(kind: str, heads: set[tuple[int, int]]) -> None:
    others = [a for a in st.session_state.get("ablate", []) if params.parse_head_label(a)[0] != kind]
    st.session_state["ablate"] = others + [params.head_label(kind, l, h) for l, h in sorted(heads)]
    st.session_state["_matrix_version"] = st.session_state.get("_matrix_version", 0) + 1  # redraw from the state


def _matrix_edited(kind: str, key: str, n_heads: int) -> None:
    heads = _ablated(kind)
    for row, changes in st.session_state.get(key, {}).get("edited_rows", {}).items():
        layer = int(row)
        for column, value in changes.items():
            cols = range(n_heads) if column == "whole layer" else [int(str(column)[1:]) - 1]
            for h in cols:
                (heads.add if value else heads.discard)((layer, h))
    _set_ablated(kind, heads)


def _invert(kind: str, n_layers: int, n_heads: int) -> None:
    _set_ablated(kind, {(l, h) for l in range(n_layers) for h in range(n_heads)} - _ablated(kind))


def head_matrix(cfg: core.ModelConfig) -> None:
    """A layer × head checkbox grid per attention kind (checked = switched off), with whole layers and
    'keep only these' — the quick way to switch many heads, mirrored in the sidebar's list."""
    kinds = [k for k in core.ATTENTION_KINDS if k != "decoder" or cfg.decoder_self == "attention"]
    version = st.session_state.get("_matrix_version", 0)
    with st.expander("Switch heads off on a grid (whole layers, keep only some)", icon=":material/grid_view:"):
        for kind, tab in zip(kinds, st.tabs([params.KINDS[k] for k in kinds]), strict=True):
            n_layers = cfg.n_encoder_layers if kind == "encoder" else cfg.n_decoder_layers
            off = _ablated(kind)
            frame = pd.DataFrame(
                {
                    "whole layer": [all((l, h) in off for h in range(cfg.n_heads)) for l in range(n_layers)],
                    **{f"H{h + 1}": [(l, h) in off for l in range(n_layers)] for h in range(cfg.n_heads)},
                },
                index=[f"L{l + 1}" for l in range(n_layers)],
            )
            key = f"matrix_{kind}_{version}"
            with tab:
                st.caption("Checked = switched off.")
                st.data_editor(frame, key=key, on_change=_matrix_edited, args=(kind, key, cfg.n_heads), width="stretch")
                c1, c2, _ = st.columns([2, 1, 4])
                c1.button(
                    "Keep only the checked on",
                    key=f"invert_{kind}",
                    on_click=_invert,
                    args=(kind, n_layers, cfg.n_heads),
                    help="Swap: the checked heads stay on and every other head of this kind is switched off.",
                )
                c2.button("Clear", key=f"clear_{kind}", on_click=_set_ablated, args=(kind, set()))


def _trace_uploaded() -> None:
    upload = st.session_state.get("trace_file")
    if upload is None:
        return
    st.session_state["_trace_error"] = trace_replay.open_trace(upload.getvalue())


def _close_trace() -> None:
    trace_replay.close_trace()
    st.session_state["_trace_error"] = None


def _replay_controls() -> core.Translation | None:
    """Open a saved trace (exported from any page) and replay it on every page, without the model."""
    saved = trace_replay.replay()
    with st.expander("Open a saved trace", expanded=saved is not None, icon=":material/history:"):
        st.file_uploader(  # any name: a refused type gets only a red icon in the browser; open_trace names the fault
            "Trace file (.npz or .json, from “Export this run”)",
            key="trace_file",
            on_change=_trace_uploaded,
        )
        error = st.session_state.get("_trace_error")
        if error:
            st.error(error, icon=":material/error:")
        if saved is not None:
            st.button("Close the trace", on_click=_close_trace, key="close_trace", icon=":material/close:")
    if saved is not None:
        shape = saved.trace.shape
        st.info(
            f"**Replaying a saved trace** of *{md(str(saved.trace.meta.get('model', 'a model')))}* "
            f"({shape.n_encoder_layers}+{shape.n_decoder_layers} layers · {shape.n_heads} heads) with "
            f"**{selection.options_note(saved.options, saved.beam_size)}**. Nothing is recomputed; switches that "
            "need the model are off until you close it.",
            icon=":material/history:",
        )
    return saved


def sidebar() -> bool:
    """Saved-trace replay, checkpoint picker, model info, device, toggles and ablations. True when the pages can
    run: a model is loaded, or a saved trace is replayed."""
    ss = st.session_state
    names = checkpoints.checkpoint_names()
    with st.sidebar:
        if _replay_controls() is not None:
            return True
        if not names:
            return False
        if ss.get("ckpt") not in names:
            if ss.get("ckpt"):  # e.g. a link's ?ckpt= naming a folder that is not listed (its text is not repeated)
                st.warning(
                    "The link names a checkpoint that is not one of the listed ones; the default is shown.",
                    icon=":material/inventory_2:",
                )
            ss["ckpt"] = checkpoints.default_checkpoint()
        st.selectbox(
            "Checkpoint",
            names,
            key="ckpt",
            on_change=_checkpoint_changed,
            help=f"Model folders under `{checkpoints.checkpoint_root()}`",
        )
        bundle = selection.bundle()
        if bundle is None:
            return False
        if not ss.get("text") and not ss.get("_text_defaulted"):
            ss["text"] = selection.EXAMPLES.get(bundle.languages[0], selection.EXAMPLES["en"])[0]
        ss["_text_defaulted"] = True
        cfg = bundle.config
        n_params = _count(bundle.model.n_parameters())
        device = bundle.device
        device_label = f"CUDA ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "CPU"
        decoder = "SSRU (no self-attention)" if cfg.decoder_self == "ssru" else "self-attention"
        st.caption(
            f"**{bundle.languages[0]} → {bundle.languages[1]}** · {cfg.n_encoder_layers}+{cfg.n_decoder_layers} "
            f"layers · {cfg.n_heads} heads · {n_params} parameters"
        )
        with st.expander("Model details", expanded=False):
            st.markdown(
                f"- **{cfg.n_encoder_layers}** encoder / **{cfg.n_decoder_layers}** decoder layers\n"
                f"- **{cfg.n_heads}** heads, d_model **{cfg.d_model}**, d_k **{cfg.d_head}**\n"
                f"- decoder: {decoder}\n- **{n_params}** parameters\n"
                f"- positions: {cfg.positional} ({cfg.pe_layout})"
            )
        st.caption(f"Running on **{device_label}** · {bundle.name}")
        st.caption(checkpoints.provenance(bundle.info))
        quality = checkpoints.quality_line(bundle)
        if quality:
            st.caption(f"Quality: {md(quality)}")
        card = checkpoints.card_text()
        if card:
            with st.popover("Checkpoint card", icon=":material/description:", width="stretch"):
                st.markdown(card)
        st.subheader("Switches", divider="gray")
        st.toggle("Positional encoding", key="pe", help="Add the position signal to the token embeddings.")
        if not ss.get("pe", True):
            url.clamp("pe_side", list(params.PE_SIDES))
            st.radio(
                "Positions removed on",
                list(params.PE_SIDES),
                key="pe_side",
                horizontal=True,
                format_func=params.PE_SIDES.get,
                help="The encoder's input (the source words), the decoder's input (the translation so far), or both.",
            )
        ssru = cfg.decoder_self == "ssru"
        st.toggle(
            "Causal mask (decoder)",
            key="causal",
            disabled=ssru,
            help=(
                "This model's decoder has no self-attention (an SSRU reads the target left to right), "
                "so there is no causal mask to switch off."
                if ssru
                else "Stop the decoder from looking at later target tokens."
            ),
        )
        st.toggle("Padding mask", key="padding", help="Stop attention to <pad> tokens of a padded batch.")
        if bundle.shortlist is None:
            if ss.get("shortlist"):
                url.link_problem("shortlist", "asks for a shortlist this model does not ship")
            ss["shortlist"] = False  # only imported Marian models ship one
        else:
            st.toggle(
                "Shortlist only (as the production engine)",
                key="shortlist",
                help=(
                    f"Score only the model's lexical shortlist at each step, as its production engine does: the "
                    f"{bundle.shortlist.frequent} most frequent words plus the {bundle.shortlist.best} likeliest "
                    "translations of each source piece (a few hundred of "
                    f"{cfg.tgt_vocab_size:,}). Probabilities are then over those words only. The explanations "
                    "(Why this word?) still score every word."
                ),
            )
        kinds = [k for k in core.ATTENTION_KINDS if k != "decoder" or cfg.decoder_self == "attention"]
        labels = [
            params.head_label(k, l, h)
            for k in kinds
            for l in range(cfg.n_encoder_layers if k == "encoder" else cfg.n_decoder_layers)
            for h in range(cfg.n_heads)
        ]
        missing = [a for a in ss.get("ablate", []) if a not in labels]
        if missing:
            url.link_problem("ablate", f"names heads this model does not have ({', '.join(missing[:4])})")
            ss["ablate"] = [a for a in ss["ablate"] if a in labels]
        st.multiselect(
            "Switch off heads",
            labels,
            key="ablate",
            placeholder="none",
            help="An ablated head's output is zeroed (its weights are still shown).",
        )
        note = selection.options_note(selection.options(), int(ss.get("beam", 1)))
        st.markdown(f"Options in effect: **{note}**", help="Every figure title ends with these options.")
        st.button(
            "Reset switches",
            on_click=_reset,
            key="reset",
            icon=":material/restart_alt:",
            disabled=selection.options() == core.InferenceOptions() and int(ss.get("beam", 1)) == 1,
        )
    return True


def no_checkpoint() -> None:
    """The page shown when there is nothing to load."""
    st.title("Transformer Attention Lab")
    st.info(HOW_TO_GET_ONE.format(root=checkpoints.checkpoint_root()), icon=":material/inventory_2:")


def sentence_bar(label: str = "Sentence to translate", *, qkv: bool = False) -> core.Translation | None:
    """Text input (Enter translates) with example sentences; returns the cached translation (with q/k/v
    when ``qkv``) or None. While a saved trace is replayed: its source sentence, and the trace."""
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
    _sentence_picker()
    out = selection.current(qkv=qkv)
    if out is not None:
        errors.show_notices(out)
        other = check_language(out.source_text, *bundle.languages, output=out.text).message()
        if other:  # the text does not look like the model's source language (core.language)
            st.warning(other, icon=":material/translate:")
    return out


def _sentence_picker() -> None:
    """When the text has several sentences: say so, let the person pick the one to look inside, and show the
    whole text's translation (each sentence translated on its own, as production translators do)."""
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
    parts = errors.guarded(lambda: [runs.translate(path, s, key, beam).text for s in found])
    if parts:
        st.caption("Whole text, sentence by sentence: " + " ".join(md(p) or "∅" for p in parts))


def translation_header(out: core.Translation) -> None:
    """The translation in large type plus the options it was made with; with switches on, the as-trained
    translation beside it (changed words marked) and what the switches do to its probabilities."""
    note = selection.options_note(out.options, out.beam_size)
    st.markdown(f"#### {md(out.text) or EMPTY}")
    st.caption(f"Translation · {len(out.src_tokens)} source pieces → {len(out.output_tokens)} output pieces · {note}")
    teacher.beside(out)  # a distilled model: its teacher's translation, the differing words marked
    if out.options != core.InferenceOptions() and trace_replay.replay() is None:
        before_after(out)


EMPTY = "∅ (the model produced no words)"


def marked_words(before: str, after: str) -> tuple[str, str]:
    """Both texts as Markdown with the words that differ between them highlighted (user text escaped)."""
    a, b = before.split(), after.split()
    out_a: list[str] = []
    out_b: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        for words, side, colour in ((a[i1:i2], out_a, "red"), (b[j1:j2], out_b, "green")):
            side.extend(md(w) if op == "equal" else f":{colour}-background[{md(w)}]" for w in words)
    return " ".join(out_a) or EMPTY, " ".join(out_b) or EMPTY


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
    forced = errors.guarded(lambda: runs.teacher_forced(path, text, trained.text, runs.options_key(out.options)))
    if forced is None:
        return
    with st.expander("How likely is the as-trained translation with these switches? (token by token)"):
        tokens = [token_text(t) for t in trained.output_tokens]
        p_trained = np.asarray(trained.trace["output.probs"], dtype=np.float64)
        p_switched = np.asarray(forced.trace["output.probs"], dtype=np.float64)
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


def token_pills(tokens: Sequence[str], highlight: int | None = None) -> None:
    """Pieces as inline code spans ('␣' = word start); ``highlight`` is bold."""
    spans = []
    for i, t in enumerate(tokens):
        text = token_text(t).replace("`", "ˋ")
        spans.append(f"**`{text}`**" if i == highlight else f"`{text}`")
    st.markdown(" ".join(spans) if spans else "∅")


def kind_picker(kinds: Sequence[str], key: str = "kind") -> str:
    """Radio of the attention kinds this model has."""
    url.clamp(key, list(kinds))
    return st.radio("Attention", list(kinds), key=key, horizontal=True, format_func=lambda k: params.KINDS[k])


def layer_head_pickers(n_layers: int, n_heads: int, with_head: bool = True, kind: str | None = None) -> tuple[int, int]:
    """Layer and head selects (1-based labels, 0-based values). With ``kind``, each head's option carries its
    labels from "What does each head do?" once that page has measured the checkpoint."""
    url.clamp("layer", list(range(n_layers)))
    url.clamp("head", list(range(n_heads)))
    cols = st.columns(2)
    layer = cols[0].selectbox("Layer", list(range(n_layers)), key="layer", format_func=lambda i: f"Layer {i + 1}")
    labels = head_labels(kind) if kind else {}
    head = cols[1].selectbox(
        "Head",
        list(range(n_heads)),
        key="head",
        format_func=lambda i: f"Head {i + 1}" + (f" · {', '.join(labels[(layer, i)])}" if (layer, i) in labels else ""),
        disabled=not with_head,
    )
    return int(layer), int(head)


def head_labels(kind: str) -> dict[tuple[int, int], list[str]]:
    """(layer, head) -> labels of the current checkpoint's ``kind`` heads, if already measured (never computes)."""
    if trace_replay.replay() is not None or checkpoints.selected() is None:
        return {}
    try:
        return runs.known_labels(checkpoints.ckpt_path(), kind)
    except core.LabError:
        return {}


def chart(fig: go.Figure, name: str, **kwargs: Any) -> Any:
    """``st.plotly_chart`` with PNG export in the toolbar and full width."""
    return st.plotly_chart(fig, config=plot_config(name), width="stretch", **kwargs)


def export(out: core.Translation) -> None:
    """Download the whole trace as JSON or NPZ (generated only when clicked), named after the checkpoint and the
    sentence; the file carries the source text, the translation and the options."""
    st.caption("Export this run (every layer and head, masks, positional encodings, the text and the options)")
    stem = checkpoints.export_stem(out)
    c1, c2 = st.columns(2)
    c1.download_button(
        "⬇ Trace as JSON",
        data=out.trace.to_json,
        file_name=f"{stem}.json",
        mime="application/json",
        on_click="ignore",
        key="dl_json",
    )
    c2.download_button(
        "⬇ Trace as NPZ",
        data=out.trace.to_npz,
        file_name=f"{stem}.npz",
        mime="application/octet-stream",
        on_click="ignore",
        key="dl_npz",
    )
