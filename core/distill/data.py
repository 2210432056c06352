"""Knowledge-distillation data: English text the packages ship, translated by a teacher.

English comes from the Ding split (held-out dev + test sentences; training sentences and phrases) and
from Debian's fortune-cookie packages; the teacher translates it with core's batched KV-cached greedy
decoder, appending chunk by chunk so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from ..text.tokenizer import Tokenizer
from ..training.corpus import fetch_deb, leak_key, split_or_prepare, text_lines
from ..training.evaluate import translate_many
from ..transformer.model import Transformer


# ----------------------------------------------------------------------------- English text
def english_sources(split_dir: Path, seed: int = 0) -> tuple[list[str], list[str], dict[str, int]]:
    """(held-out, training, counts) English from the Ding split (fetched and split first on a fresh machine).

    Held-out = dev + test English sentences (1,500). Training = train-split English of kind sentence
    (shuffled), then phrases (shuffled), de-duplicated case-insensitively, with anything whose leak key
    (casefolded, trailing .?! ignored) equals a held-out sentence removed. Deterministic for ``seed``.
    counts = {"heldout", "dev" (the first ``dev`` held-out lines are Ding dev), "sentences", "phrases"}.
    """
    split = split_or_prepare(split_dir)
    held = []
    held_keys: set[str] = set()
    for p in split.dev + split.test:
        k = leak_key(p.en)
        if k not in held_keys:
            held_keys.add(k)
            held.append(p.en)
    n_dev = len({leak_key(p.en) for p in split.dev})
    seen = set(held_keys)
    rng = random.Random(seed)
    train: list[str] = []
    counts = {"heldout": len(held), "dev": n_dev}
    for kind in ("sentence", "phrase"):
        texts = []
        for p in split.train:
            k = leak_key(p.en)
            if p.kind == kind and k not in seen and p.en.strip():
                seen.add(k)
                texts.append(p.en)
        rng.shuffle(texts)
        train += texts
        counts[kind + "s"] = len(texts)
    return held, train, counts


def read_lines(path: Path) -> list[str]:
    """The lines ``write_lines`` wrote (none when the file is not there yet)."""
    return text_lines(path, every_line_ended=True) if path.is_file() else []


def write_lines(path: Path, lines: Sequence[str]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(s.replace("\n", " ") + "\n" for s in lines), encoding="utf-8")
    tmp.replace(path)


# ----------------------------------------------------------------------------- teacher translation
def translate_file(
    model: Transformer,
    tok: Tokenizer,
    sources: Sequence[str],
    out_path: Path,
    *,
    chunk: int = 2000,
    max_tokens: int = 3000,
    deadline: float | None = None,
    stats_path: Path | None = None,
    log: bool = True,
) -> dict:
    """Translate ``sources`` into ``out_path`` (one line each, aligned), appending chunk by chunk.

    Resumes after the lines already in ``out_path``; stops before a chunk that would start after
    ``deadline`` (time.time()). Throughput figures accumulate in ``stats_path`` (JSON).
    """
    done = len(read_lines(out_path))
    stats = (
        json.loads(stats_path.read_text())
        if stats_path and stats_path.is_file()
        else {"sentences": 0, "source_tokens": 0, "output_tokens": 0, "seconds": 0.0}
    )
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with out_path.open("a", encoding="utf-8") as fh:
        while done < len(sources):
            if deadline is not None and time.time() >= deadline:
                break
            part = list(sources[done : done + chunk])
            t0 = time.perf_counter()
            counts: dict[str, int] = {}
            texts = translate_many(model, tok, part, max_tokens=max_tokens, max_source_tokens=128, counts=counts)
            seconds = time.perf_counter() - t0
            fh.write("".join(t.replace("\n", " ") + "\n" for t in texts))
            fh.flush()
            done += len(part)
            stats["sentences"] += len(part)
            stats["source_tokens"] += counts["source_tokens"]
            stats["output_tokens"] += counts["output_tokens"]
            stats["seconds"] = round(stats["seconds"] + seconds, 2)
            stats["sentences_per_s"] = round(stats["sentences"] / stats["seconds"], 2)
            stats["output_tokens_per_s"] = round(stats["output_tokens"] / stats["seconds"], 1)
            stats["source_tokens_per_s"] = round(stats["source_tokens"] / stats["seconds"], 1)
            stats["threads"] = torch.get_num_threads()
            if stats_path:
                stats_path.write_text(json.dumps(stats, indent=1) + "\n")
            if log:
                print(
                    f"{out_path.name}: {done:,}/{len(sources):,} ({len(part) / seconds:.1f} sent/s, "
                    f"{counts['output_tokens'] / seconds:.0f} out tok/s this chunk)",
                    flush=True,
                )
    return stats


def make_data(
    teacher: Transformer,
    tok: Tokenizer,
    split_dir: Path,
    data_dir: Path,
    *,
    max_train: int,
    minutes: float,
    seed: int = 0,
    chunk: int = 2000,
    max_tokens: int = 3000,
    fortunes: bool = True,
) -> dict:
    """Stage "data": held-out teacher translations first, then the fortune-cookie sentences (``extra``),
    both always complete, then the Ding training English until ``max_train`` lines or ``minutes``
    (0 = no limit) run out. Resumable: every file is appended chunk by chunk."""
    data_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.time() + 60 * minutes if minutes else None
    if not (data_dir / "train.en").is_file():
        held, train, counts = english_sources(split_dir, seed)
        (data_dir / "sources.json").write_text(json.dumps(counts, indent=1) + "\n")
        write_lines(data_dir / "heldout.en", held)
        write_lines(data_dir / "train.en", train[:max_train] if max_train else train)
    held = read_lines(data_dir / "heldout.en")
    train = read_lines(data_dir / "train.en")
    if fortunes and not (data_dir / "extra.en").is_file():
        taken = {leak_key(t) for t in held + train}
        extra = [t for t in fortune_sentences(fetch_fortunes(data_dir / "fortunes")) if leak_key(t) not in taken]
        write_lines(data_dir / "extra.en", extra)
    translate_file(
        teacher,
        tok,
        held,
        data_dir / "heldout.teacher.pt",
        chunk=chunk,
        max_tokens=max_tokens,
        stats_path=data_dir / "heldout.stats.json",
    )
    if (data_dir / "extra.en").is_file():
        translate_file(
            teacher,
            tok,
            read_lines(data_dir / "extra.en"),
            data_dir / "extra.pt",
            chunk=chunk,
            max_tokens=max_tokens,
            stats_path=data_dir / "extra.stats.json",
        )
    stats = translate_file(
        teacher,
        tok,
        train,
        data_dir / "train.pt",
        chunk=chunk,
        max_tokens=max_tokens,
        deadline=deadline,
        stats_path=data_dir / "train.stats.json",
    )
    return stats


# ----------------------------------------------------------------------------- extra English: fortune cookies
FORTUNE_PACKAGES = ("fortunes-min", "fortunes")
FORTUNE_RELPATH = Path("usr/share/games/fortunes")
FORTUNE_SKIP = {
    "ascii-art",
    "debian",
    "perl",
    "linux",
    "linuxcookie",
    "zippy",
    "knghtbrd",
    "disclaimer",
    "translate-me",
    "computers",
    "startrek",
    "ethnic",
    "men-women",
}
_ATTRIBUTION = re.compile(r"\s+--\s*[A-Z(].*$|\s+-- .*$")
_FORTUNE_OK = re.compile(r"^[A-Z\"'][A-Za-z0-9 ,.;:'\"!?()-]*[.!?]['\"]?$")


def fetch_fortunes(cache_dir: Path) -> Path:
    """The fortune-cookie folder of the Debian packages ``fortunes-min`` and ``fortunes``
    (``corpus.fetch_deb`` into ``cache_dir``), fetched once."""
    target = cache_dir / FORTUNE_RELPATH
    for package, made in zip(FORTUNE_PACKAGES, ("fortunes", "wisdom"), strict=True):  # a file each package brings
        if not (target / made).exists():
            fetch_deb(package, cache_dir, target / made)
    return target


def fortune_sentences(folder: Path, max_words: int = 30) -> list[str]:
    """Single-paragraph English fortune cookies of 3..``max_words`` words, attribution removed, sentence-like
    (capital first, . ! or ? last, plain ASCII, no dialogue lines), in file-name order, de-duplicated."""
    out: list[str] = []
    seen: set[str] = set()
    for path in sorted(p for p in folder.iterdir() if p.is_file() and "." not in p.name and p.name not in FORTUNE_SKIP):
        for entry in path.read_text(encoding="latin-1").split("\n%\n"):
            lines = [l.strip() for l in entry.strip().splitlines()]
            if not lines or any(l.startswith("--") for l in lines[:-1]):
                continue
            if lines[-1].startswith("--"):
                lines = lines[:-1]
            text = _ATTRIBUTION.sub("", " ".join(l for l in lines if l)).strip()
            text = re.sub(r"\s+", " ", text)
            if (
                not 3 <= len(text.split()) <= max_words
                or not _FORTUNE_OK.match(text)
                or re.search(r"\b[A-Z][a-z]*:", text)
            ):
                continue
            if text.casefold() not in seen:
                seen.add(text.casefold())
                out.append(text)
    return out
