"""Opening a saved trace for replay is bounded before any parsing: a JSON trace of hundreds of MB peaked the
server at ~1.7 GB (reading JSON takes about eight times its size in memory)."""

from __future__ import annotations

from pathlib import Path

import pytest

import core
from viz_app.session import trace_replay


def _sparse_json(path: Path, size: int) -> bytes:
    """A file of ``size`` bytes that starts like a JSON trace and costs no disk (the rest is a hole of zeros)."""
    with path.open("wb") as f:
        f.write(b'{"format": "transformer-attention-lab/trace", "arrays": {')
        f.truncate(size)
    return path.read_bytes()


def test_a_json_trace_over_the_limit_is_refused_before_it_is_parsed(tmp_path, monkeypatch) -> None:
    limit = trace_replay.MAX_JSON_TRACE_BYTES
    assert limit == 64 << 20  # the limit the message and the docs name
    parsed = []
    monkeypatch.setattr(core.Trace, "load", lambda data: parsed.append(len(data)))
    data = _sparse_json(tmp_path / "big.json", limit + 1)
    error = trace_replay.open_trace(data)
    assert error is not None and not parsed
    assert error.startswith("This trace is too large to open as JSON: the file is 64 MiB")
    assert "opened up to 64 MiB" in error and "Export the run as NPZ instead" in error and "1 GiB" in error
    huge = _sparse_json(tmp_path / "huge.json", 142_000_000)  # the size that peaked the server
    assert "the file is 135 MiB" in (trace_replay.open_trace(huge) or "") and not parsed


def test_a_json_trace_at_the_limit_and_an_npz_archive_over_it_are_read(tmp_path) -> None:
    """The bound is on JSON text only: up to the limit the content is judged; an archive has its own bound."""
    at_limit = _sparse_json(tmp_path / "edge.json", trace_replay.MAX_JSON_TRACE_BYTES)
    error = trace_replay.open_trace(at_limit)
    assert error is not None and error.startswith("This file is not a trace the lab can open: not a trace (.json)")
    archive = b"PK" + b"\0" * trace_replay.MAX_JSON_TRACE_BYTES  # not a real zip: named as such, not by its size
    error = trace_replay.open_trace(archive)
    assert error is not None and "starts like a zip archive but is not one" in error and "MiB" not in error


@pytest.mark.parametrize("suffix", ["json", "npz"])
def test_a_small_trace_of_either_kind_still_opens(tmp_path, tiny_checkpoint, monkeypatch, suffix) -> None:
    import streamlit as st

    out = core.load(tiny_checkpoint, device="cpu").translate("The cat sleeps.", max_len=4)
    data = out.trace.save(tmp_path / f"trace.{suffix}").read_bytes()
    monkeypatch.setattr(st, "session_state", {})
    assert trace_replay.open_trace(data) is None
    assert st.session_state[trace_replay.REPLAY].source_text == out.source_text
