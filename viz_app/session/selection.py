"""What the person chose in the sidebar and the sentence bar: the options, the sentence, the loaded bundle, and
the current translation (or the saved trace replayed instead).
"""

from __future__ import annotations

import streamlit as st

import core
from core.text.segment import split_sentences
from viz_app.session.checkpoints import checkpoint_root, selected
from viz_app.session.errors import guarded
from viz_app.session.params import parse_head_label
from viz_app.session.runs import options_key, translate
from viz_app.session.server import load_bundle
from viz_app.session.trace_replay import replay

EXAMPLES: dict[str, list[str]] = {
    "en": [
        "Is there any tea left?",
        "The cat sleeps on the warm chair.",
        "I would like a cup of coffee, please.",
        "The old man who lives next door bought a new car yesterday.",
        "She did not know that the last train had already left the station.",
    ],
    "pt": [
        "Ainda há chá?",
        "O gato dorme na cadeira quente.",
        "Eu gostaria de um café, por favor.",
        "O velho que mora ao lado comprou um carro novo ontem.",
    ],
    "de": ["Ist noch Tee übrig?", "Die Katze schläft auf dem warmen Stuhl.", "Ich hätte gern eine Tasse Kaffee."],
}


def pe_switches(on: bool, side: str) -> dict[str, bool]:
    """The positional-encoding switches of ``InferenceOptions``: on, or off on ``side`` ('both', 'encoder',
    'decoder'): the sidebar's choice, and run B's on the Compare page."""
    return dict(
        positional_encoding=on or side in ("encoder", "decoder"),
        encoder_pe=on or side != "encoder",
        decoder_pe=on or side != "decoder",
    )


def options() -> core.InferenceOptions:
    """The InferenceOptions chosen in the sidebar."""
    ss = st.session_state
    ablate = frozenset(parse_head_label(label) for label in ss.get("ablate", []))
    return core.InferenceOptions(
        **pe_switches(bool(ss.get("pe", True)), str(ss.get("pe_side", "both"))),
        causal_mask=bool(ss.get("causal", True)),
        padding_mask=bool(ss.get("padding", True)),
        ablate=ablate,
        shortlist=bool(ss.get("shortlist", False)),
    )


def options_note(opts: core.InferenceOptions, beam: int = 1) -> str:
    """Short label of the options in effect, for figure titles: 'as trained', 'PE off, 2 heads ablated, beam 4'."""
    note = opts.describe()
    if beam > 1:
        note = f"beam {beam}" if note == "as trained" else f"{note}, beam {beam}"
    return note


def bundle() -> core.Bundle | None:
    """The bundle of the selected checkpoint, or None after showing why it cannot be loaded."""
    if st.session_state.get("ckpt") and selected() is None:
        st.error(
            "**The chosen checkpoint is not one of the listed ones.** Pick one in the sidebar.",
            icon=":material/inventory_2:",
        )
        return None
    name = selected()
    if not name:
        return None
    return guarded(lambda: load_bundle(str(checkpoint_root() / name)))


def current(
    beam: int | None = None, opts: core.InferenceOptions | None = None, *, qkv: bool = False
) -> core.Translation | None:
    """The translation of the current sentence with the sidebar options (cached), or None after a message.

    While a saved trace is replayed: that trace, or None (with a note) when another run is asked for."""
    saved = replay()
    if saved is not None:
        if (opts is None or opts == saved.options) and (beam is None or beam == saved.beam_size):
            return saved
        st.info(
            "This comparison runs the model again with other switches; it is not available while a saved "
            "trace is replayed (close the trace in the sidebar to use the model).",
            icon=":material/history:",
        )
        return None
    name = selected()
    if not name or bundle() is None:
        return None
    text = sentence()
    beam = int(st.session_state.get("beam", 1)) if beam is None else beam
    key = options_key(opts or options())
    return guarded(lambda: translate(str(checkpoint_root() / name), text, key, beam, qkv))


MAX_SENTENCES = 40  # a pasted text is split into at most this many sentences (the rest is named in a notice)


def sentences() -> list[str]:
    """The text box's sentences (split as production translators do), at most MAX_SENTENCES."""
    return split_sentences(str(st.session_state.get("text", "")))[:MAX_SENTENCES] or [""]


def sentence() -> str:
    """The sentence the pages look inside: the text itself, or the picked one when the text has several; a
    multilingual model's chosen target token before it (``with_target_code``)."""
    found = sentences()
    index = st.session_state.get("sentence", 0)
    return with_target_code(found[index] if isinstance(index, int) and 0 <= index < len(found) else found[0])


def with_target_code(text: str) -> str:
    """``text`` as a multilingual Opus-MT model reads it: the target token picked in the sentence bar first
    ('>>pt<< The cat …'), unless the selected model has no such token (another model was picked since), there is
    no text, or the text names one itself."""
    code = str(st.session_state.get("target_code") or "")
    if not code or not text or text.lstrip().startswith(">>"):
        return text
    b = bundle() if selected() else None
    return f"{code} {text}" if b is not None and code in b.tokenizer.target_codes else text
