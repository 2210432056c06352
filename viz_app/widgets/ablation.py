"""The layer × head grid of switched-off heads (whole layers, 'keep only these'), mirrored in the sidebar's list."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import core
from viz_app.session import params


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
                st.data_editor(
                    frame,
                    key=key,
                    on_change=_matrix_edited,
                    args=(kind, key, cfg.n_heads),
                    width="stretch",
                    # narrow head columns: every head of a layer in view at 1024 px (at the default width the grid
                    # scrolled after H6)
                    column_config={f"H{h + 1}": st.column_config.CheckboxColumn(width=44) for h in range(cfg.n_heads)},
                )
                c1, c2, _ = st.columns([3, 1, 3])
                c1.button(
                    "Keep only the checked on",
                    key=f"invert_{kind}",
                    on_click=_invert,
                    args=(kind, n_layers, cfg.n_heads),
                    help="Swap: the checked heads stay on and every other head of this kind is switched off.",
                )
                c2.button("Clear", key=f"clear_{kind}", on_click=_set_ablated, args=(kind, set()))
