"""A/B of the app against an earlier commit's, in one session: Enter → every heatmap drawn, in one Chromium.

    python -m benchmarks.page_ab --base REV [--sentences 8] [--checkpoint distilled-en-pt]

Checks REV out into a temporary git worktree and serves both apps side by side (each imports its own ``core`` and
``viz_app``: ``PYTHONPATH`` names its tree), one torch thread each, on the same checkpoint. Each sentence (the app
benchmark's 10- and 60-word ones, new to both caches) is typed into both tabs in turn, the first alternating, and
timed as ``benchmarks/app_cost.py`` times it. Prints each pair and the median of (this tree ÷ REV).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import core
from benchmarks.app_cost import HEATMAPS_DONE, LONG, SHORT
from benchmarks.serve import CHROMIUM, CHROMIUM_ARGS, streamlit_server

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare with")
    parser.add_argument("--sentences", type=int, default=8)
    parser.add_argument("--checkpoint", default="distilled-en-pt", help="a checkpoint under checkpoints/")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    root = REPO / "checkpoints"
    bundle = core.load(root / args.checkpoint, device="cpu")
    sentences = (SHORT + LONG) * (1 + args.sentences // (len(SHORT) + len(LONG)))
    times: dict[str, list[float]] = {"base": [], "this": []}
    logs = REPO / "test-artifacts"
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(base), args.base], check=True)
        stack.callback(subprocess.run, ["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)])
        urls = {
            name: stack.enter_context(
                streamlit_server(
                    root,
                    args.checkpoint,
                    logs / f"page-ab-{name}.log",
                    timeout=180,
                    extra_env={"LAB_TORCH_THREADS": "1", "PYTHONPATH": str(tree)},
                    app=tree / "viz_app" / "asgi.py",
                )
            )
            for name, tree in (("base", base), ("this", REPO))
        }
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            tabs = {}
            for name, url in urls.items():
                tab = browser.new_page(viewport={"width": 1400, "height": 2200})
                tab.goto(url, timeout=180_000)
                tab.wait_for_selector(".js-plotly-plot .heatmaplayer", timeout=180_000)  # first load: not timed
                tabs[name] = tab
            for i, sentence in enumerate(sentences[: args.sentences]):
                want = bundle.translate(sentence).text or "∅ (the model produced no words)"
                for name in ("base", "this") if i % 2 == 0 else ("this", "base"):
                    box = tabs[name].locator(".st-key-text input")
                    box.fill(sentence)
                    start = time.perf_counter()
                    box.press("Enter")
                    tabs[name].wait_for_function(HEATMAPS_DONE, arg=[want, "as trained"], timeout=120_000, polling=50)
                    times[name].append(time.perf_counter() - start)
                print(f"sentence {i + 1}: {args.base} {times['base'][-1]:.3f} s | this tree {times['this'][-1]:.3f} s")
            browser.close()
    ratios = [t / b for t, b in zip(times["this"], times["base"], strict=True)]
    print(
        f"Enter → heatmaps: this tree ÷ {args.base} = {statistics.median(ratios):.3f} (median of {len(ratios)} "
        f"pairs; range {min(ratios):.3f}-{max(ratios):.3f}); medians {statistics.median(times['base']):.3f} s / "
        f"{statistics.median(times['this']):.3f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
