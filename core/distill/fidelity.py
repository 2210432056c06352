"""How faithfully a student reproduces its teacher, by source length: ``python -m core eval --by-length``.

Held-out inputs per bucket of source pieces (1–15, 16–30, 31–60, 61–120) are made from held-out source
sentences: by default the Ding test English (never used for distillation, nor for choosing a run's best step,
which is done on Ding dev), or any file of sentences (``--sources``, e.g. the Portuguese test sources of a
pt->en student); single sentences for the short buckets and runs of consecutive ones, joined, for the long ones
(as a pasted paragraph would be). Per bucket: chrF and BLEU of the student's greedy output with the teacher's as
the reference, the share of outputs shorter than 85 % of the teacher's (in characters: dropped endings), and
non-words — words of the student's output found neither in the teacher's translations of the held-out inputs
nor in Debian's word lists of the target language (``WORDLISTS``: wbrazilian and wportuguese for Portuguese,
wamerican and wbritish for English; none for other languages), nor in the teacher's translations of the whole
distillation corpus where they are at hand (``corpus_words``). Those lists hold no verb joined to its object
pronouns ("diga-me", "agitá-lo", "dá-se-lhe": Portuguese enclisis) but do hold the verb as written there ("diga",
"agitá", "dá"; spell checkers judge such words part by part), so such a word counts as known when its verb is
known and every part after it is an object pronoun (``CLITICS``).
"""

from __future__ import annotations

import random
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..text.tokenizer import Tokenizer
from ..training.corpus import fetch_deb
from ..training.evaluate import score, translate_many
from ..transformer.model import Transformer
from .data import english_sources

BUCKETS: tuple[tuple[int, int], ...] = ((1, 15), (16, 30), (31, 60), (61, 120))
SHORT = 0.85  # an output under this share of the teacher's length counts as cut short
WORD = re.compile(r"[^\W\d_]+(?:[-'’][^\W\d_]+)*")


def bucket_of(n: int) -> int | None:
    """Index of the bucket holding ``n`` source pieces (None: outside every bucket)."""
    return next((i for i, (lo, hi) in enumerate(BUCKETS) if lo <= n <= hi), None)


def inputs_by_length(
    sentences: Sequence[str], tokenizer: Tokenizer, *, per_bucket: int = 100, seed: int = 0
) -> list[list[str]]:
    """``per_bucket`` inputs for each bucket (fewer when the sentences run out), deterministic for ``seed``:
    single sentences where they fit, else runs of consecutive sentences joined with a space."""
    rng = random.Random(seed)
    lengths = [len(ids) for ids in tokenizer.encode_batch(list(sentences))]
    out: list[list[str]] = [[] for _ in BUCKETS]
    starts = list(range(len(sentences)))
    rng.shuffle(starts)
    for start in starts:  # one input per start: the run ending in the emptiest bucket that still has room
        options: dict[int, int] = {}  # bucket -> end of the first run from ``start`` that lands in it
        total = 0
        for end in range(start, len(sentences)):
            total += lengths[end] + (1 if end > start else 0)
            if total > BUCKETS[-1][1]:
                break
            b = bucket_of(total)
            if b is not None and len(out[b]) < per_bucket:
                options.setdefault(b, end + 1)
        if options:
            b = min(options, key=lambda k: (len(out[k]), k))
            out[b].append(" ".join(sentences[start : options[b]]))
        if all(len(o) >= per_bucket for o in out):
            break
    return out


HELD_OUT = ("test", "all")  # which held-out Ding English: test only, or dev + test


def heldout_sentences(split_dir: Path, which: str = "test") -> list[str]:
    """The held-out Ding English of ``split_dir`` (``english_sources``): the test sentences (``which="test"``;
    dev is where a distillation run chooses its best step) or dev + test (``"all"``)."""
    if which not in HELD_OUT:
        raise InputError(f"held-out set must be one of {', '.join(HELD_OUT)}, got {which!r}")
    held, _, counts = english_sources(split_dir)
    return held[counts["dev"] :] if which == "test" else held


