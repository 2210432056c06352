"""Pickers the pages share: the attention kind, the layer and head (with the heads' measured labels)."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

import core
from core.sites import AttentionKind
from viz_app.session import checkpoints, params, runs, trace_replay, url


def kind_picker(kinds: Sequence[AttentionKind], key: str = "kind") -> AttentionKind:
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
