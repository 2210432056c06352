"""Do head importance, attribution and cross-attention agree? Measured on held-out sentences of the default model.

    python -m benchmarks.agreement [--sentences 20] [--steps 16]

For each of the first N Ding test sentences (``core.training.corpus.make_split``, the split the distilled
student was scored on) the default checkpoint translates greedily; then, for every output token but the final
eos, integrated gradients give |IG| over the source tokens (position-kept baseline). Per cross-attention head:
  * importance = -Δ log p of the translation when the head alone is switched off (``head_importance``);
  * attribution agreement = mean over output tokens of Spearman ρ(|IG|, the head's attention row).
Reported: the Spearman correlation, over the cross heads, between importance and attribution agreement
(median over sentences), and how often the most important cross head's argmax source token equals the top
attributed source token (over all output tokens), next to the same rate for every cross head on average.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch

import core
from core.analysis import head_importance
from core.analysis.attribution import attribute, spearman
from core.training.corpus import fetch_ding, make_split, read_ding

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=20)
    parser.add_argument("--steps", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = HERE.parent / "checkpoints"
    name = core.default_checkpoint(root)
    if name is None:
        print("no checkpoint under checkpoints/")
        return 1
    bundle = core.load(root / name, device="cpu")
    ding = fetch_ding(HERE.parent / "data" / "ding")
    test = make_split(read_ding(ding)).test[: args.sentences]
    start = time.time()
    rank_agreement: list[float] = []
    top_hits, top_total, all_hits, all_total = 0, 0, 0, 0
    for pair in test:
        out = bundle.translate(pair.en)
        src = [int(i) for i in out.trace["ids.src"]]
        ids = [int(i) for i in out.trace["output.ids"]]
        importance = head_importance(bundle, src, ids, kinds=("cross",))
        heads = [(e.layer, e.head) for e in importance.effects]
        relied = np.array([-e.delta_logprob for e in importance.effects])
        top_layer, top_head = max(heads, key=lambda lh: relied[heads.index(lh)])
        per_head: dict[tuple[int, int], list[float]] = {lh: [] for lh in heads}
        for t in range(max(len(ids) - 1, 1)):  # the final eos is left out
            ig = np.abs(attribute(bundle, src, ids, t, steps=args.steps).source_ig)
            for layer, h in heads:
                row = out.trace.attention("cross", layer)[h, t]
                rho = spearman(ig, row)
                if np.isfinite(rho):
                    per_head[(layer, h)].append(rho)
                hit = int(np.argmax(row) == np.argmax(ig))
                all_hits, all_total = all_hits + hit, all_total + 1
                if (layer, h) == (top_layer, top_head):
                    top_hits, top_total = top_hits + hit, top_total + 1
        agreement = np.array([statistics.mean(per_head[lh]) if per_head[lh] else np.nan for lh in heads])
        ok = np.isfinite(agreement)
        rank_agreement.append(spearman(relied[ok], agreement[ok]))
    finite = [r for r in rank_agreement if np.isfinite(r)]
    print(f"# Agreement of head importance, attribution and cross-attention ({name}, {len(test)} held-out sentences)")
    print(
        "- Spearman over cross heads between importance and attribution agreement: median "
        f"{statistics.median(finite):.2f} "
        f"(range {min(finite):.2f} to {max(finite):.2f}, {len(finite)} sentences)"
    )
    print(
        f"- most important cross head's argmax = top attributed source token: {top_hits}/{top_total} "
        f"= {top_hits / top_total:.0%} of output tokens (every cross head on average: {all_hits / all_total:.0%})"
    )
    print(f"- integrated gradients with {args.steps} steps; {time.time() - start:.0f} s on 1 thread")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
