"""A crafted widget value never opens a folder that is not one of the listed checkpoints, and never echoes a path."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import build_tiny_checkpoint
from streamlit.testing.v1 import AppTest


def _crafted(value: str) -> None:  # runs inside AppTest.from_function
    import streamlit as st

    import core as c
    from viz_app.session import checkpoints, selection
    from viz_app.widgets import sidebar

    st.session_state["ckpt"] = value
    sidebar._checkpoint_changed()  # what the selectbox's on_change runs with a value sent over the websocket
    st.write(f"bundle loaded: {selection.bundle() is not None}")
    try:
        checkpoints.ckpt_path()
    except c.InputError as exc:
        st.write(f"refused: {exc}")


@pytest.mark.parametrize("value", ["../outside", "/etc", "outside/../../outside", "tiny/.."])
def test_an_unlisted_checkpoint_is_refused_before_any_file_is_opened(
    tmp_path: Path, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    build_tiny_checkpoint(root / "tiny", seed=1)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config.json").write_text("{ broken", encoding="utf-8")  # loading it would name this file
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(root))
    at = AppTest.from_function(_crafted, args=(value,), default_timeout=60).run(timeout=60)
    assert not at.exception
    shown = "\n".join([m.value for m in at.markdown] + [e.value for e in at.error])
    assert "bundle loaded: False" in shown
    assert "refused: The chosen checkpoint is not one of the listed ones" in shown
    assert (
        "outside" not in shown.replace(value, "")
        and "config.json" not in shown
        and "/etc" not in shown.replace(value, "")
    )
    assert str(tmp_path) not in shown


def test_a_listed_checkpoint_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    build_tiny_checkpoint(root / "tiny", seed=1)
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(root))
    at = AppTest.from_function(_crafted, args=("tiny",), default_timeout=60).run(timeout=60)
    assert not at.exception and not at.error
    assert any("bundle loaded: True" in m.value for m in at.markdown)
    assert not any("refused" in m.value for m in at.markdown)


def test_a_link_naming_an_unlisted_checkpoint_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    build_tiny_checkpoint(root / "tiny", seed=1)
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(root))
    app = Path(__file__).resolve().parents[2] / "viz_app" / "app.py"
    at = AppTest.from_file(str(app), default_timeout=90)
    at.query_params["ckpt"] = "../secret-folder"
    at.run(timeout=90)
    assert not at.exception
    warnings = [w.value for w in at.warning]
    assert any("not one of the listed ones; the default is shown" in w for w in warnings)
    assert not any("secret-folder" in w for w in warnings)
    assert at.session_state["ckpt"] == "tiny"
