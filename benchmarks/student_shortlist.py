"""Tried and rejected for the long-sentence student: decoding it over its teacher's lexical shortlist.

    python -m benchmarks.student_shortlist [--buckets 2,3] [--per-bucket 100]

The distilled student shares its teacher's vocabulary (``build_student`` copies the embeddings and the output
layer), so the teacher's lexical shortlist (``checkpoints/bergamot-en-pt/shortlist.safetensors``: the 50 most
frequent pieces, the 50 likeliest translations of each source piece, the source pieces themselves) can restrict
the student's output too. Would that stop it inventing words? For the held-out inputs of each asked bucket (those
of ``python -m core eval --by-length``: Ding test sentences, several joined for the long buckets), the student's
greedy output over the whole vocabulary and over the shortlist, one input at a time (``Bundle.translate``; the
eval decodes in padded batches, so its figures can differ slightly), each scored against the teacher's greedy
output as ``core.distill.fidelity`` scores it: chrF, BLEU, outputs under 85 % of the teacher's length, non-words
(known words: the word list and the teacher's outputs for every bucket). Writes ``benchmarks/student_shortlist.md``.
"""

from __future__ import annotations

import argparse
import statistics
from datetime import UTC, datetime
from pathlib import Path

import core
from core.distill.fidelity import (
    BUCKETS,
    bucket_fidelity,
    heldout_sentences,
    inputs_by_length,
    known_words,
    word_list,
)
from core.training.evaluate import translate_many

ROOT = Path(__file__).resolve().parents[1]

HEADER = [
    "| source pieces | inputs | decoding | shortlist rows (median) | chrF vs teacher | BLEU | cut short | non-words "
    "| e.g. |",
    "|---|---|---|---|---|---|---|---|---|",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--buckets", default="2,3", help="comma-separated bucket indices (0: 1-15 … 3: 61-120 pieces)")
    ap.add_argument("--per-bucket", type=int, default=100)
    args = ap.parse_args()
    teacher = core.load(ROOT / "checkpoints" / "bergamot-en-pt", device="cpu")
    if teacher.shortlist is None:
        raise SystemExit("checkpoints/bergamot-en-pt has no shortlist.safetensors (make models)")
    published = core.load(ROOT / "checkpoints" / "distilled-en-pt", device="cpu")
    # the same student with its teacher's shortlist (Bundle checks that it covers the same target ids)
    student = core.Bundle(
        published.model, published.tokenizer, published.info, published.path, shortlist=teacher.shortlist
    )
    buckets = inputs_by_length(
        heldout_sentences(ROOT / "data" / "ding-split"), student.tokenizer, per_bucket=args.per_bucket
    )
    references = [translate_many(teacher.model, teacher.tokenizer, list(b)) for b in buckets]
    known = known_words(references, word_list("pt", ROOT / "data" / "wordlists"))
    lines = [
        "# The student over its teacher's shortlist "
        f"(`python -m benchmarks.student_shortlist --buckets {args.buckets}`)",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; distilled-en-pt against bergamot-en-pt's greedy output.",
        "",
        *HEADER,
    ]
    for b in (int(x) for x in args.buckets.split(",")):
        inputs, reference = list(buckets[b]), references[b]
        for name, options in [
            ("whole vocabulary", core.InferenceOptions()),
            ("teacher's shortlist", core.InferenceOptions(shortlist=True)),
        ]:
            outs = [student.translate(x, options, record=core.Record(qkv=False), truncate=True) for x in inputs]
            hyps = [o.text for o in outs]
            rows = [o.trace.meta.get("shortlist_rows") for o in outs]
            f = bucket_fidelity(BUCKETS[b], hyps, reference, known, "pt")  # as eval --by-length scores a bucket
            lo, hi = f.pieces
            median_rows = f"{statistics.median(rows):,.0f}" if all(rows) else "all 32,000"
            lines.append(
                f"| {lo}–{hi} | {f.n} | {name} | {median_rows} | {f.chrf:.2f} | {f.bleu:.2f} | "
                f"{100 * f.short_share:.0f} % | {f.non_words} | {', '.join(f.examples[:5])} |"
            )
            print(lines[-1], flush=True)
    (ROOT / "benchmarks" / "student_shortlist.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
