"""Load test: one app server, many simultaneous browser sessions, each typing its own sentences and switching
positional encoding on and off for a bounded time.

Each session checks that the translation it is shown is the one the model gives for ITS sentence and ITS
switches (computed beforehand in this process with the app's thread count), so results mixed between sessions
count as errors, as do timeouts, exception boxes and "This view failed" messages. Also measured: the server's
resident memory (sampled every 0.25 s, and its peak from /proc) and, on a fresh server first, the peak for the
longest input the app accepts.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import core

from .serve import CHROMIUM, CHROMIUM_ARGS, streamlit_server

REPO = Path(__file__).resolve().parents[1]
SUBJECTS = ["The old farmer", "My sister", "A young teacher", "The tired doctor", "Our neighbour", "The little boy",
            "A friendly waiter", "The new student", "His grandmother", "The quiet painter"]  # fmt: skip
VERBS = ["bought", "found", "painted", "sold", "carried", "lost", "washed", "opened"]
OBJECTS = ["a blue bicycle", "the heavy box", "an old map", "a small boat", "the red door", "a warm coat"]
WHEN = ["yesterday.", "this morning.", "last summer.", "after dinner.", "before school.", "on Sunday."]
LONGEST = (
    ", and ".join(
        f"{s} {v} {o} {w.rstrip('.')}"
        for s, v, o, w in zip(SUBJECTS * 4, VERBS * 5, OBJECTS * 7, WHEN * 7, strict=False)
    )
    + "."
)  # about 250 words in ONE sentence (the app splits a text into sentences): beyond the longest input, so the app
# truncates it (the largest trace it ever makes)
NOT_EMPTY = "∅ (the model produced no words)"
ACTION_TIMEOUT_MS = 180_000  # one action (a click, or the page catching up after it) may take this long


def sentences(session: int, n: int) -> list[str]:
    """``n`` sentences of its own for each session (none shared between sessions)."""
    out = []
    for j in range(n):
        k = session * n + j
        out.append(f"{SUBJECTS[k % 10]} {VERBS[(k // 10) % 8]} {OBJECTS[(k // 80) % 6]} {WHEN[(k // 480 + k) % 6]}")
    return out


@dataclass
class Session:
    index: int
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    actions: int = 0


class MemoryWatch:
    """Samples a process's resident memory (VmRSS) in a thread; ``peak`` also reads the kernel's VmHWM."""

    def __init__(self, pid: int) -> None:
        self.pid, self.samples, self._stop = pid, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _field(self, name: str) -> float | None:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith(name + ":"):
                    return int(line.split()[1]) / 1024  # kB -> MiB
        except OSError:
            return None
        return None

    def _run(self) -> None:
        while not self._stop.is_set():
            value = self._field("VmRSS")
            if value is not None:
                self.samples.append(value)
            time.sleep(0.25)

    def now(self) -> float:
        return self._field("VmRSS") or 0.0

    def peak(self) -> float:
        return max([self._field("VmHWM") or 0.0, *self.samples])

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


DONE = """([want]) => [...document.querySelectorAll('h4')].some(h => h.innerText.trim() === want)
    && document.querySelector('[data-testid="stApp"]').getAttribute('data-test-script-state') === 'notRunning'
    && document.querySelectorAll('[data-stale="true"]').length === 0"""
FAILED = """() => document.querySelectorAll('[data-testid="stException"]').length
    + [...document.querySelectorAll('[data-testid="stAlert"]')].filter(a => a.innerText.includes('failed')).length"""


async def _session(browser, url: str, s: Session, texts: list[str], expected: dict, deadline: float) -> None:
    context = await browser.new_context(viewport={"width": 1280, "height": 1600})
    page = await context.new_page()
    page.set_default_timeout(ACTION_TIMEOUT_MS)
    try:
        await page.goto(url, timeout=300_000)
        await page.wait_for_selector(".st-key-text input", timeout=300_000)
        pe, j = True, 0
        while time.time() < deadline:
            text = texts[j % len(texts)]
            switch = j % 3 == 2  # every third action flips positional encoding instead of typing
            if switch:
                pe = not pe
                text = texts[(j - 1) % len(texts)]
            want = expected[(text, pe)] or NOT_EMPTY
            t0 = time.perf_counter()
            try:  # a timeout or a mixed-up result is counted and the session goes on
                if switch:
                    await page.locator(".st-key-pe label").click()
                else:
                    box = page.locator(".st-key-text input")
                    await box.fill(text)
                    await box.press("Enter")
                await page.wait_for_function(DONE, arg=[want], polling=100)
                s.latencies.append(time.perf_counter() - t0)
            except Exception as exc:  # noqa: BLE001
                shown = await page.eval_on_selector_all("h4", "hs => hs.map(h => h.innerText.trim())")
                first = str(exc).splitlines()[0]
                s.errors.append(f"{type(exc).__name__} ({first}): wanted {want!r}, page shows {shown[:2]}")
            if await page.evaluate(FAILED):
                s.errors.append("an error box on the page")
            if await page.locator(".st-key-text input").input_value() != text:
                s.errors.append(f"the text box no longer holds this session's sentence {text!r}")
            s.actions += 1
            j += 1
    except Exception as exc:  # noqa: BLE001
        s.errors.append(f"session stopped: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    finally:
        await context.close()


async def _run_sessions(url: str, sessions: list[Session], texts: dict, expected: dict, seconds: float) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            deadline = time.time() + seconds
            await asyncio.gather(*(_session(browser, url, s, texts[s.index], expected, deadline) for s in sessions))
        finally:
            await browser.close()


async def _longest(url: str) -> float:
    """Seconds from Enter to the truncated translation of LONGEST on one page."""
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 2000})
            await page.goto(url, timeout=300_000)
            await page.wait_for_selector(".st-key-text input", timeout=300_000)
            box = page.locator(".st-key-text input")
            await box.fill(LONGEST)
            t0 = time.perf_counter()
            await box.press("Enter")
            await page.get_by_text("truncated", exact=False).first.wait_for(timeout=300_000)
            await page.wait_for_function(
                """() => document.querySelector('[data-testid="stApp"]')
                           .getAttribute('data-test-script-state') === 'notRunning'""",
                timeout=300_000,
            )
            return time.perf_counter() - t0
        finally:
            await browser.close()


def load_test(root: Path, name: str, *, sessions: int = 20, seconds: float = 120.0) -> dict | str:
    """Figures of one run (see the module doc), or why it was skipped."""
    if not CHROMIUM.exists():
        return f"skipped: {CHROMIUM} is missing (make browser installs Debian's chromium)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "skipped: playwright is not installed (the test extra)"
    import torch

    torch.set_num_threads(1)  # the app's thread count on this machine: the same arithmetic, the same choices
    bundle = core.load(root / name, device="cpu")
    texts = {i: sentences(i, 6) for i in range(sessions)}
    expected = {}
    for own in texts.values():
        for text in own:
            for pe in (True, False):
                options = core.InferenceOptions(positional_encoding=pe)
                expected[(text, pe)] = bundle.translate(text, options=options).text
    watch: list[MemoryWatch] = []
    env = {"LAB_TORCH_THREADS": "1"}
    log = REPO / "test-artifacts" / "streamlit-load.log"
    try:
        with streamlit_server(
            root, name, log, timeout=180, extra_env=env, on_start=lambda proc: watch.append(MemoryWatch(proc.pid))
        ) as url:
            idle = watch[0].now()
            longest_s = asyncio.run(_longest(url))
            longest_peak = watch[0].peak()
            runs = [Session(i) for i in range(sessions)]
            t0 = time.time()
            asyncio.run(_run_sessions(url, runs, texts, expected, seconds))
            wall = time.time() - t0
            peak, end = watch[0].peak(), watch[0].now()
            watch[0].stop()
    except RuntimeError as exc:
        return f"skipped: {exc}"
    latencies = sorted(x for s in runs for x in s.latencies)
    errors = [e for s in runs for e in s.errors]
    return {
        "sessions": sessions,
        "seconds": round(wall, 1),
        "actions": sum(s.actions for s in runs),
        "completed": len(latencies),
        "errors": errors,
        "sessions with errors": sum(bool(s.errors) for s in runs),
        "p50 s": statistics.median(latencies) if latencies else float("nan"),
        "p95 s": latencies[int(0.95 * (len(latencies) - 1))] if latencies else float("nan"),
        "max s": latencies[-1] if latencies else float("nan"),
        "rss idle MiB": idle,
        "longest input s": longest_s,
        "rss peak after the longest input MiB": longest_peak,
        "rss peak under load MiB": peak,
        "rss at the end MiB": end,
        "cache budget MB": 512,
    }


if __name__ == "__main__":
    import json
    import sys

    root = REPO / "checkpoints"
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    secs = float(sys.argv[2]) if len(sys.argv) > 2 else 120.0
    print(json.dumps(load_test(root, core.default_checkpoint(root) or "", sessions=n, seconds=secs), indent=1))
