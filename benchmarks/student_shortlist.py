"""A lever for the long-sentence student measured and not taken (#16): decoding it with its teacher's shortlist.

    python benchmarks/student_shortlist.py [--buckets 3] [--per-bucket 100]

The distilled student shares its teacher's vocabulary (``build_student`` copies the embeddings and the output
layer), so the teacher's lexical shortlist (``checkpoints/bergamot-en-pt/shortlist.safetensors``: the 50 most
frequent pieces, the 50 likeliest translations of each source piece, the source pieces) can restrict the
student's output too. Would that stop it inventing words? For the held-out inputs of each asked bucket (the same
as ``python -m core eval --by-length``: Ding test sentences, joined for the long buckets), the student's greedy
output over the whole vocabulary and over the shortlist, each scored against the teacher's greedy output as
``core.distill.fidelity`` scores them: chrF, BLEU, outputs under 85 % of the teacher's length, non-words.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import core  # noqa: E402
from core.distill.fidelity import BUCKETS, SHORT, heldout_sentences, inputs_by_length, word_list, words  # noqa: E402
from core.training.evaluate import score, translate_many  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--buckets", default="3", help="comma-separated bucket indices (0: 1-15 … 3: 61-120 pieces)")
    ap.add_argument("--per-bucket", type=int, default=100)
    args = ap.parse_args()
    student = core.load(ROOT / "checkpoints" / "distilled-en-pt", device="cpu")
    teacher = core.load(ROOT / "checkpoints" / "bergamot-en-pt", device="cpu")
    if teacher.shortlist is None:
        raise SystemExit("checkpoints/bergamot-en-pt has no shortlist.safetensors (make models)")
    student.shortlist = teacher.shortlist  # the same 32,000 target ids
    buckets = inputs_by_length(
        heldout_sentences(ROOT / "data" / "ding-split"), student.tokenizer, per_bucket=args.per_bucket
    )
    known_words = word_list("pt")
    print("| source pieces | inputs | decoding | chrF vs teacher | BLEU | cut short | non-words | e.g. |")
    print("|---|---|---|---|---|---|---|---|")
    for b in (int(x) for x in args.buckets.split(",")):
        inputs = list(buckets[b])
        reference = translate_many(teacher.model, teacher.tokenizer, inputs)
        known = {w for text in reference for w in words(text)} | known_words
        for name, options in [
            ("whole vocabulary", core.InferenceOptions()),
            ("teacher's shortlist", core.InferenceOptions(shortlist=True)),
        ]:
            hyps = [student.translate(x, options, record_qkv=False, truncate=True).text for x in inputs]
            s = score(hyps, reference)
            short = sum(len(h) < SHORT * len(r) for h, r in zip(hyps, reference, strict=True)) / len(hyps)
            odd = [
                w
                for h, r in zip(hyps, reference, strict=True)
                for w in words(h)
                if w not in known and w not in set(words(r))
            ]
            lo, hi = BUCKETS[b]
            print(
                f"| {lo}–{hi} | {len(inputs)} | {name} | {s['chrf']:.2f} | {s['bleu']:.2f} | {100 * short:.0f} % | "
                f"{len(odd)} | {', '.join(sorted(set(odd))[:5])} |"
            )


if __name__ == "__main__":
    main()
