"""The Compare page's presets: each sets run A's sentence where it needs to and run B's values (``*_b``), in a
widget callback, before the page's widgets are drawn.

- **Minimal pairs** (per source language): two sentences one change apart — word order, agreement, gender,
  negation, a number.
- **Student and teacher**: B is the checkpoint A was distilled from (its config's ``teacher``), on A's sentence,
  reading A's translation.
- **A switch**: B is A with positional encoding off (everywhere, or on the encoder only), the causal mask off, or
  one head off, reading A's translation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import streamlit as st

from viz_app.session import checkpoints, params
from viz_app.widgets.teacher import teacher_name

MINIMAL_PAIRS: dict[str, dict[str, tuple[str, str]]] = {
    "en": {
        "word order": ("The dog bit the man.", "The man bit the dog."),
        "agreement": ("The boy is happy.", "The boys are happy."),
        "gender": ("The doctor said that she was tired.", "The doctor said that he was tired."),
        "negation": ("I like cold coffee.", "I do not like cold coffee."),
        "a number": ("I bought two apples.", "I bought three apples."),
    },
    "pt": {
        "word order": ("O cão mordeu o homem.", "O homem mordeu o cão."),
        "agreement": ("O menino está feliz.", "Os meninos estão felizes."),
        "gender": ("O médico disse que ela estava cansada.", "O médico disse que ele estava cansado."),
        "negation": ("Eu gosto de café frio.", "Eu não gosto de café frio."),
        "a number": ("Eu comprei duas maçãs.", "Eu comprei três maçãs."),
    },
    "de": {
        "word order": ("Der Hund biss den Mann.", "Den Hund biss der Mann."),
        "agreement": ("Der Junge ist glücklich.", "Die Jungen sind glücklich."),
        "negation": ("Ich mag kalten Kaffee.", "Ich mag keinen kalten Kaffee."),
        "a number": ("Ich kaufte zwei Äpfel.", "Ich kaufte drei Äpfel."),
    },
}
B_KEYS = ("ckpt_b", "text_b", "pe_b", "causal_b", "ablate_b", "forced_b")  # run B's values: their defaults mean "as A"


def presets(language: str, info: Mapping[str, Any]) -> dict[str, str]:
    """Preset key -> label, for a model reading ``language`` whose config is ``info``."""
    out = {"": "— (set run B below)"}
    out |= {f"pair:{name}": f"Minimal pair: {name}" for name in MINIMAL_PAIRS.get(language, {})}
    teacher = teacher_name(info)
    if teacher is not None and teacher in checkpoints.checkpoint_names():
        out["teacher"] = f"Student and teacher: B is {teacher}"
    out |= {
        "switch:pe": "A switch: positional encoding off",
        "switch:pe-encoder": "A switch: positional encoding off on the encoder",
        "switch:causal": "A switch: causal mask off",
        "switch:head": "A switch: cross-attention layer 1, head 1 off",
    }
    return out


def apply(key: str, language: str, info: Mapping[str, Any]) -> None:
    """Set run A's and run B's values for preset ``key`` (a widget callback)."""
    ss = st.session_state
    ss.update({k: params.PARAMS[k].default for k in B_KEYS})
    if key.startswith("pair:"):
        a, b = MINIMAL_PAIRS[language][key.removeprefix("pair:")]
        ss["text"], ss["sentence"], ss["text_b"] = a, 0, b
    elif key == "teacher":
        ss["ckpt_b"] = teacher_name(info) or ""
    elif key == "switch:pe":
        ss["pe_b"] = "off"
    elif key == "switch:pe-encoder":
        ss["pe_b"] = "off-encoder"
    elif key == "switch:causal":
        ss["causal_b"] = "off"
    elif key == "switch:head":
        ss["ablate_b"] = [params.head_label("cross", 0, 0)]
