"""Replaying a saved trace: the Translation of a trace file this session opened (never shared); every page then
shows it, without the model.
"""

from __future__ import annotations

import logging

import streamlit as st

import core
from core.recording.trace import MAX_ARCHIVE_BYTES
from core.sites import OUTPUT_ARRAYS, ids_site, output_site

REPLAY = "_replay"  # session state: the Translation of a trace file this session opened (never shared)


def replay() -> core.Translation | None:
    """The saved trace this session opened (every page then shows it, without the model), or None."""
    out = st.session_state.get(REPLAY)
    return out if isinstance(out, core.Translation) else None


REPLAYED = (ids_site("tgt"), *(output_site(what) for what in OUTPUT_ARRAYS))  # a translation's


# the largest JSON trace opened for replay: reading JSON takes about eight times its size in memory (a 106 MB
# trace peaked at 0.8 GB more), so one upload may cost the server ~0.5 GB; the app's longest runs (256 pieces, with
# q/k/v) export ~100 MB of JSON but ~50 MB of .npz, which opens up to core.recording.trace.MAX_ARCHIVE_BYTES unpacked
MAX_JSON_TRACE_BYTES = 64 << 20


def open_trace(data: bytes) -> str | None:
    """Open a trace file's bytes for replay; returns what is wrong with it (None when it opened). The pages read
    a whole translation: every attention kind of its model and the output, as ``Bundle.translate`` records.
    A JSON trace over MAX_JSON_TRACE_BYTES is refused before it is parsed."""
    if data[:2] != b"PK" and len(data) > MAX_JSON_TRACE_BYTES:
        return (
            f"This trace is too large to open as JSON: the file is {len(data) / 2**20:,.0f} MiB, and a JSON trace "
            f"is opened up to {MAX_JSON_TRACE_BYTES >> 20} MiB (reading JSON takes about eight times its size in "
            "memory). Export the run as NPZ instead: exact, smaller, and opened up to "
            f"{MAX_ARCHIVE_BYTES >> 30} GiB unpacked."
        )
    try:
        trace = core.Trace.load(data)
    except ValueError as exc:
        return f"This file is not a trace the lab can open: {exc}"
    except Exception as exc:  # noqa: BLE001 — last resort, e.g. MemoryError: named, and the session goes on
        logging.getLogger("viz_app").exception("unexpected error while opening a trace file")
        return f"This file could not be opened ({type(exc).__name__}): {exc}"
    missing = [f"{kind} attention" for kind in trace.shape.kinds if kind not in trace.kinds]
    missing += [f"'{name}'" for name in REPLAYED if name not in trace]
    if missing:
        return (
            "This file is not a trace the lab can open: the pages replay a whole translation, and this one has "
            f"no {', no '.join(missing)}."
        )
    st.session_state[REPLAY] = core.Translation(trace)
    return None


def close_trace() -> None:
    st.session_state.pop(REPLAY, None)
