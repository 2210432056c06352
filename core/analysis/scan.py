"""A corpus scan: every ``source<TAB>translation`` line of a file scored by its source share, one JSON line each.

The source share of an output token is how much of it came from the source sentence rather than the target prefix
(``core.analysis.contributions``); a translation whose mean source share is below the threshold is *flagged* as
possibly detached from its source (a hallucination, Dale et al. 2023). Without a translation on a line the model's
own greedy translation is scored.

The output is written one line per input line, in input order, flushed after each line: an interrupted scan keeps
every line it wrote, and the same call goes on from there (``resume_point`` checks that the lines already there are
this input's and this model's, and drops a last line cut in half). A line that cannot be scored (not UTF-8, no
source text, too long) gets an ``error`` naming the problem and its line number; the scan goes on. The fields
beside the source share (chrF against a third-column reference, invented words, ...) are ``scan_fields``'.

Pairs are scored ``batch_size`` at a time (``batches``: consecutive pairs within a padded-token budget;
``score_batch``: one greedy batch for the pairs without a translation, then one recorded padded pass and one
decomposition of the decoder per group of pairs of like lengths), giving ``score_pair``'s record for each within
1e-4 (equal text and flags). Where the pairs are scored is a ``Runner``: ``local_records`` here,
``core.analysis.scan_ray.ray_records`` on a Ray cluster; both score each batch with ``score_batch``, so their lines
are the same.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from tqdm import tqdm

from ..bundle import Bundle, load
from ..config import InferenceOptions, Record
from ..decoding.search import max_steps, output_text
from ..errors import InputError, LabError
from ..inputs import clean_text
from ..storage.durable import fsync_path
from .contributions import SourceShares, batch_source_shares, contributions
from .scan_fields import EMPTY, field_context, pair_fields
from .scan_input import Pair, read_pairs  # the scan's input, read here

# The flag threshold on a translation's mean source share, chosen by a stated rule on held-out data: the largest
# value (rounded down to 3 decimals) that flags at most 1 % of the correct pairs of each distilled checkpoint in the
# detached-hallucination set of `python -m benchmarks.hallucination --n 200` (distilled-en-pt 0.8535,
# distilled-pt-en 0.7980; results in benchmarks/hallucination.md, docs/scan.md).
DEFAULT_THRESHOLD = 0.797
# Pairs scored together, and their padded size (pairs x (longest source + longest target), in pieces): the budget
# bounds the recorded arrays, which grow with the square of the lengths. 32: 0.24-0.26x a traced translation a pair
# on one thread here, 16: about 0.3x (docs/scan.md, Speed).
DEFAULT_BATCH_SIZE = 32
DEFAULT_BATCH_TOKENS = 4096
DIGITS = 6  # decimals of every number written: the same line from any machine that computes the same floats


@dataclass(frozen=True)
class ScanSettings:
    """What every scored line depends on besides the model: the flag threshold and the inference switches; with
    ``timing``, each record says the seconds spent on its pair (then two runs no longer write the same bytes)."""

    threshold: float = DEFAULT_THRESHOLD
    options: InferenceOptions = field(default_factory=InferenceOptions)
    timing: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.threshold, int | float) and 0.0 <= self.threshold <= 1.0):
            raise InputError(f"the threshold is a source share, between 0 and 1; got {self.threshold!r}")


class Runner(Protocol):
    """Scores ``pairs[start:]`` with the checkpoint and yields one record per pair, in order (``local_records``,
    ``scan_ray.ray_records``). The batches are those of all ``pairs`` (``from_batch``): a scan resumed at
    ``start`` computes the floats the uninterrupted scan computed, and writes its bytes."""

    def __call__(
        self, checkpoint: Path, pairs: Sequence[Pair], settings: ScanSettings, *, start: int = 0
    ) -> Iterator[dict[str, Any]]: ...


def length_problem(bundle: Bundle, pair: Pair) -> str | None:
    """Why the model cannot take this pair whole (a source or translation over its piece limit; both would be cut
    silently otherwise), or None."""
    assert pair.source is not None
    limit = bundle.max_source_tokens - 1
    try:
        n_source = len(bundle.tokenizer.encode(clean_text(pair.source)))
        n_target = len(bundle.tokenizer.encode_target(clean_text(pair.translation))) if pair.translation else 0
    except InputError as exc:
        return f"line {pair.line}: {exc}"
    for side, n in (("source", n_source), ("translation", n_target)):
        if n > limit:
            return f"line {pair.line}: the {side} is {n} pieces long; this model takes at most {limit}"
    return None


# ----------------------------------------------------------------------------- scoring
def model_id(checkpoint: str | Path) -> str:
    """The checkpoint's folder name and a digest of its weight and config files (12 hex digits): what each output
    line records, so that a scan is never resumed with another model. Read from the files, without loading them."""
    folder = Path(checkpoint)
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors"):
        with open(folder / name, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return f"{folder.resolve().name}:{h.hexdigest()[:12]}"


def score_pair(bundle: Bundle, pair: Pair, settings: ScanSettings, model: str) -> dict[str, Any]:
    """The output record of one pair: its source share and per-token shares, mean log-probability, flag — or the
    ``error`` that kept it from being scored. ``model`` is ``model_id`` of the bundle's checkpoint."""
    start = time.perf_counter()
    record = _score_pair(bundle, pair, settings, model)
    return timed([record], settings, time.perf_counter() - start)[0]


