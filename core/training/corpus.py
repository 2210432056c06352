"""German–English parallel corpus from the Ding dictionary (Debian package ``trans-de-en``).

The Ding file (GPL-2.0-or-later, by Frank Richter, TU Chemnitz) has one entry per line,
``german :: english``.  Parsing rules (measured on the 2023-01-30 release, see ``parse_line``):

* ``#`` lines are comments.  Each side is split on `` | `` into aligned sub-entries (headword,
  inflections, example phrases and example sentences); if the counts differ only the first
  (headword) sub-entry of each side is kept.
* Annotations are removed before splitting: ``{...}`` grammar, ``[...]`` subject/region tags,
  ``<...>`` search keys / alternative spellings, ``~xref`` cross references (up to the next
  separator), ``/ABBR/`` abbreviations and all ``(...)`` parentheticals.  Parentheses in Ding
  are either glosses ("(on a menu)", "(zoological genus)") or optional words ("(gerade)
  beschäftigt", "(a)round"), so deleting them leaves a valid text.
* Unspaced slash alternatives keep their first option ("crisps/chips" -> "crisps",
  "sogenannte/r/s" -> "sogenannte"; numbers such as "24/7" are kept).  An alternative with a
  spaced " / " has an unknown scope ("busy / occupied with ...") and is dropped, as is one
  containing an ellipsis (templates, fragments: "Abbau…", "rather … than", "To conclude, …").
* ``; `` separates synonyms.  The sides' synonym lists are not aligned with each other, so an
  aligned sub-entry yields the cross product of the first ``max_alts`` synonyms of each side
  (``max_alts=1``: first alternative only).
* The kind comes from the English side (``classify``); a "sentence" is demoted to "phrase" if
  the German side is not sentence-like or either side has a placeholder (sb. sth. jdn. etw.).
* The typographic apostrophe ’ is mapped to ASCII ' (the file mixes both).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import unicodedata
from dataclasses import dataclass
from itertools import product
from pathlib import Path

from ..errors import FetchError, InputError, not_utf8

__all__ = [
    "Pair",
    "Split",
    "fetch_ding",
    "normalise",
    "parse_line",
    "read_ding",
    "classify",
    "make_split",
    "write_split",
    "read_split",
    "split_or_prepare",
    "prepare",
    "DING_RELPATH",
    "KINDS",
]

DING_PACKAGE = "trans-de-en"
DING_RELPATH = Path("usr/share/trans/de-en")
KINDS = ("sentence", "phrase", "word")
FORMAT_VERSION = 1
MAX_ALTS = 3
N_DEV, N_TEST, SEED = 500, 1000, 1234  # the held-out sizes and shuffle seed of the split train uses

# Bracket groups, innermost first.  A group glued to a following word ("(un)vollständig",
# "(a)round") is removed alone; otherwise together with the whitespace before it.
_GROUPS = tuple(re.compile(rx) for rx in (r"\{[^{}]*\}", r"\[[^\[\]]*\]", r"<[^<>]*>", r"\([^()]*\)"))
_GROUPS_SPACED = tuple(re.compile(r"\s*" + rx.pattern + r"(?!\w)") for rx in _GROUPS)
_XREF = re.compile(r"\s*~[^;|]*")  # "~legal aid": cross reference up to the next separator
# abbreviations: " /TANSTAAFL/", " /bu.; bsh./"
_ABBR = re.compile(r"(?<!\S)/(?!\s)[^/|]*?(?<!\s)/(?=[\s;,|]|$)")
_SLASH_SPACE = re.compile(r"(?<=\S)/ (?=\S)|(?<=\S) /(?=\S)")  # "curse/ damn", "switched /turned"
_SLASH_TOKEN = re.compile(r"\S*[^\s/]/[^\s/]\S*")
_NUMERIC_SLASH = re.compile(r"\d/\d")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?])")
_PLACEHOLDER = re.compile(r"(?<!\w)(sth|sb|jdn|jdm|etw|jds)\.")
_SENT_END = re.compile(r"[.?!]['\"”“»«]?$")
_SENT_START = re.compile(r"^['\"„“”»«¡¿]?[\w]")
# tokens ending in "." that end phrases, not sentences ("to lay in sth.", "theft etc.")
_ABBREV_END = {
    "sth.",
    "sb.",
    "sb.'s",
    "etc.",
    "e.g.",
    "i.e.",
    "etw.",
    "jdn.",
    "jdm.",
    "jds.",
    "usw.",
    "z.b.",
    "u.a.",
    "bzw.",
    "vs.",
    "co.",
    "inc.",
    "ltd.",
    "no.",
    "st.",
    "dr.",
    "mr.",
    "mrs.",
    "ca.",
    "approx.",
}


@dataclass(frozen=True)
class Pair:
    """One aligned English/German translation pair; ``kind`` is one of ``KINDS``."""

    en: str
    de: str
    kind: str  # "sentence" | "phrase" | "word"


@dataclass(frozen=True)
class Split:
    """Train/dev/test partition; dev and test contain only ``kind == "sentence"`` pairs."""

    train: list[Pair]
    dev: list[Pair]
    test: list[Pair]


def normalise(text: str) -> str:
    """Unicode NFC, collapse runs of whitespace to one space, strip.  Case is preserved;
    comparison/dedup keys additionally use ``.casefold()``."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def _key(text: str) -> str:
    return normalise(text).casefold()


