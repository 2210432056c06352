"""Every page on a ~200-piece sentence, in a real browser: seconds from the click (or Enter) to a settled page.

``python -m benchmarks.long_pages [--checkpoint distilled-en-pt] [--rounds 2]`` starts ``streamlit run
viz_app/app.py``, types one long sentence (no full stop inside: the app splits pasted text into sentences),
then opens each page from the sidebar. A page counts as settled when the server has sent "script finished"
(read from the app's websocket), its own title shows, nothing on it is stale, every Plotly chart has drawn its
data, and all of that has held for 0.5 s; the time is taken when it first held. The server's share (click →
"script finished") is reported beside it. Each round uses a different sentence (so no cache answers the
overview) and visits the pages in the same order; "Why this word?" is timed again after "Measure exactly".
Writes ``benchmarks/long_pages.md`` (machine, date, medians, the bytes each overview render sent).
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

import core

from .app_cost import SHORT
from .serve import CHROMIUM, CHROMIUM_ARGS, streamlit_server

REPO = Path(__file__).resolve().parents[1]
CLAUSES = [s.rstrip(".").lower() for s in SHORT] + [  # app_cost's short sentences first, then more clauses
    "the teacher explained the lesson again because nobody understood it",
    "the neighbours who have lived in the same house for forty years gave us a basket of apples",
    "the last train left the station while the lights in the waiting room were switched off",
    "the guard locked the doors and thought about the years he had spent there",
    "the farmer sold his vegetables to the restaurant near the river",
    "a young doctor answered the telephone in the small hospital",
    "our friends cooked dinner for everyone who came to the party",
    "the students forgot to measure the temperature before the experiment",
]
PAGES = [  # sidebar title, the page's own title
    ("Head detail", "Head detail"),
    ("Masks", "Masks"),
    ("Positional encoding", "Positional encoding"),
    ("Step-by-step decoding", "Step-by-step decoding"),
    ("What does each head do?", "What does each head do?"),
    ("Learn: attention by hand", "Learn: attention by hand"),
    ("Why this word?", "Why this word?"),
    ("Translate & overview", "Translate & overview"),
]
SETTLED = """(title) => {
    const h1 = [...document.querySelectorAll('h1')].some(h => h.innerText.trim() === title);
    const stale = document.querySelectorAll('[data-stale="true"]').length;
    const plots = [...document.querySelectorAll('.js-plotly-plot')];
    const drawn = plots.every(p => p.querySelector('.heatmaplayer image, .scatterlayer .trace, .barlayer .trace'));
    const spinner = document.querySelector('[data-testid="stSpinner"]');
    return h1 && !stale && !spinner && drawn ? document.getElementsByTagName('*').length + ':' + plots.length : '';
}"""


class Socket:
    """What the app's websocket brought: bytes received, and when the server last said "script finished"."""

    def __init__(self) -> None:
        self.bytes = 0
        self.finished: float | None = None
        self.runs = 0  # script runs finished

    def reset(self) -> None:
        self.bytes, self.finished, self.runs = 0, None, 0

    def frame(self, payload: bytes | str) -> None:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        self.bytes += len(payload)
        if isinstance(payload, bytes):
            try:
                kind = ForwardMsg.FromString(payload).WhichOneof("type")
            except Exception:  # noqa: BLE001 — not a ForwardMsg: only counted
                return
            if kind == "script_finished":
                self.finished = time.perf_counter()
                self.runs += 1


def sentence(start: int, pieces: int, bundle: core.Bundle) -> str:
    """One sentence of about ``pieces`` source pieces: clauses from ``start`` on (rotating, so each start gives
    another sentence), joined with commas and 'and'."""
    if not 0 < pieces < bundle.max_source_tokens:
        raise SystemExit(f"--pieces must be between 1 and {bundle.max_source_tokens - 1}, got {pieces}")
    words: list[str] = []
    i = start
    while True:
        words.append(CLAUSES[i % len(CLAUSES)])
        text = (", and ".join(words)).capitalize() + "."
        if len(bundle.encode_source(text, truncate=True)[0]) >= pieces:  # capped below max: the loop ends
            return text
        i += 1


