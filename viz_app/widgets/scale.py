"""The lab's one colour-scale switch for attention weights (``figures.style.weight_scale``): a fixed 0–1 scale by
default, or each map stretched to its own largest weight; one session value (``fixed``, kept in the link), offered
on every page that draws attention weights."""

from __future__ import annotations

import streamlit as st

HELP = (
    "On: every map runs from 0 to 1, so the same colour is the same weight everywhere and near-uniform attention "
    "looks faint. Off: each figure stretches its colours to its own largest weight (the colour bar says so)."
)


def fixed_scale(container: st.delta_generator.DeltaGenerator | None = None, *, disabled: bool = False) -> bool:
    """The checkbox 'Fixed 0–1 colour scale' (in ``container``, else the page); whether it is on."""
    where = container if container is not None else st
    return bool(where.checkbox("Fixed 0–1 colour scale", key="fixed", help=HELP, disabled=disabled))
