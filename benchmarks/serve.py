"""Start the app with `streamlit run` on a free localhost port and wait until it is healthy.

Shared by the end-to-end browser tests (``from benchmarks.serve import ...``) and the app benchmarks; never
imported by the app itself.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "viz_app" / "asgi.py"  # the app behind its page-path middleware
# Debian's Chromium, as the browser test and the app benchmark drive it (Playwright cannot fetch its own here);
# without the background-networking flags Chromium keeps dialling out of this closed machine
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def streamlit_server(
    root: Path,
    checkpoint: str,
    log_path: Path,
    *,
    timeout: float = 90.0,
    extra_env: dict[str, str] | None = None,
    cwd: Path | None = None,
    flags: tuple[str, ...] = ("--browser.gatherUsageStats", "false"),
    on_start: Callable[[subprocess.Popen], None] | None = None,
    app: Path = APP,
) -> Iterator[str]:
    """Yield the base URL of a running app on ``root``/``checkpoint``; stop the server on exit.

    It starts from the repository's root (where ``.streamlit/config.toml`` is read) unless ``cwd`` says
    otherwise; ``flags`` are extra ``streamlit run`` options; ``on_start`` receives the server process (e.g. to
    watch its memory); ``app`` another tree's app (``benchmarks/page_ab.py`` serves an earlier commit's).

    Raises RuntimeError (naming the log file) if the server does not become healthy in ``timeout`` seconds.
    """
    port = free_port()
    env = {**os.environ, "LAB_CHECKPOINT_ROOT": str(root), "LAB_CHECKPOINT": checkpoint, **(extra_env or {})}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                str(app),
                "--server.port",
                str(port),
                "--server.headless",
                "true",
                *flags,
            ],
            cwd=cwd or app.parents[1],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        if on_start is not None:
            on_start(proc)
        try:
            url = f"http://localhost:{port}"
            deadline = time.time() + timeout
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                        if r.read().strip() == b"ok":
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"streamlit did not become healthy; see {log_path}")
                time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
