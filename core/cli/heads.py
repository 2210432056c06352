"""What each head does, and which cross heads align words: ``python -m core heads ...``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..analysis.alignment import AlignmentScores, links, read_gold, word_matrix, word_spans
from ..analysis.heads import STATS, HeadStatistics, sentence_statistics
from ..analysis.survey import alignment_scores, builtin_statistics, gold_pairs
from ..bundle import load
from ..config import Record
from ..errors import InputError
from ..results import Translation


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, help="checkpoint folder")
    p.add_argument(
        "--gold",
        type=Path,
        default=None,
        help="gold alignments (source<TAB>target<TAB>Pharaoh links; default: the shipped file for the "
        "checkpoint's languages, when there is one)",
    )
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument("--no-cache", action="store_true", help="recompute the built-in set's statistics")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument(
        "text",
        nargs="*",
        help="a sentence: its heads' statistics and its word alignment (default: the built-in set and the gold data)",
    )


def run(args: argparse.Namespace) -> int:

    bundle = load(args.checkpoint, device=args.device)
    if args.gold is not None and not args.gold.is_file():
        raise InputError(f"--gold {args.gold}: no such file")
    gold = read_gold(args.gold) if args.gold is not None else gold_pairs(*bundle.languages)
    try:
        scores = alignment_scores(bundle, gold) if gold else None
    except InputError as exc:  # a pair too long to read: say which file holds it
        if args.gold is None:
            raise
        raise InputError(f"--gold {args.gold}: a pair cannot be used: {exc}") from None
    if args.text:
        out = bundle.translate(" ".join(args.text), truncate=True, record=Record(qkv=False))
        for notice in out.notices:  # as translate says them
            print(f"note: {notice}", file=sys.stderr)
        stats = sentence_statistics(out.trace)
        what = f"the sentence {out.source_text!r} → {out.text!r}"
    else:
        stats, language = builtin_statistics(bundle, use_cache=not args.no_cache)
        what = f"{stats.n_sentences} built-in {language} sentences"
    if scores is not None:
        stats = stats.with_alignment(scores.head_aer)
    alignment = _sentence_alignment(out, scores) if args.text else None
    if args.json:
        print(
            json.dumps(
                {
                    "over": what,
                    "heads": stats.table(),
                    "alignment_scores": scores.to_dict() if scores else None,
                    "alignment": alignment,
                }
            )
        )
        return 0
    _print_report(stats, what, scores, alignment)
    return 0


def _sentence_alignment(out: Translation, scores: AlignmentScores | None) -> dict[str, Any]:
    """The translation's word links from the best gold-scored head (else the last layer's average)."""
    trace = out.trace
    if "cross" not in trace.kinds:
        return {"links": [], "by": "no cross-attention"}
    last = trace.n_layers["cross"] - 1
    if scores is not None:
        layer, head = scores.best_head
        m, by = trace.attention("cross", layer)[head], f"layer {layer + 1} head {head + 1} (best on gold)"
        shift = scores.shift
    else:
        m, by, shift = trace.attention("cross", last).mean(0), f"layer {last + 1}, heads averaged", 0
    matrix = word_matrix(m, trace.src_tokens, trace.output_tokens, shift=shift)
    src_words = ["".join(trace.src_tokens[i] for i in w).replace("▁", "") for w in word_spans(trace.src_tokens)]
    out_words = ["".join(trace.output_tokens[i] for i in w).replace("▁", "") for w in word_spans(trace.output_tokens)]
    found = sorted(links(matrix), key=lambda x: x[1])
    return {
        "by": by,
        "source_words": src_words,
        "target_words": out_words,
        "links": [f"{i}-{j}" for i, j in found],
        "pairs": [[src_words[i], out_words[j]] for i, j in found],
        "matrix": matrix.round(4).tolist(),
    }


def _print_report(
    stats: HeadStatistics, what: str, scores: AlignmentScores | None, alignment: dict[str, Any] | None
) -> None:
    print(f"Head statistics over {what}:")
    for kind in stats.kinds:
        n_layers, n_heads = stats.sums[kind][STATS[0]].shape
        print(f"  {kind}: {n_layers} layers × {n_heads} heads")
    print("Labels (the rule and its evidence):")
    labels = stats.labels()
    for x in labels:
        print(f"  {x.kind:<8} L{x.layer + 1} H{x.head + 1:<3} {x.label:<17} {x.evidence}")
    if not labels:
        print("  none reaches a threshold")
    if scores is not None:
        layer, head = scores.best_head
        print(
            f"Alignment on {scores.n_pairs} gold pairs (AER, lower is better; {scores.method}, shift {scores.shift}):"
        )
        print(f"  best head: cross L{layer + 1} H{head + 1}  AER {scores.head_aer[layer, head]:.3f}")
        combo = " + ".join(f"L{a + 1}H{b + 1}" for a, b in scores.best_k)
        print(f"  best combination: {combo}  AER {scores.best_k_aer:.3f}")
        for i, v in enumerate(scores.layer_aer):
            print(f"  layer {i + 1} average: AER {v:.3f}")
        print(f"  all heads average: AER {scores.all_aer:.3f}")
        for name, v in scores.baselines.items():
            print(f"  baseline, {name}: AER {v:.3f}")
    else:
        print("Alignment: no gold data for these languages (--gold FILE scores the heads on yours)")
    if alignment is not None and alignment.get("pairs") is not None:
        print(f"Word alignment of the sentence ({alignment['by']}):")
        for a, b in alignment["pairs"]:
            print(f"  {a} → {b}")


__all__ = ["add_arguments", "run"]
