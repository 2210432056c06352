"""What the app costs: bytes of the figures it sends, and seconds in a real browser.

``figure_payload`` builds the overview page's figures with ``viz_app.figures.attention_maps`` (the same builders
the page calls) and measures their JSON. ``browser_timings`` starts ``streamlit run viz_app/app.py``,
drives Debian's Chromium with Playwright, and times Enter -> every heatmap drawn, and the
positional-encoding toggle -> the updated page. Each returns a reason string instead when it cannot run.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import core

from .serve import CHROMIUM, CHROMIUM_ARGS, streamlit_server

REPO = Path(__file__).resolve().parents[1]
SHORT = [
    "The old man walked slowly to the market this morning.",
    "My sister bought a red bicycle for her young son.",
    "We will visit our grandparents in the mountains next summer.",
    "The children played football in the park after school today.",
]
LONG = [
    ", and ".join(
        s.rstrip(".")
        for s in SHORT[i:]
        + SHORT[:i]
        + [
            "The teacher explained the lesson again because nobody understood it.",
            "Please close the window before you leave the house tonight.",
        ]
    )
    + "."
    for i in range(len(SHORT))
]  # six 10-word clauses in ONE sentence (the app splits a text into sentences): 60 words, distinct so the
# app's cache never answers
# Done = the new translation is shown, the script run has replaced every stale element, and every visible
# heatmap chart on the page (the overview's grid and its large head; at least two) has drawn its image(s)
# (with a switch on, a bar chart waits in a closed expander: not drawn, not visible, not waited for).
HEATMAPS_DONE = """([want, note]) => [...document.querySelectorAll('h4')].some(h => h.innerText.trim() === want)
    && document.querySelectorAll('[data-stale="true"]').length === 0
    && (() => { const plots = [...document.querySelectorAll('.js-plotly-plot')]
                    .filter(p => p.offsetParent !== null && !p.querySelector('.barlayer .trace'));
                return plots.length >= 2 && plots.every(p => p.querySelector('.heatmaplayer image')); })()
    && [...document.querySelectorAll('.js-plotly-plot .gtitle')]
         .every(t => !t.textContent.includes(' — ') || t.textContent.includes(note))"""


# ----------------------------------------------------------------------------- bytes sent
def figure_payload(trace: core.Trace, src_tokens: list[str], tgt_tokens: list[str]) -> dict[str, Any]:
    """JSON bytes of the overview's figures (one grid per attention kind, one large head), and build time."""
    from viz_app.figures import attention_maps

    axes = {"encoder": (src_tokens, src_tokens), "decoder": (tgt_tokens, tgt_tokens), "cross": (tgt_tokens, src_tokens)}
    out: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    for kind in trace.kinds:
        t0 = time.perf_counter()
        maps = [trace.attention(kind, layer) for layer in range(trace.n_layers[kind])]
        out[f"{kind} grid"] = len(
            attention_maps.attention_grid(maps, *axes[kind], title=f"{kind}: every layer × head").to_json()
        )
        seconds[kind] = time.perf_counter() - t0
    t0 = time.perf_counter()
    head = attention_maps.head_heatmap(
        trace.attention("encoder", 0)[0], src_tokens, src_tokens, title="encoder · L1 · H1"
    )
    out["one head, large"] = len(head.to_json())
    seconds["head"] = time.perf_counter() - t0
    out["build + to_json seconds"] = sum(seconds.values())
    out["overview build + to_json seconds"] = seconds["encoder"] + seconds["head"]
    out["overview render (encoder tab + one head)"] = out["encoder grid"] + out["one head, large"]
    return out


# ----------------------------------------------------------------------------- browser
def browser_timings(root: Path, name: str, repeats: int = 2) -> dict[str, list[float]] | str:
    """Seconds per event (medians are taken by the caller), or the reason it was skipped."""
    if not (REPO / "viz_app" / "app.py").exists():
        return "skipped: viz_app/app.py is missing"
    if not CHROMIUM.exists():
        return f"skipped: {CHROMIUM} is missing (make browser installs Debian's chromium)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return "skipped: playwright is not installed (the test extra)"
    bundle = core.load(root / name, device="cpu")
    no_pe = core.InferenceOptions(positional_encoding=False)
    (REPO / "test-artifacts").mkdir(exist_ok=True)
    results: dict[str, list[float]] = {}
    for label in ("10 words", "60 words"):  # 'of which': the server's share, timed in this process outside the windows
        for event in (
            "Enter → heatmaps",
            "of which Bundle.translate (traced)",
            "of which overview figures built + to_json",
        ):
            results[f"{event}, {label}"] = []
    results["PE toggle → updated page, 10 words"] = []
    try:
        with streamlit_server(root, name, REPO / "test-artifacts" / "streamlit-bench.log", timeout=120) as url:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
                try:
                    page = browser.new_page(viewport={"width": 1400, "height": 2200})
                    page.goto(url, timeout=180_000)
                    page.wait_for_selector(".js-plotly-plot .heatmaplayer", timeout=180_000)  # first load: not timed
                    for r in range(repeats):
                        for label, sentence in (("10 words", SHORT[r % len(SHORT)]), ("60 words", LONG[r % len(LONG)])):
                            t0 = time.perf_counter()
                            translation = bundle.translate(sentence)
                            results[f"of which Bundle.translate (traced), {label}"].append(time.perf_counter() - t0)
                            payload = figure_payload(translation.trace, translation.src_tokens, translation.tgt_tokens)
                            results[f"of which overview figures built + to_json, {label}"].append(
                                payload["overview build + to_json seconds"]
                            )
                            want = translation.text or "∅ (the model produced no words)"
                            box = page.locator(".st-key-text input")
                            box.fill(sentence)
                            t0 = time.perf_counter()
                            box.press("Enter")
                            page.wait_for_function(HEATMAPS_DONE, arg=[want, "as trained"], timeout=120_000, polling=50)
                            results[f"Enter → heatmaps, {label}"].append(time.perf_counter() - t0)
                            if label == "10 words":
                                want_off = (
                                    bundle.translate(sentence, options=no_pe).text or "∅ (the model produced no words)"
                                )
                                for want_now, note in ((want_off, "PE off"), (want, "as trained")):
                                    t0 = time.perf_counter()
                                    page.locator(".st-key-pe label").click()
                                    page.wait_for_function(
                                        HEATMAPS_DONE, arg=[want_now, note], timeout=120_000, polling=50
                                    )
                                    if note == "PE off":  # switching back is served from the app's cache: not timed
                                        results["PE toggle → updated page, 10 words"].append(time.perf_counter() - t0)
                except Exception as exc:  # noqa: BLE001 — report why (with a screenshot) instead of losing the other sections
                    shot = REPO / "test-artifacts" / "bench-browser-failure.png"
                    page.screenshot(path=str(shot))
                    first_line = str(exc).splitlines()[0]
                    return f"failed: {type(exc).__name__}: {first_line} (screenshot: {shot.relative_to(REPO)})"
                finally:
                    browser.close()
    except RuntimeError as exc:
        return f"skipped: {exc}"
    return results


def median_s(values: list[float]) -> str:
    if not values:
        return "–"
    return f"{statistics.median(values):.2f} s ({min(values):.2f}–{max(values):.2f}, n={len(values)})"


def bytes_str(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def trace_for(model: core.Transformer, src: Any, n: int, qkv: bool) -> core.Trace:
    """A greedy trace of exactly ``n`` generated tokens (eos suppressed by the benchmark model)."""
    from . import contenders

    return contenders.ours_greedy(model, src, True, n, qkv=qkv)()
