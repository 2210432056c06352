"""A/B of our engine against an earlier commit, in one session: ours traced and untraced, 20 -> 20 tokens.

    python -m benchmarks.ab --base REV [--repeats 6] [--rounds 20]
    python -m benchmarks.ab --base REV --checkpoint bergamot-en-pt   # a real model: 20 built-in sentences a round

Checks REV out into a temporary git worktree, then alternates fresh processes of the two engines (each imports
its own ``benchmarks/contenders.py`` and ``core``), each timing ``--rounds`` translations per contender with
the process's CPU time (less sensitive than wall time to other jobs on a shared machine), the first of each pair
alternating. Prints each process's
medians and, per contender, the median over processes of (this tree ÷ REV).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKER = """
import json, statistics, sys, time, torch
torch.set_num_threads(1)
import benchmarks.contenders as C  # the tree's own: the worker runs in it (python -c puts the cwd first)
if sys.argv[3]:  # a checkpoint: text -> text on the built-in sentences, traced (no q/k/v) and untraced
    import core
    from core.analysis.sentences import builtin_sentences
    try:  # the core root grouped by job (issue 44); trees before it had core/decoding.py
        from core.decoding.search import default_max_len, greedy
    except ImportError:
        from core.decoding import default_max_len, greedy
    bundle, (texts, _) = core.load(sys.argv[3], device="cpu"), builtin_sentences("en", 20)

    @torch.inference_mode()
    def plain():
        for text in texts:
            ids, _ = bundle.encode_source(text)
            src = torch.tensor([ids])
            keep = torch.ones_like(src, dtype=torch.bool)
            opts, n = core.InferenceOptions(), default_max_len(len(ids))
            if hasattr(core, "Call"):  # one per-call context; trees before it took keywords
                greedy(bundle.model, src, keep, core.Call(options=opts, fast=bundle.fast, max_len=n))
            else:
                greedy(bundle.model, src, keep, options=opts, max_len=n, fast=bundle.fast)

    # q/k/v off: one Record per call; trees before it took keywords
    no_qkv = {"record": core.Record(qkv=False)} if hasattr(core, "Record") else {"record_qkv": False}
    works = {"traced": lambda: [bundle.translate(t, **no_qkv) for t in texts], "untraced": plain}
else:
    model, src = C.our_model(), C.source(20, seed=3)
    works = {"traced": C.ours_greedy(model, src, True), "untraced": C.ours_greedy(model, src, False)}
for work in works.values():
    work(); work()
times = {name: [] for name in works}
for _ in range(int(sys.argv[2])):
    for name, work in works.items():
        t = time.process_time(); work(); times[name].append(time.process_time() - t)
print(json.dumps({name: statistics.median(v) for name, v in times.items()}))
"""


def run(tree: Path, rounds: int, checkpoint: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", WORKER, str(tree), str(rounds), checkpoint],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare with")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--checkpoint", default="", help="a checkpoint under checkpoints/ (default: the random model)")
    args = parser.parse_args()
    checkpoint = str(HERE.parent / "checkpoints" / args.checkpoint) if args.checkpoint else ""
    repo = HERE.parent
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(
            ["git", "-C", str(repo), "worktree", "add", "--detach", str(base), args.base],
            check=True,
            capture_output=True,
        )
        try:
            ratios: dict[str, list[float]] = {}
            for i in range(args.repeats):
                if i % 2:  # alternate which runs first, so an order effect cancels
                    b, a = run(repo, args.rounds, checkpoint), run(base, args.rounds, checkpoint)
                else:
                    a, b = run(base, args.rounds, checkpoint), run(repo, args.rounds, checkpoint)
                print(
                    f"round {i + 1}: {args.base} "
                    + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in a.items())
                    + " | this tree "
                    + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in b.items()),
                    flush=True,
                )
                for k in a:
                    ratios.setdefault(k, []).append(b[k] / a[k])
        finally:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(base)], capture_output=True)
    for k, v in ratios.items():
        print(
            f"{k}: this tree ÷ {args.base} = {statistics.median(v):.3f} (median of {len(v)} paired processes; "
            f"range {min(v):.3f}-{max(v):.3f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
