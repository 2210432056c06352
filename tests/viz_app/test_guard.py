"""The server's promises however it is started: loopback only, no usage statistics, local Host names only (the same
served for real, in a browser: test_browser_guard.py)."""

from __future__ import annotations

import pytest

from viz_app import guard


@pytest.mark.parametrize("host", ["localhost:8501", "127.0.0.1:8501", "[::1]:8501", "LOCALHOST", "localhost"])
def test_local_host_names_pass(host: str) -> None:
    assert guard.host_problem(host) is None


@pytest.mark.parametrize("host", ["evil.example:8501", "evil.example", "127.0.0.1.evil.example:80", "[::2]:8501", ""])
def test_other_host_names_are_refused(host: str) -> None:
    assert "Host header is not local" in (guard.host_problem(host) or "")


def test_allowed_hosts_extend_the_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_ALLOWED_HOSTS", "lab.example, other.example")
    assert guard.host_problem("lab.example:8501") is None and guard.host_problem("evil.example") is not None


def test_unsafe_settings_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAB_SERVE_NETWORK", raising=False)
    assert guard.settings_problem("localhost", False) is None
    assert "every network interface" in (guard.settings_problem(None, False) or "")
    assert "'0.0.0.0'" in (guard.settings_problem("0.0.0.0", False) or "")
    assert "usage statistics" in (guard.settings_problem("127.0.0.1", True) or "")
    monkeypatch.setenv("LAB_SERVE_NETWORK", "1")  # serving a network on purpose
    assert guard.settings_problem("0.0.0.0", False) is None
    assert guard.settings_problem("0.0.0.0", True) is not None  # statistics stay off regardless