def _score_pair(bundle: Bundle, pair: Pair, settings: ScanSettings, model: str) -> dict[str, Any]:
    problem = pair.error or length_problem(bundle, pair)
    if problem is not None:
        return error_record(pair, problem, model)
    assert pair.source is not None
    try:
        # no translation: the model's own greedy output is scored, piece for piece (not its text read again: that
        # can split into other pieces, and an empty output has none); its text is what translate gives
        result = contributions(bundle, pair.source, translation=pair.translation, options=settings.options).shares()
        translation = pair.translation
        if translation is None:
            translation = bundle.translate(pair.source, settings.options).text
    except InputError as exc:
        return error_record(pair, f"line {pair.line}: {exc}", model)
    return scored_record(bundle, pair, result, translation, settings, model)


def scored_record(
    bundle: Bundle, pair: Pair, result: SourceShares, translation: str, settings: ScanSettings, model: str
) -> dict[str, Any]:
    """The output record of a scored pair: ``result`` its contributions, ``translation`` the text scored."""
    assert pair.source is not None
    share = float(result.source_share)
    context = field_context(*bundle.languages)
    fields = pair_fields(
        context, source=pair.source, translation=translation, reference=pair.reference, result=result, digits=DIGITS
    )
    return {
        "line": pair.line,
        "source": pair.source,
        "translation": translation,
        "reference": pair.reference,
        "own_translation": pair.translation is None,
        "target_pieces": list(result.target_pieces),
        "source_share": round(share, DIGITS),
        "token_source_share": [round(float(x), DIGITS) for x in result.token_source_share],
        "mean_logprob": round(float(np.mean(result.token_logprob)), DIGITS),
        "flagged": is_flagged(share, settings.threshold),
        **fields,
        "model": model,
    }


def timed(records: list[dict[str, Any]], settings: ScanSettings, seconds: float) -> list[dict[str, Any]]:
    """``records`` (scored together in ``seconds``) each with its share of the time, when ``settings.timing``."""
    if settings.timing:
        for record in records:
            record["seconds"] = round(seconds / len(records), DIGITS)
    return records


def is_flagged(source_share: float, threshold: float) -> bool:
    """The flag: a mean source share below ``threshold``."""
    return bool(source_share < threshold)


def error_record(pair: Pair, error: str, model: str) -> dict[str, Any]:
    """The record of a line that could not be scored: its text as read, no scores, the ``error``."""
    return {
        "line": pair.line,
        "source": pair.source,
        "translation": pair.translation,
        "reference": pair.reference,
        "own_translation": pair.translation is None,
        "target_pieces": None,
        "source_share": None,
        "token_source_share": None,
        "mean_logprob": None,
        "flagged": None,
        **EMPTY,
        "model": model,
        "error": error,
    }