def source_sentences(path: Path) -> list[str]:
    """The non-blank lines of ``path`` (UTF-8, one sentence a line), stripped; ``InputError`` naming the file
    when it is missing, unreadable or holds no sentence."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"--sources {path}: no such file (one held-out source sentence per line)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"--sources {path}: cannot be read as UTF-8 text ({exc})") from None
    sentences = [line.strip() for line in text.splitlines() if line.strip()]
    if not sentences:
        raise InputError(f"--sources {path}: the file holds no sentence (one held-out source sentence per line)")
    return sentences


# target language -> Debian package -> its word list inside the package (all GPL)
WORDLISTS: dict[str, dict[str, str]] = {
    "pt": {"wbrazilian": "usr/share/dict/brazilian", "wportuguese": "usr/share/dict/portuguese"},
    "en": {"wamerican": "usr/share/dict/american-english", "wbritish": "usr/share/dict/british-english"},
}


def word_list(language: str, cache_dir: Path = Path("data/wordlists")) -> set[str]:
    """Every word of Debian's word lists for ``language`` (``WORDLISTS``; fetched once with apt-get into
    ``cache_dir``), lower-cased; an empty set for a language without lists, and the lists that cannot be
    fetched are left out with a note on stderr."""
    found: set[str] = set()
    for package, member in WORDLISTS.get(language, {}).items():
        path = cache_dir / member
        try:
            if not path.is_file():
                fetch_deb(package, cache_dir, path)
            found |= {line.strip().lower() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}
        except (RuntimeError, OSError, UnicodeDecodeError) as exc:
            print(f"note: word list {package} not available ({exc}); non-words are judged without it", file=sys.stderr)
    return found


# object pronouns written after the verb with a hyphen, per target language (none: no such rule)
CLITICS: dict[str, frozenset[str]] = {
    "pt": frozenset("me te se lhe lhes nos vos o a os as lo la los las no na nas".split()),
}


def is_known(word: str, known: set[str] | frozenset[str], language: str = "") -> bool:
    """``word`` is in ``known``, or is a known verb with object pronouns of ``language`` after it (``CLITICS``)."""
    if word in known:
        return True
    clitics = CLITICS.get(language)
    if not clitics or "-" not in word:
        return False
    verb, *pronouns = word.split("-")
    if not verb or not all(p in clitics for p in pronouns):
        return False
    return verb in known


def corpus_words(path: Path) -> set[str]:
    """Every word of a text file (one sentence per line: e.g. the teacher's translations of a distillation
    corpus, ``train.tgt``), lower-cased."""
    found: set[str] = set()
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            found.update(words(line))
    return found


def words(text: str) -> list[str]:
    return [w.lower() for w in WORD.findall(text)]


@dataclass(frozen=True)
class BucketFidelity:
    pieces: tuple[int, int]
    n: int
    chrf: float
    bleu: float
    short_share: float  # outputs under SHORT of the teacher's length
    non_words: int  # student words in neither the teacher's output nor the teacher's word list
    examples: tuple[str, ...]  # a few non-words, to look at

    def row(self) -> str:
        lo, hi = self.pieces
        return (
            f"| {lo}–{hi} | {self.n} | {self.chrf:.2f} | {self.bleu:.2f} | {100 * self.short_share:.1f} % | "
            f"{self.non_words} ({100 * self.non_words / max(self.n, 1):.1f} per 100) | {', '.join(self.examples)} |"
        )


HEADER = (
    "| source pieces | inputs | chrF vs teacher | BLEU vs teacher | outputs < 85 % of the teacher's length | "
    "non-words | e.g. |\n|---|---|---|---|---|---|---|"
)


def fidelity(
    student: Transformer,
    teacher: Transformer,
    tokenizer: Tokenizer,
    buckets: Sequence[Sequence[str]],
    *,
    teacher_tokenizer: Tokenizer | None = None,
    word_list: set[str] = frozenset(),  # type: ignore[assignment]
    language: str = "",
) -> list[BucketFidelity]:
    """Score the student's greedy output against the teacher's, bucket by bucket (see the module doc); a word
    in ``word_list`` (e.g. ``word_list("pt")``), or one of them with ``language``'s object pronouns after it,
    is never a non-word."""
    teacher_outputs = [translate_many(teacher, teacher_tokenizer or tokenizer, list(b)) for b in buckets]
    known = known_words(teacher_outputs, word_list)
    result = []
    for pieces, inputs, reference in zip(BUCKETS, buckets, teacher_outputs, strict=True):
        hyps = translate_many(student, tokenizer, list(inputs)) if inputs else []
        result.append(bucket_fidelity(pieces, hyps, reference, known, language))
    return result


def known_words(teacher_outputs: Sequence[Sequence[str]], word_list: set[str]) -> set[str]:
    """Words that are never non-words: every word of the teacher's outputs (of every bucket) and the word list."""
    return {w for outs in teacher_outputs for text in outs for w in words(text)} | set(word_list)


def bucket_fidelity(
    pieces: tuple[int, int], hyps: Sequence[str], reference: Sequence[str], known: set[str], language: str = ""
) -> BucketFidelity:
    """One bucket's figures: the student's outputs ``hyps`` against the teacher's ``reference`` (same inputs),
    non-words counted against ``known`` (``known_words``; ``is_known`` with ``language``'s pronouns)."""
    if not hyps:
        return BucketFidelity(pieces, 0, float("nan"), float("nan"), float("nan"), 0, ())
    s = score(list(hyps), list(reference))
    short = sum(len(h) < SHORT * len(r) for h, r in zip(hyps, reference, strict=True)) / len(hyps)
    odd = [w for h in hyps for w in words(h) if not is_known(w, known, language)]  # ``known``: every reference word
    return BucketFidelity(pieces, len(hyps), s["chrf"], s["bleu"], short, len(odd), tuple(sorted(set(odd)))[:6])