def leak_key(text: str) -> str:
    """Key for train/held-out overlap: casefolded, trailing sentence punctuation ignored."""
    return _key(text).rstrip(" .?!…")


def fetch_deb(package: str, cache_dir: Path, produces: Path) -> None:
    """Download the Debian ``package`` into ``cache_dir`` (``apt-get download``, once; on a new machine with
    empty package lists, root refreshes them once and retries) and extract it there (``dpkg-deb -x``).

    Raises ``FetchError`` (a ``RuntimeError``) naming the failing step if apt-get/dpkg-deb are missing or fail,
    or if the extraction did not produce ``produces``.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise FetchError(
                f"`{tool}` not found; it is needed to fetch the Debian package {package}. "
                f"Place {produces} there manually."
            )
    debs = sorted(cache_dir.glob(f"{package}_*.deb"))
    if not debs:
        proc = subprocess.run(["apt-get", "download", package], cwd=cache_dir, capture_output=True, text=True)
        if proc.returncode != 0 and hasattr(os, "geteuid") and os.geteuid() == 0:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True)
            proc = subprocess.run(["apt-get", "download", package], cwd=cache_dir, capture_output=True, text=True)
        debs = sorted(cache_dir.glob(f"{package}_*.deb"))
        if proc.returncode != 0 or not debs:
            raise FetchError(
                f"`apt-get download {package}` failed (exit {proc.returncode}) in {cache_dir}; "
                f"try `apt-get update` first. stderr: {proc.stderr.strip()[-500:]}"
            )
    proc = subprocess.run(["dpkg-deb", "-x", debs[-1].name, "."], cwd=cache_dir, capture_output=True, text=True)
    if proc.returncode != 0 or not produces.exists():
        raise FetchError(
            f"`dpkg-deb -x {debs[-1].name}` failed (exit {proc.returncode}) or did not produce "
            f"{produces}: {proc.stderr.strip()[-500:]}"
        )


def fetch_ding(cache_dir: Path = Path("data/ding")) -> Path:
    """Return the path of the Ding ``de-en`` file, fetching the Debian package into ``cache_dir`` if it is
    absent (``fetch_deb``). Raises ``FetchError`` naming the failing step."""
    target = Path(cache_dir) / DING_RELPATH
    if not target.is_file():
        try:
            fetch_deb(DING_PACKAGE, Path(cache_dir), target)
        except FetchError as exc:
            raise FetchError(f"fetch_ding: {exc}") from None
    return target


def _strip_annotations(side: str) -> str:
    """Remove tags, cross references, abbreviations and parentheticals from one side."""
    s = side.replace("\u2019", "'")
    for spaced, bare, opener in zip(_GROUPS_SPACED, _GROUPS, "{[<(", strict=True):
        prev = None
        while opener in s and prev != s:  # loop: groups may nest
            prev = s
            s = bare.sub("", spaced.sub("", s))
    if "~" in s:
        s = _XREF.sub("", s)
    if "/" in s:
        s = _SLASH_SPACE.sub("/", _ABBR.sub("", s))
    return s


def _first_option(match: re.Match[str]) -> str:
    tok = match.group(0)
    if _NUMERIC_SLASH.search(tok) or "://" in tok:
        return tok
    head, _, rest = tok.partition("/")
    trail = re.search(r"[,.;:!?'\"”“»«]+$", rest)  # keep punctuation that ended the token
    if trail and not head.endswith(trail.group(0)):
        head += trail.group(0)
    return head


def _clean_alt(alt: str) -> str | None:
    """Resolve slashes and tidy one alternative; ``None`` if it is unusable."""
    if " / " in f" {alt} " or "(" in alt or ")" in alt or "…" in alt or "..." in alt:
        return None  # spaced slash (unknown scope), unbalanced parenthesis, template/fragment
    s = _SLASH_TOKEN.sub(_first_option, alt) if "/" in alt else alt
    s = normalise(s)
    if " " in s:
        s = _SPACE_BEFORE_PUNCT.sub(r"\1", s)
    s = s.strip(" ;,")
    return s if any(ch.isalnum() for ch in s) else None


def _alternatives(sub: str, max_alts: int) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    for alt in sub.split("; "):
        cleaned = _clean_alt(alt)
        if cleaned and _key(cleaned) not in seen:
            seen.add(_key(cleaned))
            out.append(cleaned)
    return out[:max_alts]


def _is_sentence(text: str, min_words: int) -> bool:
    words = text.split()
    return (
        len(words) >= min_words
        and bool(_SENT_START.match(text))
        and "…" not in text
        and "..." not in text
        and text[0:1].upper() == text[0:1]
        and bool(_SENT_END.search(text))
        and words[-1].casefold() not in _ABBREV_END
    )


def classify(en: str) -> str:
    """Kind of an English text: ``"sentence"`` if it starts with a capital (or digit/quote),
    ends with ``. ? !`` (optionally + closing quote), has >= 2 words and does not end in an
    abbreviation like ``sth.``/``etc.``; ``"phrase"`` if it has more than one word (not
    counting a leading infinitive "to"); else ``"word"``."""
    text = normalise(en)
    if _is_sentence(text, 2):
        return "sentence"
    words = text.split()
    if words[:1] == ["to"]:  # infinitive marker: "to decelerate" is one word
        words = words[1:]
    return "phrase" if len(words) > 1 else "word"


def parse_line(line: str, max_alts: int = MAX_ALTS) -> list[Pair]:
    """Parse one Ding line into aligned pairs (empty for comments/blank/malformed lines).

    Sub-entries separated by `` | `` are aligned positionally; within a sub-entry the cross
    product of the first ``max_alts`` ``; ``-alternatives of each side is returned (German
    alternatives in the outer loop).  The kind comes from ``classify(en)``, except that an
    English sentence is demoted to "phrase" if the German side does not look like a sentence
    or either side contains a placeholder (sth., sb., jdn., etw., ...).
    """
    line = line.strip()
    if not line or line.startswith("#") or " :: " not in line:
        return []
    de_side, en_side = line.split(" :: ", 1)
    de_subs = _strip_annotations(de_side).split(" | ")
    en_subs = _strip_annotations(en_side).split(" | ")
    if len(de_subs) != len(en_subs):
        de_subs, en_subs = de_subs[:1], en_subs[:1]
    pairs: list[Pair] = []
    for de_sub, en_sub in zip(de_subs, en_subs, strict=True):
        for de, en in product(_alternatives(de_sub, max_alts), _alternatives(en_sub, max_alts)):
            kind = classify(en)
            if kind == "sentence" and (not _is_sentence(de, 1) or _PLACEHOLDER.search(en) or _PLACEHOLDER.search(de)):
                kind = "phrase"
            pairs.append(Pair(en=en, de=de, kind=kind))
    return pairs


def read_ding(path: Path, max_alts: int = MAX_ALTS) -> list[Pair]:
    """Parse a whole Ding file; pairs de-duplicated by casefolded normalised (en, de), keeping
    the first occurrence, in file order (deterministic)."""
    seen: set[tuple[str, str]] = set()
    out: list[Pair] = []
    with Path(path).open(encoding="utf-8") as fh:
        for line in fh:
            for p in parse_line(line, max_alts):
                k = (_key(p.en), _key(p.de))
                if k not in seen:
                    seen.add(k)
                    out.append(p)
    return out


def make_split(pairs: list[Pair], n_dev: int = 500, n_test: int = 1000, seed: int = 1234) -> Split:
    """Deterministic seeded split.  Dev and test are drawn only from sentence pairs and never
    share an English or German text (casefolded, trailing . ? ! ignored) with each other or
    within themselves; every remaining pair of any kind whose English or German equals a
    held-out text under that key is dropped, the rest is train (input order preserved)."""
    sentences = [i for i, p in enumerate(pairs) if p.kind == "sentence"]
    if n_dev + n_test > len(sentences):
        raise ValueError(f"need {n_dev + n_test} sentence pairs, only {len(sentences)} available")
    random.Random(seed).shuffle(sentences)
    used_en: set[str] = set()
    used_de: set[str] = set()
    held: list[int] = []
    for i in sentences:
        if len(held) == n_dev + n_test:
            break
        ke, kd = leak_key(pairs[i].en), leak_key(pairs[i].de)
        if ke in used_en or kd in used_de:
            continue
        used_en.add(ke)
        used_de.add(kd)
        held.append(i)
    if len(held) < n_dev + n_test:
        raise ValueError(f"only {len(held)} mutually disjoint sentence pairs available")
    held_set = set(held)
    train = [
        p
        for i, p in enumerate(pairs)
        if i not in held_set and leak_key(p.en) not in used_en and leak_key(p.de) not in used_de
    ]
    return Split(train=train, dev=[pairs[i] for i in held[:n_dev]], test=[pairs[i] for i in held[n_dev:]])


def _write_lines(path: Path, lines: list[str]) -> None:  # (core.distill.data has an atomic, lenient pair)
    for s in lines:
        if "\n" in s or "\r" in s:
            raise ValueError(f"line break inside text: {s!r}")
    path.write_text("".join(s + "\n" for s in lines), encoding="utf-8")


def _read_lines(path: Path) -> list[str]:
    return text_lines(path, every_line_ended=True)


def text_lines(path: Path, every_line_ended: bool = False) -> list[str]:
    """A UTF-8 text file's lines (InputError naming the file when it is not UTF-8); ``every_line_ended``: as the
    split files are written, each line ended by "\n" (so an empty last line is still a line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(path, exc) from None
    return text.split("\n")[:-1] if every_line_ended else text.splitlines()


def write_split(split: Split, out_dir: Path, params: dict | None = None) -> None:
    """Write ``{train,dev,test}.{en,de}`` (one text per line, aligned), ``train.kind`` and
    ``split.json`` (counts, per-kind train counts and ``params`` such as the seed)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("train", "dev", "test"):
        part: list[Pair] = getattr(split, name)
        _write_lines(out_dir / f"{name}.en", [p.en for p in part])
        _write_lines(out_dir / f"{name}.de", [p.de for p in part])
    _write_lines(out_dir / "train.kind", [p.kind for p in split.train])
    meta = {
        "format_version": FORMAT_VERSION,
        "source": f"Debian package {DING_PACKAGE} ({DING_RELPATH}), GPL-2.0-or-later",
        "counts": {n: len(getattr(split, n)) for n in ("train", "dev", "test")},
        "train_kinds": {k: sum(p.kind == k for p in split.train) for k in KINDS},
        "params": params or {},
    }
    (out_dir / "split.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


SPLIT_FILES = ("train.en", "train.de", "train.kind", "dev.en", "dev.de", "test.en", "test.de")


def split_or_prepare(
    out_dir: Path,
    cache_dir: Path = Path("data/ding"),
    *,
    n_dev: int = N_DEV,
    n_test: int = N_TEST,
    seed: int = SEED,
) -> Split:
    """The split written in ``out_dir``; where none is there yet (a fresh machine), the Ding corpus fetched into
    ``cache_dir`` and split into ``out_dir`` first (``prepare``, with ``train``'s defaults unless told otherwise).
    A split that is there is only read, whatever parameters made it."""
    out_dir = Path(out_dir)
    if not all((out_dir / name).is_file() for name in SPLIT_FILES):
        return prepare(out_dir, Path(cache_dir), n_dev=n_dev, n_test=n_test, seed=seed)
    return read_split(out_dir)


def read_split(out_dir: Path) -> Split:
    """Read a split written by ``write_split`` (dev/test pairs get kind "sentence")."""
    out_dir = Path(out_dir)
    parts: dict[str, list[Pair]] = {}
    for name in ("train", "dev", "test"):
        en = _read_lines(out_dir / f"{name}.en")
        de = _read_lines(out_dir / f"{name}.de")
        kinds = _read_lines(out_dir / "train.kind") if name == "train" else ["sentence"] * len(en)
        if not len(en) == len(de) == len(kinds):
            raise InputError(
                f"{out_dir}: {name} files are not aligned ({len(en)} en, {len(de)} de, {len(kinds)} kinds)"
            )
        parts[name] = [Pair(en=e, de=d, kind=k) for e, d, k in zip(en, de, kinds, strict=True)]
    return Split(**parts)


def prepare(
    out_dir: Path = Path("data/ding-split"),
    cache_dir: Path = Path("data/ding"),
    n_dev: int = N_DEV,
    n_test: int = N_TEST,
    seed: int = SEED,
    max_alts: int = MAX_ALTS,
    force: bool = False,
) -> Split:
    """Fetch, parse, split and write the corpus; if ``out_dir/split.json`` already records the
    same parameters the written split is read back instead (``force=True`` rebuilds)."""
    out_dir = Path(out_dir)
    params = {"n_dev": n_dev, "n_test": n_test, "seed": seed, "max_alts": max_alts}
    meta_path = out_dir / "split.json"
    if not force and meta_path.is_file():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format_version") == FORMAT_VERSION and meta.get("params") == params:
            return read_split(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)  # a folder that cannot be made is named now, not after the parse
    pairs = read_ding(fetch_ding(cache_dir), max_alts=max_alts)
    split = make_split(pairs, n_dev=n_dev, n_test=n_test, seed=seed)
    write_split(split, out_dir, params=params)
    return split