def settle(page: Any, title: str, t0: float, socket: Socket, limit: float = 120.0) -> tuple[float, float]:
    """Seconds from t0 until the page first showed ``title`` settled (script finished, holding unchanged for
    0.5 s), and until the server said "script finished"."""
    first: float | None = None
    seen = ""
    while time.perf_counter() - t0 < limit:
        now = page.evaluate(SETTLED, title) if socket.finished is not None else ""
        t = time.perf_counter()
        if now and now == seen and first is not None:
            if t - first >= 0.5 and socket.finished is not None:
                return first - t0, socket.finished - t0
        elif now:
            first, seen = t, now
        else:
            first, seen = None, ""
        page.wait_for_timeout(50)  # (sync Playwright delivers websocket events only while it waits)
    raise TimeoutError(f"{title!r} did not settle in {limit:.0f} s")


def run(root: Path, name: str, rounds: int, pieces: int) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    bundle = core.load(root / name, device="cpu")
    if not 0 < rounds <= len(CLAUSES):
        raise SystemExit(f"--rounds must be between 1 and {len(CLAUSES)} (one distinct sentence each), got {rounds}")
    texts = [sentence(r * 5 % len(CLAUSES), pieces, bundle) for r in range(rounds)]
    times: dict[str, list[tuple[float, float, int, int]]] = {}  # what -> (settled s, server s, bytes, runs) per round
    sizes = [len(bundle.encode_source(t, truncate=True)[0]) for t in texts]
    (REPO / "test-artifacts").mkdir(exist_ok=True)
    socket = Socket()

    def timed(page: Any, what: str, title: str, action: Any) -> None:
        socket.reset()
        t0 = time.perf_counter()
        action()
        settled, server = settle(page, title, t0, socket)
        times.setdefault(what, []).append((settled, server, socket.bytes, socket.runs))

    with streamlit_server(root, name, REPO / "test-artifacts" / "streamlit-long-pages.log", timeout=120) as url:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 2200})
                page.on("websocket", lambda ws: ws.on("framereceived", socket.frame))
                page.goto(url, timeout=180_000)
                settle(page, "Translate & overview", time.perf_counter(), socket)
                for r, text in enumerate(texts):
                    box = page.locator(".st-key-text input")
                    box.fill(text)
                    timed(page, "Enter → overview", "Translate & overview", functools.partial(box.press, "Enter"))
                    for link, title in PAGES:
                        nav = page.locator('[data-testid="stSidebarNav"] a').filter(has_text=link).first
                        timed(page, link, title, nav.click)
                        page.screenshot(path=str(REPO / "test-artifacts" / f"long-pages-{r}-{title[:12]}.png"))
                        button = page.get_by_text("Measure exactly (switch each head off)")
                        if title == "Why this word?" and button.count():
                            timed(page, "Why this word? → Measure exactly", title, button.click)
            finally:
                browser.close()
    return {"times": times, "pieces": sizes, "texts": texts}


def report(result: dict[str, Any], name: str) -> str:
    lines = [
        "# Every page on a long sentence (`python -m benchmarks.long_pages`)",
        "",
        f"- Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; torch {torch.__version__}",
        f"- Checkpoint: {name}; sentences of {', '.join(map(str, result['pieces']))} source pieces (one per round)",
        "",
        "| page (opened from the sidebar) | median s to settled "
        "| each round: settled s / server done s / MB received / script runs |",
        "|---|---|---|",
    ]
    for what, rows in result["times"].items():
        each = "; ".join(f"{a:.2f} / {b:.2f} / {c / 1e6:.2f} / {n}" for a, b, c, n in rows)
        lines.append(f"| {what} | {statistics.median(r[0] for r in rows):.2f} | {each} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPO / "checkpoints")
    parser.add_argument("--checkpoint", default="distilled-en-pt")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pieces", type=int, default=200, help="source pieces per sentence (at least)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "long_pages.md")
    args = parser.parse_args()
    if not CHROMIUM.exists():
        raise SystemExit(f"{CHROMIUM} is missing (make browser installs Debian's chromium)")
    text = report(run(args.root, args.checkpoint, args.rounds, args.pieces), args.checkpoint)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
