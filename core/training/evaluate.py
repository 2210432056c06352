"""Score a checkpoint on the held-out Ding test split: sacreBLEU BLEU and chrF, greedy and beam 4."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

import sacrebleu
import torch

from ..config import InferenceOptions
from ..decoding import beam_search, default_max_len, greedy
from ..fast import FastWeights
from ..model import DEFAULT_OPTIONS, Transformer
from ..tokenizer import Tokenizer


def score(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Corpus BLEU and chrF (sacreBLEU defaults) of hypotheses against one reference each."""
    if not hypotheses or len(hypotheses) != len(references):
        from ..errors import InputError

        raise InputError(f"nothing to score: {len(hypotheses)} outputs for {len(references)} references")
    bleu = sacrebleu.corpus_bleu(list(hypotheses), [list(references)])
    chrf = sacrebleu.corpus_chrf(list(hypotheses), [list(references)])
    return {"bleu": round(bleu.score, 2), "chrf": round(chrf.score, 2)}


@torch.inference_mode()
def translate_many(
    model: Transformer,
    tokenizer: Tokenizer,
    sentences: Sequence[str],
    *,
    beam_size: int = 1,
    max_tokens: int = 3000,
    max_source_tokens: int = 255,
    options: InferenceOptions = DEFAULT_OPTIONS,
    counts: dict[str, int] | None = None,
) -> list[str]:
    """Translate many sentences (texts in input order): greedy with core's KV-cached decoder in batches sorted by
    length, each holding at most ``max_tokens`` padded source tokens, or beam search one sentence at a time.

    Sources are cut to ``max_source_tokens`` pieces (plus eos). ``counts``, when given, receives
    {"source_tokens", "output_tokens"} (output counted up to and including eos), e.g. for throughput.
    """
    cfg = model.config
    device = next(model.parameters()).device
    fast = FastWeights(model)  # packed copies of the weights as they are now, for this call's decoding
    encoded = [ids[:max_source_tokens] + [cfg.eos_id] for ids in tokenizer.encode_batch(list(sentences))]
    outputs: list[str] = [""] * len(sentences)
    n_out = 0

    def finish(i: int, ids: list[int]) -> None:
        nonlocal n_out
        n_out += len(ids)
        outputs[i] = tokenizer.decode([t for t in ids if t != cfg.eos_id])

    if beam_size > 1:
        for i, ids in enumerate(encoded):
            src = torch.tensor([ids], device=device)
            finish(
                i,
                beam_search(
                    model,
                    src,
                    torch.ones_like(src, dtype=torch.bool),
                    options=options,
                    max_len=default_max_len(len(ids)),
                    beam_size=beam_size,
                    fast=fast,
                ),
            )
    else:
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and len(encoded[order[end]]) * (end - start + 1) <= max_tokens:
                end += 1
            idx = order[start:end]
            width = max(len(encoded[i]) for i in idx)
            src = torch.tensor([encoded[i] + [cfg.pad_id] * (width - len(encoded[i])) for i in idx], device=device)
            keep = torch.tensor(
                [[True] * len(encoded[i]) + [False] * (width - len(encoded[i])) for i in idx], device=device
            )
            result = greedy(
                model, src, keep, options=options, max_len=default_max_len(width), top_k=1, fast=fast
            )  # tokens (B, 1 + n)
            for row, i in enumerate(idx):
                finish(i, result.tokens[row, 1 : 1 + result.lengths[row]].tolist())
            start = end
    if counts is not None:
        counts.update(source_tokens=sum(map(len, encoded)), output_tokens=n_out)
    return outputs


def evaluate_split(
    model: Transformer,
    tokenizer: Tokenizer,
    sources: Sequence[str],
    references: Sequence[str],
    beams: Sequence[int] = (1, 4),
) -> dict[str, dict[str, float]]:
    """{"greedy": {...}, "beam4": {...}} with bleu, chrf, seconds and the number of sentences."""
    results = {}
    for beam in beams:
        start = time.perf_counter()
        hyps = translate_many(model, tokenizer, sources, beam_size=beam)
        name = "greedy" if beam == 1 else f"beam{beam}"
        results[name] = {**score(hyps, references), "seconds": round(time.perf_counter() - start, 1), "n": len(hyps)}
    return results


def beam_sizes(text: str) -> list[int]:
    """``--beams``: comma-separated beam sizes, each 1 … ``MAX_BEAM`` (a beam of thousands fills the memory)."""
    from ..bundle import MAX_BEAM
    from ..errors import InputError

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
    from ..checkpoint import load_checkpoint
    from .corpus import split_or_prepare, text_lines

    split_dir = Path(args.split)
    if args.by_length:
        return _by_length(args, split_dir)
    if args.invented_words:
        from ..distill.invented import invented_command

        return invented_command(args, split_dir)
    beams = beam_sizes(args.beams)
    if args.limit < 0:
        from ..errors import InputError

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


def _by_length(args: argparse.Namespace, split_dir: Path) -> int:
    """The student's fidelity to its teacher per source-length bucket (``core.distill.fidelity``), on the
    held-out Ding test English (``--held-out all``: dev + test) or on the sentences of ``--sources``."""
    from ..checkpoint import load_checkpoint
    from ..distill.fidelity import (
        HEADER,
        corpus_words,
        fidelity,
        heldout_sentences,
        inputs_by_length,
        source_sentences,
        word_list,
    )
    from ..errors import InputError

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
    student, tokenizer, info = load_checkpoint(args.checkpoint)
    teacher, teacher_tokenizer, teacher_info = load_checkpoint(args.teacher)
    pairs = [f"{i.get('source_language')}->{i.get('target_language')}" for i in (info, teacher_info)]
    if pairs[0] != pairs[1]:
        raise InputError(
            f"--teacher {args.teacher} translates {pairs[1]} but the student {args.checkpoint} translates "
            f"{pairs[0]}; pass the teacher it was distilled from"
        )
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
