"""The sidebar: saved-trace replay, the checkpoint picker and its card, the switches and the heads switched off."""

from __future__ import annotations

import streamlit as st
import torch

import core
from viz_app.positional import describe
from viz_app.session import checkpoints, errors, params, selection, server, trace_replay, url
from viz_app.widgets import open_folder, presentation
from viz_app.widgets.markup import md

# the lab's one numbering, said once here and in docs/app.md (tests/viz_app/test_app_pages.py checks both agree)
NUMBERING = (
    "Counting: positions, steps, layers, heads, queries and ranks start at 1 on every page (the first piece is "
    "position 1, the first piece written is step 1). Only the positional-encoding formula's pos and i and the "
    "recorded sites' names in code (encoder.0.self) start at 0."
)
HOW_TO_GET_ONE = (
    "No checkpoint found under `{root}`. Get one with **`make run`** (imports the pretrained "
    "Bergamot en↔pt models) or **`make train`** (trains `ding-en-de`), or point the app at another "
    "folder with the environment variable `LAB_CHECKPOINT_ROOT`, or open a Hugging Face folder in the sidebar."
)


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
        presentation.switch()
        if _replay_controls() is not None:
            return True
        if open_folder.select_pending():  # imported in the last run: listed and selected now
            names = checkpoints.checkpoint_names()
            _checkpoint_changed()
        if not names:
            open_folder.open_folder(expanded=True)
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
        open_folder.open_folder()
        bundle = selection.bundle()
        if bundle is None:
            return False
        if not ss.get("text") and not ss.get("_text_defaulted"):
            ss["text"] = selection.EXAMPLES.get(bundle.languages[0], selection.EXAMPLES["en"])[0]
        ss["_text_defaulted"] = True
        _model_card(bundle)
        _switches(bundle)
        _heads_off(bundle.config)
        note = selection.options_note(selection.options(), int(ss.get("beam", 1)))
        st.markdown(f"Options in effect: **{note}**", help="Every figure title ends with these options.")
        st.button(
            "Reset switches",
            on_click=_reset,
            key="reset",
            icon=":material/restart_alt:",
            disabled=selection.options() == core.InferenceOptions() and int(ss.get("beam", 1)) == 1,
        )
        st.caption(NUMBERING)
    return True


def no_checkpoint() -> None:
    """The page shown when there is nothing to load."""
    st.title("Transformer Attention Lab")
    st.info(HOW_TO_GET_ONE.format(root=checkpoints.checkpoint_root()), icon=":material/inventory_2:")


def _model_card(bundle: core.Bundle) -> None:
    """The model's languages, size and device, its details, provenance, quality line and card."""
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
        family = checkpoints.family(bundle.info) or "the lab's own Transformer"
        st.markdown(
            f"- family: **{md(family)}**\n"
            f"- **{cfg.n_encoder_layers}** encoder / **{cfg.n_decoder_layers}** decoder layers\n"
            f"- **{cfg.n_heads}** heads, d_model **{cfg.d_model}**, d_k **{cfg.d_head}**\n"
            f"- decoder: {decoder}\n- **{n_params}** parameters\n"
            f"- positions: {describe.short(cfg)}"
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


def _switches(bundle: core.Bundle) -> None:
    """Positional encoding (and the side it is removed on), the causal and padding masks, the shortlist."""
    ss = st.session_state
    cfg = bundle.config
    st.subheader("Switches", divider="gray")
    st.toggle("Positional encoding", key="pe", help=describe.switch_help(cfg))
    if not ss.get("pe", True):
        url.clamp("pe_side", list(params.PE_SIDES))
        st.radio(
            "Positions removed on",
            list(params.PE_SIDES),
            key="pe_side",
            horizontal=True,
            format_func=params.PE_SIDES.get,
            help=describe.side_help(cfg),
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


def _heads_off(cfg: core.ModelConfig) -> None:
    """The heads switched off, as a list of this model's heads (a link's unknown ones named and dropped)."""
    ss = st.session_state
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
