"""The data side of ``python -m core distill-long``: the training inputs (joined long runs), the inputs of a
second run taken from a first run's teacher outputs, the teacher's translations, and the usable pairs."""

from __future__ import annotations

import json
import random
from pathlib import Path

from ..text.tokenizer import Tokenizer
from ..training.corpus import leak_key
from ..transformer.model import Transformer
from .data import english_sources, fetch_fortunes, fortune_sentences, read_lines, translate_file, write_lines
from .fidelity import BUCKETS, inputs_by_length
from .student import usable_pair

FILES = ("train", "dev", "test")


# ----------------------------------------------------------------------------- inputs
def joined_runs(
    sentences: list[str], lengths: list[int], n: int, *, seed: int = 0, buckets: tuple[tuple[int, int], ...] = BUCKETS
) -> list[str]:
    """``n`` inputs made of consecutive ``sentences`` joined with a space, their piece counts (``lengths``
    per sentence, +1 per join) spread evenly over the buckets above the first; deterministic for ``seed``."""
    rng = random.Random(seed)
    targets = buckets[1:]
    out: list[str] = []
    tries = 0
    while len(out) < n and tries < 50 * n:
        tries += 1
        lo, hi = targets[len(out) % len(targets)]
        goal = rng.randint(lo, hi)
        start = rng.randrange(len(sentences))
        total, end = 0, start
        while end < len(sentences) and total < goal:
            total += lengths[end] + (1 if end > start else 0)
            end += 1
        if lo <= total <= hi and end - start > 1:
            out.append(" ".join(sentences[start:end]))
    return out


def make_inputs(
    split_dir: Path, data_dir: Path, tokenizer: Tokenizer, *, phrases: int, joined: int, dev_per_bucket: int, seed: int
) -> dict:
    """Stage "inputs" for a first (English-source) run; returns the counts written to sources.json."""
    held, train, counts = english_sources(split_dir, seed)
    n_dev = counts["dev"]
    sentences, phrase_list = train[: counts["sentences"]], train[counts["sentences"] :]
    taken = {leak_key(t) for t in held + train}
    fortunes = [t for t in fortune_sentences(fetch_fortunes(data_dir / "fortunes")) if leak_key(t) not in taken]
    prose = sentences + fortunes
    rng = random.Random(seed)
    rng.shuffle(prose)  # "consecutive" = neighbours in one shuffled order of sentences and cookies
    lengths = [len(ids) for ids in tokenizer.encode_batch(prose)]
    runs = joined_runs(prose, lengths, joined, seed=seed)
    source = prose + phrase_list[:phrases] + runs
    dev = [
        x for bucket in inputs_by_length(held[:n_dev], tokenizer, per_bucket=dev_per_bucket, seed=seed) for x in bucket
    ]
    write_lines(data_dir / "train.src", source)
    write_lines(data_dir / "dev.src", dev)
    write_lines(data_dir / "test.src", held[n_dev:])
    return {
        "ding_sentences": len(sentences),
        "fortunes": len(fortunes),
        "ding_phrases": min(phrases, len(phrase_list)),
        "joined_runs": len(runs),
        "dev_inputs": len(dev),
        "test_sentences": len(held) - n_dev,
        "seed": seed,
    }


def copy_inputs(sources_from: Path, data_dir: Path) -> dict:
    """Stage "inputs" for a second run: another run's teacher outputs become this run's sources. Refuses
    outputs that are not complete; drops training sources equal to a dev or test source (two different
    sentences can share a translation)."""
    texts = {name: read_lines(sources_from / f"{name}.tgt") for name in FILES}
    for name, lines in texts.items():
        expected = len(read_lines(sources_from / f"{name}.src"))
        if not lines or len(lines) != expected:
            raise FileNotFoundError(
                f"{sources_from / (name + '.tgt')}: {len(lines)} of {expected} lines "
                "(run that run's teacher stage to the end first)"
            )
    held = {leak_key(t) for name in ("dev", "test") for t in texts[name]}
    kept = [t for t in texts["train"] if leak_key(t) not in held]
    dropped = len(texts["train"]) - len(kept)
    texts["train"] = kept
    data_dir.mkdir(parents=True, exist_ok=True)
    counts: dict[str, object] = {}
    for name, lines in texts.items():
        write_lines(data_dir / f"{name}.src", lines)
        counts[f"{name}_inputs"] = len(lines)
    origin = sources_from / "sources.json"
    if origin.is_file():
        counts["origin"] = json.loads(origin.read_text())
    counts["sources_from"] = str(sources_from)
    counts["train_dropped_as_held_out"] = dropped
    return counts


# ----------------------------------------------------------------------------- the teacher's translations, the pairs
def teacher_stage(teacher: Transformer, tok: Tokenizer, data_dir: Path, max_tokens: int) -> dict:
    stats = {}
    for name in ("dev", "test", "train"):
        stats[name] = translate_file(
            teacher,
            tok,
            read_lines(data_dir / f"{name}.src"),
            data_dir / f"{name}.tgt",
            chunk=20000 if max_tokens > 5000 else 2000,
            max_tokens=max_tokens,
            stats_path=data_dir / f"{name}.stats.json",
        )
    return stats


def load_pairs(tok: Tokenizer, data_dir: Path, name: str, max_pieces: int, max_ratio: float) -> tuple[list, list]:
    src_text, tgt_text = read_lines(data_dir / f"{name}.src"), read_lines(data_dir / f"{name}.tgt")
    if len(tgt_text) != len(src_text) or not src_text:
        raise ValueError(
            f"{data_dir}: {name}.tgt has {len(tgt_text)} lines for {len(src_text)} sources (teacher stage)"
        )
    src, tgt = tok.encode_batch(src_text), tok.encode_batch(tgt_text)
    keep = [i for i in range(len(src)) if usable_pair(src[i], tgt[i], max_pieces, max_ratio)]
    return [src[i] for i in keep], [tgt[i] for i in keep]