def batches(bundle: Bundle, pairs: Sequence[Pair], batch_size: int, batch_tokens: int) -> Iterator[list[Pair]]:
    """``pairs`` in runs of consecutive pairs (input order kept) of at most ``batch_size`` pairs whose padded
    batch, pairs x (longest source + longest target, in pieces), stays within ``batch_tokens``; a pair over the
    budget alone is a batch of its own. A pair without a translation counts its source's length for its output
    (not known before it is decoded); a line that will not be scored counts nothing."""
    if batch_size < 1 or batch_tokens < 1:
        raise InputError(f"the batch size and the batch tokens are at least 1 (got {batch_size}, {batch_tokens})")
    batch: list[Pair] = []
    longest = (0, 0)
    for pair in pairs:
        n_src, n_tgt = _pieces(bundle, pair)
        wider = (max(longest[0], n_src), max(longest[1], n_tgt))
        if batch and (len(batch) == batch_size or (len(batch) + 1) * sum(wider) > batch_tokens):
            yield batch
            batch, wider = [], (n_src, n_tgt)
        batch.append(pair)
        longest = wider
    if batch:
        yield batch


def from_batch(groups: Iterable[list[Pair]], start: int) -> Iterator[tuple[list[Pair], int]]:
    """The batches from the one holding pair ``start`` (counted from 0 over all the batches' pairs) on, each with
    how many of its first records are to be dropped (written already): that batch is scored whole, as the
    uninterrupted scan scored it (another batch of the same pairs computes other roundings)."""
    seen = 0
    for group in groups:
        if seen + len(group) > start:
            yield group, max(0, start - seen)
        seen += len(group)


def _pieces(bundle: Bundle, pair: Pair) -> tuple[int, int]:
    """(source, target) lengths in pieces, eos included, that ``batches`` budgets a pair for."""
    if pair.error is not None or pair.source is None:
        return 0, 0
    try:
        n_src = len(bundle.tokenizer.encode(clean_text(pair.source))) + 1
        n_tgt = len(bundle.tokenizer.encode_target(clean_text(pair.translation))) + 1 if pair.translation else n_src
    except InputError:
        return 0, 0
    return n_src, n_tgt


def score_batch(bundle: Bundle, pairs: Sequence[Pair], settings: ScanSettings, model: str) -> list[dict[str, Any]]:
    """``score_pair`` of each pair, in order, with one greedy batch per group of like source lengths for the pairs
    without a translation (``decoding_groups``; ``Bundle.translate_batch``, each output cut at its own eos and step
    limit, as ``translate`` stops it) and one recorded pass per group of like lengths (``batch_source_shares``): the
    same records, up to the last of the written decimals. Without the padding or causal mask, batching would change
    the numbers: each pair is then scored alone (``score_pair``). With ``settings.timing`` each record's ``seconds``
    is the batch's time over its pairs."""
    options = settings.options
    if not (options.padding_mask and options.causal_mask):
        return [score_pair(bundle, pair, settings, model) for pair in pairs]
    start = time.perf_counter()
    records: list[dict[str, Any] | None] = [None] * len(pairs)
    rows: dict[int, tuple[list[int], list[int] | None]] = {}  # index in pairs -> (source ids, given output ids)
    for i, pair in enumerate(pairs):
        problem = pair.error or length_problem(bundle, pair)
        if problem is None:
            assert pair.source is not None
            try:
                bundle.check_options(options).whole_vocabulary("contributions")
                src_ids, _ = bundle.encode_source(pair.source)
                given = None if pair.translation is None else bundle.encode_target(pair.translation)
                rows[i] = (src_ids, given)
            except InputError as exc:
                problem = f"line {pair.line}: {exc}"
        if problem is not None:
            records[i] = error_record(pair, problem, model)
    own = [i for i, (_, given) in rows.items() if given is None]
    decoded: dict[int, list[int]] = {}
    for group in decoding_groups({i: len(rows[i][0]) for i in own}):
        texts = [pairs[i].source or "" for i in group]
        for i, out in zip(group, bundle.translate_batch(texts, options, record=Record(qkv=False)), strict=True):
            decoded[i] = own_ids(bundle, out.output_ids, len(rows[i][0]))
    order = list(rows)
    if order:
        scored: list[tuple[Sequence[int], Sequence[int]]] = []
        for i in order:
            src_ids, given = rows[i]
            scored.append((src_ids, decoded[i] if given is None else given))
        forced = [rows[i][1] is not None for i in order]
        for i, result in zip(order, batch_source_shares(bundle, scored, options=options, forced=forced), strict=True):
            pair = pairs[i]
            text = pair.translation
            if text is None:  # the model's own: its text as translate gives it
                text = output_text(bundle.tokenizer, decoded[i], bundle.config.eos_id)
            records[i] = scored_record(bundle, pair, result, text, settings, model)
    return timed([r for r in records if r is not None], settings, time.perf_counter() - start)


