"""The server's promises, served for real: loopback only, no usage statistics, local Host names only, however it is
started (the unit tests of viz_app.guard are in test_guard.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ARTIFACTS, build_tiny_checkpoint, new_tab

from benchmarks.serve import streamlit_server

pytestmark = pytest.mark.browser


def _listening_addresses(port: int) -> set[str]:
    """Local addresses (hex, as /proc writes them) of sockets listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def test_safe_from_any_folder_and_refused_when_made_unsafe_or_reached_under_another_name(
    tmp_path: Path, lab_server: tuple[str, Path], chromium: object
) -> None:
    """Real servers: the worker's browser-test server, started from the repository root as `make run` starts it, and
    one started from a folder with no config (both listen on loopback only, and the second's page runs: the app
    refuses to run with usage statistics on, Streamlit's default, so its own settings held there; a server started
    as the first is has its pages run in test_browser.py); the first reached under a foreign name as a
    DNS-rebinding page would (refused: the shared Chromium resolves evil.example to this machine); one started with
    flags that make it listen everywhere with statistics on (refused)."""
    root = tmp_path / "ckpts"
    build_tiny_checkpoint(root / "tiny", seed=1)
    loopback = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1 and ::1 as /proc writes them

    def listens_on_loopback_only(url: str) -> None:
        addresses = _listening_addresses(int(url.rsplit(":", 1)[1]))
        assert addresses and addresses <= loopback, (url, addresses)

    shared_url = lab_server[0]
    listens_on_loopback_only(shared_url)
    with new_tab(chromium, "guard-rebound") as rebound:
        rebound.goto(shared_url.replace("localhost", "evil.example"))
        rebound.get_by_text("Host header is not local").wait_for(timeout=60_000)
        assert rebound.get_by_text("Source pieces").count() == 0  # nothing ran, no widget
    with streamlit_server(root, "tiny", ARTIFACTS / "server-guard-0.log", cwd=tmp_path, flags=()) as url:
        listens_on_loopback_only(url)
        with new_tab(chromium, "guard-any-folder") as page:
            page.goto(url)
            page.get_by_text("Source pieces").first.wait_for(timeout=60_000)  # the app runs: the safe settings held
    unsafe = ("--server.address", "0.0.0.0", "--browser.gatherUsageStats", "true")
    with streamlit_server(root, "tiny", ARTIFACTS / "server-guard-1.log", cwd=tmp_path, flags=unsafe) as url:
        with new_tab(chromium, "guard-unsafe") as page:
            page.goto(url)
            page.get_by_text("without the lab's safe settings").wait_for(timeout=60_000)
            assert page.get_by_text("'0.0.0.0'").count() == 1 and page.get_by_text("Source pieces").count() == 0
