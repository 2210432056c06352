"""How long the Compare page takes for two 22-word sentences (issue 46: it should settle within 2 s here).

    python -m benchmarks.compare_page [--checkpoint distilled-en-pt] [--rounds 5]

The page's script in AppTest (the app's own code, no browser), torch on one thread: a minimal pair of two
22-word sentences opened from a link (run A and run B translated, every head compared, ALTI+ of both, integrated
gradients of the first piece where they part), each round with the shared cache emptied first (nothing computed
before), then the same page again with the cache kept (a rerun, e.g. after picking another head). Medians and
ranges over ``--rounds``. Writes ``benchmarks/compare_page.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "viz_app" / "app.py"
A = "The old farmer who lives near the river sold his small red boat to a young teacher from the city last summer."
B = "The old farmer who lives near the river sold his small blue boat to a young teacher from the city last summer."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default="distilled-en-pt")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "compare_page.md")
    args = parser.parse_args()
    assert len(A.split()) == len(B.split()) == 22
    torch.set_num_threads(1)
    os.environ["LAB_CHECKPOINT_ROOT"], os.environ["LAB_CHECKPOINT"] = str(ROOT / "checkpoints"), args.checkpoint
    os.environ["LAB_TORCH_THREADS"] = "1"
    from streamlit.testing.v1 import AppTest

    from viz_app import cache

    cold, warm = [], []
    for _ in range(args.rounds + 1):  # the first round warms the process (imports, the model load): dropped
        cache.shared().clear()
        at = AppTest.from_file(str(APP), default_timeout=600)
        at.query_params.update({"page": "compare", "text": A, "text_b": B, "forced_b": "0"})
        start = time.perf_counter()
        at.run(timeout=600)
        cold.append(time.perf_counter() - start)
        assert not at.exception and not at.error, [e.message for e in at.exception]
        assert any(m.value.startswith("A's") and "owes most" in m.value for m in at.markdown), "the page did not finish"
        start = time.perf_counter()
        at.run(timeout=600)
        warm.append(time.perf_counter() - start)
    cold, warm = cold[1:], warm[1:]

    def stat(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} s ({min(values):.2f}–{max(values):.2f})"

    text = f"""# The Compare page for two 22-word sentences

`python -m benchmarks.compare_page --checkpoint {args.checkpoint} --rounds {args.rounds}`, \
{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()} ({os.cpu_count()} cores, load average \
{os.getloadavg()[0]:.1f} at the end), torch {torch.__version__} on 1 thread; AppTest runs of the page's script.

A: “{A}”
B: “{B}”

| run of the page | median (range) over {args.rounds} |
|---|---|
| first (nothing cached: both translations, every head compared, ALTI+ of both, integrated gradients) | {stat(cold)} |
| again (cached: a rerun, e.g. another head picked) | {stat(warm)} |

Issue 46's goal: within 2 s.
"""
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
