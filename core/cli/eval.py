"""Score a checkpoint on the held-out Ding test split: sacreBLEU BLEU and chrF, greedy and beam 4."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from ..distill.fidelity import (
    HEADER,
    corpus_words,
    fidelity,
    heldout_sentences,
    inputs_by_length,
    source_sentences,
    word_list,
)
from ..distill.invented import dictionary, invented_section, measure
from ..errors import InputError
from ..inputs import MAX_BEAM
from ..storage.checkpoint import load_checkpoint
from ..text.tokenizer import Tokenizer
from ..training.corpus import split_or_prepare, text_lines
from ..training.evaluate import evaluate_split
from ..transformer.model import Transformer


def beam_sizes(text: str) -> list[int]:
    """``--beams``: comma-separated beam sizes, each 1 … ``MAX_BEAM`` (a beam of thousands fills the memory)."""
    sizes = []
    for part in text.split(","):
        try:
            size = int(part.strip())
        except ValueError:
            raise InputError(f"--beams: {part.strip()!r} is not a whole number (e.g. --beams 1,4)") from None
        if not 1 <= size <= MAX_BEAM:
            raise InputError(f"--beams: each beam size must be between 1 and {MAX_BEAM}, got {size}")
        sizes.append(size)
    return sizes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="checkpoint folder")
    parser.add_argument("--split", default="data/ding-split", help="folder with test.en/test.de (made by `train`)")
    parser.add_argument("--set", default="test", choices=["test", "dev"], help="which held-out set")
    parser.add_argument("--beams", default="1,4", help="comma-separated beam sizes (1 = greedy)")
    parser.add_argument("--limit", type=int, default=0, help="score only the first N sentences (0 = all)")
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")
    parser.add_argument(
        "--by-length",
        action="store_true",
        help="fidelity to --teacher by source length (1–15, 16–30, 31–60, 61–120 pieces) on held-out inputs",
    )
    parser.add_argument(
        "--invented-words",
        action="store_true",
        help="words of --teacher's and the student's output in no word list of the target language, per 100 "
        "output words, on the --by-length inputs (core.distill.invented)",
    )
    parser.add_argument("--teacher", default=None, help="--by-length: the teacher checkpoint folder")
    parser.add_argument("--per-bucket", type=int, default=100, help="--by-length: inputs per length bucket")
    parser.add_argument(
        "--held-out",
        choices=["test", "all"],
        default=None,
        help="--by-length: which held-out Ding English to make the inputs from: test (default; a distillation "
        "run chooses its best step on dev, so dev is not held out from it) or all (dev + test, as before)",
    )
    parser.add_argument(
        "--sources",
        default=None,
        metavar="FILE",
        help="--by-length: held-out source sentences, one per line (UTF-8), instead of the Ding English, e.g. "
        "data/distill-long/pt-en/test.src for a pt->en student; not with --held-out",
    )
    parser.add_argument(
        "--teacher-corpus",
        default=None,
        metavar="FILE",
        help="--by-length: the teacher's translations of the distillation corpus (e.g. "
        "data/distill-long/en-pt/train.tgt): their words count as known words, as the card's publish stage counts them",
    )


def run(args: argparse.Namespace) -> int:
    """Scores a checkpoint on the held-out split (downloads and splits the corpus if needed)."""
    split_dir = Path(args.split)
    if args.by_length:
        return _by_length(args, split_dir)
    if args.invented_words:
        return _invented_words(args, split_dir)
    beams = beam_sizes(args.beams)
    if args.limit < 0:
        raise InputError(f"--limit must be 0 (all) or more, got {args.limit}")
    if not (split_dir / f"{args.set}.en").is_file():  # a folder with only the scored set is enough
        split_or_prepare(split_dir)
    sources, refs = (text_lines(split_dir / f"{args.set}.{side}") for side in ("en", "de"))
    if args.limit:
        sources, refs = sources[: args.limit], refs[: args.limit]
    model, tokenizer, _ = load_checkpoint(args.checkpoint)
    results = evaluate_split(model, tokenizer, sources, refs, beams)
    if args.json:
        print(json.dumps(results))
    else:
        for name, r in results.items():
            print(
                f"{args.set} {name:7s} BLEU {r['bleu']:6.2f}  chrF {r['chrf']:6.2f}  "
                f"({r['n']} sentences, {r['seconds']} s)"
            )
    return 0


def _student_and_teacher(
    args: argparse.Namespace,
) -> tuple[Transformer, Tokenizer, dict[str, Any], Transformer, Tokenizer]:
    """The student and its teacher (model, tokenizer; the student's info), refused when they translate other pairs."""
    student, tokenizer, info = load_checkpoint(args.checkpoint)
    teacher, teacher_tokenizer, teacher_info = load_checkpoint(args.teacher)
    pairs = [f"{i.get('source_language')}->{i.get('target_language')}" for i in (info, teacher_info)]
    if pairs[0] != pairs[1]:
        raise InputError(
            f"--teacher {args.teacher} translates {pairs[1]} but the student {args.checkpoint} translates "
            f"{pairs[0]}; pass the teacher it was distilled from"
        )
    return student, tokenizer, info, teacher, teacher_tokenizer


def _by_length(args: argparse.Namespace, split_dir: Path) -> int:
    """The student's fidelity to its teacher per source-length bucket (``core.distill.fidelity``), on the
    held-out Ding test English (``--held-out all``: dev + test) or on the sentences of ``--sources``."""
    if not args.teacher:
        raise InputError("--by-length needs --teacher CHECKPOINT (the model the student was distilled from)")
    if args.per_bucket < 1:
        raise InputError(f"--per-bucket must be at least 1, got {args.per_bucket}")
    if args.sources and args.held_out:
        raise InputError("--held-out chooses among the Ding English; it cannot be combined with --sources")
    corpus = Path(args.teacher_corpus) if args.teacher_corpus else None
    if corpus is not None and not corpus.is_file():
        raise InputError(f"--teacher-corpus {corpus}: no such file (the teacher stage writes train.tgt)")
    if args.sources:
        sentences = source_sentences(Path(args.sources))
        origin = f"{len(sentences)} sentences of {args.sources}"
    else:
        which = args.held_out or "test"
        sentences = heldout_sentences(split_dir, which)
        origin = "held-out Ding English, " + ("test only" if which == "test" else "dev + test")
    student, tokenizer, info, teacher, teacher_tokenizer = _student_and_teacher(args)
    buckets = inputs_by_length(sentences, tokenizer, per_bucket=args.per_bucket)
    start = time.perf_counter()
    language = str(info.get("target_language", ""))
    words = word_list(language) | (corpus_words(corpus) if corpus else set())
    rows = fidelity(
        student, teacher, tokenizer, buckets, teacher_tokenizer=teacher_tokenizer, word_list=words, language=language
    )
    if args.json:
        print(json.dumps([vars(r) for r in rows]))
    else:
        print(HEADER)
        for r in rows:
            print(r.row())
        print(f"({time.perf_counter() - start:.0f} s; greedy, {origin}, joined where longer)")
    return 0


def _invented_words(args: argparse.Namespace, split_dir: Path) -> int:
    """``python -m core eval --invented-words``: the student's and the teacher's invented words on the held-out
    inputs ``--by-length`` scores (the Ding test English, or ``--sources``), printed as the card's section (or
    JSON with ``--json``)."""
    if not args.teacher:
        raise InputError("--invented-words needs --teacher CHECKPOINT (the model the student was distilled from)")
    if args.per_bucket < 1:
        raise InputError(f"--per-bucket must be at least 1, got {args.per_bucket}")
    if args.sources and args.held_out:
        raise InputError("--held-out chooses among the Ding English; it cannot be combined with --sources")
    student, tokenizer, info, teacher, teacher_tokenizer = _student_and_teacher(args)
    language = str(info.get("target_language", ""))
    known = dictionary(language)  # before the slow part: a missing list is said at once
    if args.sources:
        sentences, inputs = source_sentences(Path(args.sources)), f"the held-out sentences of `{args.sources}`"
    else:
        which = args.held_out or "test"
        sentences = heldout_sentences(split_dir, which)
        inputs = "the held-out Ding English " + ("test sentences" if which == "test" else "dev + test sentences")
    buckets = inputs_by_length(sentences, tokenizer, per_bucket=args.per_bucket)
    table = measure(teacher, student, tokenizer, buckets, known, language, teacher_tokenizer=teacher_tokenizer)
    if args.json:
        print(json.dumps({k: [vars(p) for p in getattr(table, k)] for k in ("teacher", "student")}))
        return 0
    command = f"python -m core eval --invented-words --teacher {args.teacher} --checkpoint {args.checkpoint}"
    if args.sources or args.held_out:
        command += f" --sources {args.sources}" if args.sources else f" --held-out {args.held_out}"
    command += f" --per-bucket {args.per_bucket}" if args.per_bucket != 100 else ""
    n = "/".join(map(str, sorted({len(b) for b in buckets})))
    print(
        invented_section(
            table,
            teacher_name=Path(args.teacher).name,
            inputs=f"{n} inputs per length bucket made from {inputs} (joined where longer)",
            command=command,
        )
    )
    return 0
