"""What issue 47's analyses cost beside a traced translation, and beside the analyses they join.

    python -m benchmarks.explain_cost [--checkpoint distilled-en-pt] [--rounds 7]

On one sentence ("The cat sleeps on the warm chair."; output position of “gato”, alternative “cão”), torch on one
thread, interleaved rounds (``benchmarks.timing``, two warm-up rounds dropped): a traced translation
(``Bundle.translate``, the unit); the logit lens as the page and the CLI run it (``logit_lens``: its own greedy
translation and one teacher-forced pass recorded with activations) and on a run already recorded with activations
(``lens_of``: what the lens itself adds); integrated gradients (32 steps) plain and contrastive; head importance
(every head switched off alone) and value zeroing. Ratios are the medians of per-round ratios. Issue 47's goals:
logit lens ≤ 0.2× a traced translation, contrastive ≤ plain attribution, value zeroing ≤ 2× head importance.
Writes ``benchmarks/explain_cost.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
from datetime import UTC, datetime
from pathlib import Path

import torch

import core
from benchmarks.timing import interleaved, paired_ratio
from core.analysis.attribution import attribute
from core.analysis.importance import head_importance
from core.analysis.lens import lens_of, logit_lens
from core.analysis.value_zeroing import value_zeroing
from core.sites import ids_site

ROOT = Path(__file__).resolve().parents[1]
TEXT = "The cat sleeps on the warm chair."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default="distilled-en-pt")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "explain_cost.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    bundle = core.load(ROOT / "checkpoints" / args.checkpoint)
    out = bundle.translate(TEXT)
    recorded = bundle.translate(TEXT, record=core.Record(qkv=False, activations=True))
    src_ids, out_ids = list(out.trace[ids_site("src")]), list(out.output_ids)
    position = next(i for i, piece in enumerate(out.output_tokens) if "gato" in piece)
    works = {
        "traced translation": lambda: bundle.translate(TEXT),
        "logit lens (its own runs)": lambda: logit_lens(bundle, TEXT),
        "logit lens of a recorded run": lambda: lens_of(bundle, recorded),
        "integrated gradients": lambda: attribute(bundle, src_ids, out_ids, position, steps=32),
        "contrastive integrated gradients": lambda: attribute(
            bundle, src_ids, out_ids, position, steps=32, contrast="cão"
        ),
        "head importance": lambda: head_importance(bundle, src_ids, out_ids),
        "value zeroing": lambda: value_zeroing(bundle, TEXT),
    }
    stats = interleaved(works, rounds=args.rounds, warmup=2)
    ratio = {
        "logit lens (its own runs) / traced translation": paired_ratio(
            stats["logit lens (its own runs)"], stats["traced translation"]
        ),
        "logit lens of a recorded run / traced translation (goal ≤ 0.2)": paired_ratio(
            stats["logit lens of a recorded run"], stats["traced translation"]
        ),
        "contrastive / plain integrated gradients (goal ≤ 1)": paired_ratio(
            stats["contrastive integrated gradients"], stats["integrated gradients"]
        ),
        "value zeroing / head importance (goal ≤ 2)": paired_ratio(stats["value zeroing"], stats["head importance"]),
    }
    rows = "\n".join(f"| {name} | {s.ms} |" for name, s in stats.items())
    ratios = "\n".join(f"| {name} | {value:.2f}× |" for name, value in ratio.items())
    text = f"""# What issue 47's analyses cost

`python -m benchmarks.explain_cost --checkpoint {args.checkpoint} --rounds {args.rounds}`, \
{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()} ({os.cpu_count()} cores, load average \
{os.getloadavg()[0]:.1f} at the end), torch {torch.__version__} on 1 thread; “{TEXT}” → “{out.text}”, output
position {position + 1} (“gato”), alternative “cão”; integrated gradients with 32 steps.

| contender | median (range), ms |
|---|---|
{rows}

| ratio (median of per-round ratios) | |
|---|---|
{ratios}
"""
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
