"""Explain a translation: which heads it relied on (head importance) and where attention routes (rollout)."""

from __future__ import annotations

import argparse
import json
import sys

from ..config import InferenceOptions
from .importance import head_importance
from .rollout import FUSIONS, trace_rollout

WHAT = ("importance", "rollout")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=WHAT, help="importance: switch each head off alone; rollout: attention rollout")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument("--top", type=int, default=10, help="importance: how many heads to list (default 10)")
    p.add_argument("--no-output-check", action="store_true", help="importance: skip the greedy decode per head")
    p.add_argument("--fusion", choices=FUSIONS, default="mean", help="rollout: how heads are fused (default mean)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("text", nargs="+", help="the sentence")


def run(args: argparse.Namespace) -> int:
    from ..bundle import load
    from ..errors import InputError

    if args.top < 1:
        raise InputError(f"--top must be at least 1, got {args.top}")
    bundle = load(args.checkpoint, device=args.device)
    out = bundle.translate(" ".join(args.text), InferenceOptions(), truncate=True)
    if args.what == "importance":
        src_ids, _ = bundle.encode_source(out.source_text)
        out_ids = [int(i) for i in out.trace["output.ids"]]
        result = head_importance(
            bundle.model, src_ids, out_ids, check_output=not args.no_output_check, fast=bundle.fast
        )
        if args.json:
            print(json.dumps({"text": out.text, "output_tokens": out.output_tokens, **result.to_dict()}))
            return 0
        print(
            f"{out.text}\nlog p(translation) = {result.base_logprob:.3f} over {result.n_tokens} tokens; "
            f"each head switched off alone (most relied on first):"
        )
        for e in result.ranking()[: args.top]:
            changed = "" if e.output_changed is None else ("  output changes" if e.output_changed else "")
            print(f"  {e.label:<16} {e.delta_logprob:+9.3f}{changed}")
        return 0
    r = trace_rollout(out.trace, args.fusion)
    per_output = r.per_output()
    if args.json:
        print(
            json.dumps(
                {
                    "text": out.text,
                    "src_tokens": out.src_tokens,
                    "output_tokens": out.output_tokens,
                    "fusion": r.fusion,
                    "source": r.source.round(5).tolist(),
                    "target": r.target.round(5).tolist(),
                    "notes": list(r.notes),
                }
            )
        )
        return 0
    print(out.text)
    for note in r.notes:
        print(f"note: {note}", file=sys.stderr)
    for t, token in enumerate(out.output_tokens):
        best = per_output[t].argsort()[::-1][:3]
        where = ", ".join(f"{out.src_tokens[j]} {per_output[t, j]:.2f}" for j in best)
        print(f"  {token:<14} source share {r.source[t].sum():.2f}; most: {where}")
    return 0