GROUP_PAD_ROWS = 4  # the padded rows a greedy step's fixed cost is worth (``decoding_groups``; docs/scan.md, Speed)


def decoding_groups(source_lengths: dict[int, int]) -> list[list[int]]:
    """The keys in groups of like source lengths, shortest first: a greedy batch steps until its longest output ends,
    so a group is cut where its padding would pass ``GROUP_PAD_ROWS`` rows at each of its steps."""
    groups: list[list[int]] = [[]]
    for i in sorted(source_lengths, key=source_lengths.__getitem__):
        n, group = source_lengths[i], groups[-1]  # n: the group's longest with i in it
        if group and len(group) * n - sum(source_lengths[j] for j in group) > GROUP_PAD_ROWS * n:
            groups.append([])
        groups[-1].append(i)
    return [group for group in groups if group]


def own_ids(bundle: Bundle, batch_ids: Sequence[int], n_src: int) -> list[int]:
    """A greedy batch item's output ids as ``translate`` decodes that source alone: up to its first eos (included)
    and no more than its own step limit (a batch runs to the limit of its longest source)."""
    ids = list(batch_ids)[: max_steps(bundle.config, None, n_src)]
    eos = bundle.config.eos_id
    return ids[: ids.index(eos) + 1] if eos in ids else ids


def score_pairs(
    bundle: Bundle,
    pairs: Iterable[Pair],
    settings: ScanSettings,
    model: str,
    *,
    batch_size: int = 1,
    batch_tokens: int | None = None,
) -> list[dict[str, Any]]:
    """Every pair scored, in order (what one Ray worker does with what it is sent): ``score_batch`` over
    ``batches`` of ``batch_size`` pairs within ``batch_tokens`` (default ``DEFAULT_BATCH_TOKENS``); with
    ``batch_size`` 1, ``score_pair`` of each."""
    pairs = list(pairs)
    if batch_size == 1:
        return [score_pair(bundle, pair, settings, model) for pair in pairs]
    budget = DEFAULT_BATCH_TOKENS if batch_tokens is None else batch_tokens
    return [
        r for batch in batches(bundle, pairs, batch_size, budget) for r in score_batch(bundle, batch, settings, model)
    ]


def local_records(
    checkpoint: Path,
    pairs: Sequence[Pair],
    settings: ScanSettings,
    *,
    start: int = 0,
    device: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
) -> Iterator[dict[str, Any]]:
    """The ``Runner`` of this process: loads the checkpoint once and scores ``pairs[start:]`` ``batch_size`` at a
    time within ``batch_tokens`` padded positions a batch (``batches`` of all the pairs, ``from_batch``,
    ``score_batch``; 1: one by one)."""
    if start >= len(pairs):
        return
    bundle = load(checkpoint, device=device)
    model = model_id(checkpoint)
    if batch_size == 1:
        for pair in pairs[start:]:
            yield score_pair(bundle, pair, settings, model)
        return
    for batch, written in from_batch(batches(bundle, pairs, batch_size, batch_tokens), start):
        yield from score_batch(bundle, batch, settings, model)[written:]


