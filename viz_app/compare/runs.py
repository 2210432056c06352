"""Run B of the Compare page: the sidebar's run A with the ``*_b`` session values put over it (a value left at its
default means "as A"), translated freely or, where B reads the same pieces, fed A's translation."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import streamlit as st

import core
from viz_app.session import checkpoints, params, runs, selection
from viz_app.session.server import load_bundle


@dataclass(frozen=True)
class RunB:
    """B's translation and how it was made: its checkpoint's name, whether it read A's translation."""

    out: core.Translation
    checkpoint: str
    forced: bool


def options_b(a: core.InferenceOptions) -> core.InferenceOptions:
    """A's switches with B's put over them (``pe_b``, ``causal_b``, ``ablate_b``)."""
    ss = st.session_state
    choice = str(ss.get("pe_b", "same"))  # params.PE_B
    side = {"off-encoder": "encoder", "off-decoder": "decoder"}.get(choice, "both")
    pe = {} if choice not in params.PE_B or choice == "same" else selection.pe_switches(choice == "on", side)
    causal = {"on": True, "off": False}.get(str(ss.get("causal_b", "same")), a.causal_mask)
    ablate_b = ss.get("ablate_b")
    ablate = a.ablate if ablate_b is None else frozenset(params.parse_head_label(x) for x in ablate_b)
    return dataclasses.replace(a, **pe, causal_mask=causal, ablate=ablate)


def checkpoint_b() -> str:
    """B's checkpoint: ``ckpt_b`` when it names a listed checkpoint, else A's."""
    name = str(st.session_state.get("ckpt_b") or "")
    return name if name in checkpoints.checkpoint_names() else str(checkpoints.selected() or "")


def sentence_b() -> str:
    """B's sentence: ``text_b``, else A's."""
    return str(st.session_state.get("text_b") or "").strip() or selection.sentence()


def run_b(a: core.Translation) -> RunB:
    """B's translation. With ``forced_b`` and the same source pieces, B's decoder reads A's output (teacher forcing):
    every map then has A's rows, and what changed is the switch's or the model's doing, not a different output."""
    name = checkpoint_b()
    path = str(checkpoints.checkpoint_root() / name)
    text, opts = sentence_b(), options_b(a.options)
    bundle = load_bundle(path)
    key = runs.options_key(bundle.check_options(opts))
    if st.session_state.get("forced_b", True) and reads_the_same(bundle, text, a):
        return RunB(runs.rerun(path, text, a.output_ids, key), name, True)
    return RunB(runs.translate(path, text, key, 1), name, False)


def reads_the_same(bundle: core.Bundle, text: str, a: core.Translation) -> bool:
    """Whether ``bundle`` reads ``text`` as A's source pieces and A's output ids as A's output pieces (the same
    vocabulary where it matters): only then can B be fed A's translation."""
    source = bundle.tokenizer.pieces(bundle.encode_source(text, truncate=True)[0])
    return source == a.src_tokens and bundle.tokenizer.pieces(a.output_ids) == a.output_tokens