# ----------------------------------------------------------------------------- output
def resume_point(out: str | Path, pairs: Sequence[Pair], settings: ScanSettings, model: str) -> int:
    """How many lines of ``out`` are already done (0 when it is not there). A last line cut short by an interrupted
    write is removed from the file (it is scored again). Raises ``LabError`` when ``out`` holds lines that are not
    this scan's first lines: another input, another model, another threshold, or not a scan's output at all."""
    path = Path(out)
    if not path.exists():
        return 0
    if not path.is_file():
        raise LabError(f"{path}: not a file; --out names the JSON-lines file to write")
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]  # a torn last line (no newline yet) is dropped and redone
    if len(complete) < len(data):
        with open(path, "r+b") as f:
            f.truncate(len(complete))
    done = complete.decode("utf-8", errors="replace").splitlines()
    if len(done) > len(pairs):
        raise LabError(
            f"{path} has {len(done)} lines but {len(pairs)} pairs are to be scanned: it is not this input's scan "
            "(choose another --out, or remove it to start again)"
        )
    for i, text in enumerate(done):
        problem = mismatch(text, pairs[i], settings, model)
        if problem:
            raise LabError(
                f"{path} line {i + 1} {problem}: it is not this scan's output, so it is not resumed "
                "(choose another --out, or remove it to start again)"
            )
    return len(done)


def mismatch(text: str, pair: Pair, settings: ScanSettings, model: str) -> str | None:
    """Why an output line is not this pair's record made with this model and threshold, or None when it is."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return "is not JSON"
    if not isinstance(record, dict) or "line" not in record:
        return "is not a scan record"
    if record["line"] != pair.line or record.get("source") != pair.source:
        return f"is about input line {record['line']} ({str(record.get('source'))[:40]!r}), not line {pair.line}"
    if pair.translation is not None and record.get("translation") != pair.translation:
        return f"scored another translation than input line {pair.line}'s"
    if record.get("model") != model:
        return f"was scored by model {record.get('model')!r}, not {model!r}"
    share = record.get("source_share")
    if share is not None and record.get("flagged") != is_flagged(share, settings.threshold):
        return f"was flagged with another threshold than {settings.threshold}"
    return None


@dataclass(frozen=True)
class ScanSummary:
    """What one ``scan`` call did: lines found done, lines written, errors and flags among all lines of ``out``."""

    total: int
    resumed: int
    written: int
    errors: int
    flagged: int


def scan(
    checkpoint: str | Path,
    pairs_path: str | Path,
    out: str | Path,
    settings: ScanSettings = ScanSettings(),
    *,
    runner: Runner | None = None,
    progress: bool = True,
    on_record: Callable[[int], None] | None = None,
) -> ScanSummary:
    """Score every line of ``pairs_path`` into ``out`` (JSON lines, in input order), going on from the lines a
    previous call left there. ``runner`` scores the pairs (default: ``local_records``, in this process).
    ``on_record(n)`` is called after the n-th line of ``out`` is written and flushed."""
    checkpoint, out = Path(checkpoint), Path(out)
    if Path(pairs_path).resolve() == out.resolve():
        raise LabError(f"{out}: the output would overwrite the input; choose another --out")
    pairs = read_pairs(pairs_path)
    model = model_id(checkpoint)
    done = resume_point(out, pairs, settings, model)
    runner = runner or local_records
    written = 0
    bar = tqdm(total=len(pairs), initial=done, unit="pair", desc="scan", disable=not progress, dynamic_ncols=True)
    try:
        with open(out, "a", encoding="utf-8") as f:
            try:
                for record in runner(checkpoint, pairs, settings, start=done):
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
                    f.flush()  # a line in the file before the next one is scored: Ctrl-C loses none
                    written += 1
                    bar.update(1)
                    if on_record is not None:
                        on_record(done + written)
            finally:
                f.flush()
                fsync_path(out)
    finally:
        bar.close()
    if done + written != len(pairs):
        raise LabError(f"the scorer returned {written} records for {len(pairs) - done} pairs")
    errors, flagged = tally(out)
    return ScanSummary(len(pairs), done, written, errors, flagged)


def tally(out: Path) -> tuple[int, int]:
    """(lines with an error, lines flagged) of a scan's output."""
    errors = flagged = 0
    with open(out, encoding="utf-8") as f:
        for text in f:
            record = json.loads(text)
            errors += "error" in record
            flagged += bool(record.get("flagged"))
    return errors, flagged
