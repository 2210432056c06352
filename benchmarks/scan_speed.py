"""How fast the corpus scan goes, here and on Ray, and what the contributions cost beside a plain translation.

    python -m benchmarks.scan_speed [--pairs 120] [--checkpoint distilled-en-pt] [--sentences 32] [--rounds 3]
                                    [--heldout 64]

On ``--pairs`` real pairs (held-out Ding test English with the teacher's Portuguese, the first rows of
``benchmarks.hallucination``'s table), for the checkpoint:

1. the per-pair cost: for each pair in turn (interleaved, so both see the same load), the wall time of
   ``Bundle.translate`` (greedy, every attention recorded, as the lab translates), of untraced greedy decoding
   (``core.decoding.search.greedy`` with the bundle's fast weights, no recorder), of ``contributions`` on the given
   translation and of ``contributions`` of the model's own translation (no translation given);
   medians, and the ratio of the medians;
2. whole scans of the pairs (``core.analysis.scan.scan``, into a fresh file each): in this process with torch on 1
   and on 2 threads, and on a local Ray instance (2 CPUs) with 1 and with 2 workers (one torch thread each); wall
   time from the call to the last line written, worker start and checkpoint load included (and to the first line
   written: the start-up), and whether each output is byte-identical to the 1-thread local one;
3. the batched scan against its unit (issue 45's goal: a pair's marginal cost at most 0.1x a traced translation on
   one thread, bar 0.25x): on ``--sentences`` built-in sentences of the model's source language
   (``core.analysis.sentences.builtin_sentences``), in ``--rounds`` interleaved rounds (``benchmarks.timing``, one
   warm-up round dropped) of every contender at 1 and at 2 torch threads: ``Bundle.translate`` (traced) of each
   sentence, the unit; ``score_pairs`` over all of them at batch size 1, 8 and 32 (the token budget out of the way),
   with the model's own translations *given* on each line and without a translation (the model's own, greedy
   decoding batched and included); and CTranslate2's int8 translation of the same sources in one
   ``translate_batch`` (the production anchor: the checkpoint exported with ``benchmarks.anchors.export_ct2``,
   greedy, ``intra_threads`` = the thread count); and the forward work of the scan of the given translations as
   one batch alone (``forward_alone``: what is left without the decomposition and the records). Per pair = a
   contender's time over the sentences; the ratio is the median over rounds of its time over the same round's
   traced translations (``timing.paired_ratio``);
4. the same ratio on ``--heldout`` held-out pairs no choice of the scan's was tuned on (``heldout_costs``), at the
   default batch size and at 16.

Writes ``benchmarks/scan_speed.md``.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import torch

import core
from benchmarks.anchors import export_ct2
from benchmarks.hallucination import teacher_table
from benchmarks.timing import Stat, interleaved, paired_ratio
from core.analysis import contributions as contributions_module
from core.analysis.contributions import contributions
from core.analysis.decomposition import recorded_states, row_logprobs
from core.analysis.scan import Pair, Runner, ScanSettings, local_records, model_id, scan, score_pairs
from core.analysis.scan_ray import ray_records
from core.analysis.sentences import builtin_sentences
from core.decoding.search import default_max_len, greedy
from core.recording.call import Call

ROOT = Path(__file__).resolve().parents[1]


def per_pair_costs(checkpoint: Path, pairs: list[tuple[str, str]]) -> dict[str, float]:
    """Median seconds per pair of translate (traced), untraced greedy and contributions, interleaved per pair."""
    bundle = core.load(checkpoint, device="cpu")
    bundle.translate(pairs[0][0])  # warm-up
    contributions(bundle, pairs[0][0], translation=pairs[0][1])
    times: dict[str, list[float]] = {"translate": [], "greedy": [], "contributions": [], "own": []}
    for source, translation in pairs:
        t0 = time.perf_counter()
        bundle.translate(source)
        t1 = time.perf_counter()
        src, keep = bundle.padded([bundle.encode_source(source)[0]])
        greedy(bundle.model, src, keep, Call(fast=bundle.fast))
        t2 = time.perf_counter()
        contributions(bundle, source, translation=translation)
        t3 = time.perf_counter()
        contributions(bundle, source)  # the model's own translation: greedy decoding first
        times["translate"].append(t1 - t0)
        times["greedy"].append(t2 - t1)
        times["contributions"].append(t3 - t2)
        times["own"].append(time.perf_counter() - t3)
    return {name: statistics.median(t) for name, t in times.items()}


BATCH_SIZES = (1, 8, 32)
THREADS = (1, 2)
NO_BUDGET = 1 << 30  # batch tokens: only the batch size bounds a batch


def ct2_batch(folder: Path, bundle: core.Bundle, threads: int) -> Callable[[list[str]], list[str]]:
    """CTranslate2 int8, greedy, every source in one ``translate_batch`` on ``threads`` threads; text to text with
    our tokenizer's pieces (as ``benchmarks.anchors.ct2``)."""
    import ctranslate2

    translator = ctranslate2.Translator(
        str(folder), device="cpu", compute_type="int8", intra_threads=threads, inter_threads=1
    )
    tok = bundle.tokenizer
    id_of = {piece: i for i, piece in enumerate(tok.pieces(range(bundle.config.tgt_vocab_size)))}

    def run(texts: list[str]) -> list[str]:
        ids = [bundle.encode_source(text)[0] for text in texts]
        results = translator.translate_batch(
            [tok.pieces(i) for i in ids], beam_size=1, max_decoding_length=default_max_len(max(map(len, ids)))
        )
        return [tok.decode([id_of[p] for p in r.hypotheses[0]]) for r in results]

    return run


def forward_alone(bundle: core.Bundle, pairs: list[Pair]) -> Callable[[], object]:
    """The forward work of ``pairs`` scanned as one batch, alone: each of the scan's groups of like lengths
    (``contributions._chunks``) through the recorded pass it makes (``recorded_states``, the encoder unrecorded)
    and the vocabulary projection of every real position (``row_logprobs``); no decomposition, no records."""
    rows = [(bundle.encode_source(p.source or "")[0], bundle.encode_target(p.translation or "")) for p in pairs]
    groups = list(contributions_module._chunks([(len(s), len(o)) for s, o in rows], bundle.config.d_model))
    options = bundle.check_options(None)

    def run() -> object:
        states = [recorded_states(bundle, [rows[i] for i in group], options, encoder=False)[1] for group in groups]
        return row_logprobs(bundle, [rows[i][1] for group in groups for i in group], torch.cat(states), options)

    return run


def on_threads(threads: int, work: Callable[[], object]) -> Callable[[], object]:
    """``work`` run with torch on ``threads`` threads (set before each call: contenders of both counts share rounds)."""

    def run() -> object:
        torch.set_num_threads(threads)
        return work()

    return run


def batched_costs(checkpoint: Path, n: int, rounds: int) -> tuple[dict[tuple[int, str], Stat], str, int, str]:
    """Section 3's stats keyed (threads, contender), the CTranslate2 note ("" when it ran, else why not), how many
    of CTranslate2 int8's translations equal ours, and the sources' language."""
    bundle = core.load(checkpoint, device="cpu")
    sources, language = builtin_sentences(bundle.languages[0], n)
    torch.set_num_threads(1)
    own = [bundle.translate(s).text for s in sources]
    model, settings = model_id(checkpoint), ScanSettings()
    given = [Pair(i + 1, s, t) for i, (s, t) in enumerate(zip(sources, own, strict=True))]
    alone = [Pair(i + 1, s, None) for i, s in enumerate(sources)]
    contenders: dict[str, Callable[[], object]] = {"translate": lambda: [bundle.translate(s) for s in sources]}
    for size in BATCH_SIZES:
        for kind, pairs in (("given", given), ("own", alone)):
            contenders[f"{kind} {size}"] = functools.partial(
                score_pairs, bundle, pairs, settings, model, batch_size=size, batch_tokens=NO_BUDGET
            )
    contenders["forward"] = forward_alone(bundle, given)
    note, same = "", 0
    try:
        folder = Path(tempfile.mkdtemp(prefix="scan-speed-ct2-")) / "model"
        export_ct2(checkpoint, folder)
        engines = {t: ct2_batch(folder, bundle, t) for t in THREADS}
        same = sum(a == b for a, b in zip(engines[1](sources), own, strict=True))
    except (ImportError, subprocess.CalledProcessError) as exc:
        note = f"skipped: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        engines = {}
    works: dict[str, Callable[[], object]] = {}
    for t in THREADS:
        for name, work in contenders.items():
            works[f"{t} {name}"] = on_threads(t, work)
        if t in engines:
            works[f"{t} ct2"] = on_threads(t, functools.partial(engines[t], sources))
    stats = interleaved(works, rounds=rounds, warmup=1)
    torch.set_num_threads(1)
    keyed = {(int(key.split(" ", 1)[0]), key.split(" ", 1)[1]): stat for key, stat in stats.items()}
    return keyed, note, same, language


HELDOUT_FROM = 100  # section 4's first row of ``teacher_table``'s 200 (section 1 times its first ``--pairs``)


def heldout_costs(checkpoint: Path, n: int, rounds: int) -> tuple[dict[str, Stat], int, int]:
    """Section 4's stats: ``n`` held-out pairs no choice of the scan's was tuned on (rows ``HELDOUT_FROM`` on of the
    Ding test table of section 1, the teacher's Portuguese given), ``Bundle.translate`` (traced) of their sources
    against the scan at batch size 32 and 16 (the default token budget), one torch thread, interleaved rounds; and
    the sources' and translations' pieces."""
    bundle = core.load(checkpoint, device="cpu")
    rows = teacher_table(max(HELDOUT_FROM + n, 200), 0)[HELDOUT_FROM : HELDOUT_FROM + n]  # section 1's table
    sources = [en for en, _, _ in rows]
    pairs = [Pair(i + 1, en, pt) for i, (en, pt, _) in enumerate(rows)]
    model, settings = model_id(checkpoint), ScanSettings()
    torch.set_num_threads(1)
    works: dict[str, Callable[[], object]] = {"translate": lambda: [bundle.translate(s) for s in sources]}
    for size in (32, 16):
        works[f"scan {size}"] = functools.partial(score_pairs, bundle, pairs, settings, model, batch_size=size)
    pieces = (
        sum(len(bundle.encode_source(s)[0]) for s in sources),
        sum(len(bundle.encode_target(pt)) for _, pt, _ in rows),
    )
    return interleaved(works, rounds=rounds, warmup=1), *pieces


def heldout_lines(stats: dict[str, Stat], src_pieces: int, tgt_pieces: int, n: int) -> list[str]:
    """Section 4 of the report."""
    unit = stats["translate"]
    cells = [
        f"batch size {size}: {Stat(tuple(t / n for t in stats[f'scan {size}'].samples)).ms} a pair, "
        f"**{paired_ratio(stats[f'scan {size}'], unit):.2f}×**"
        for size in (32, 16)
    ]
    return [
        "",
        f"## On held-out pairs ({n} Ding test sentences, rows {HELDOUT_FROM}–{HELDOUT_FROM + n - 1} of section 1's "
        f"table, the teacher's Portuguese given; {src_pieces} source and {tgt_pieces} target pieces)",
        "",
        f"One torch thread, the default token budget, {len(unit.samples)} interleaved rounds kept: `Bundle.translate` "
        f"(traced) {Stat(tuple(t / n for t in unit.samples)).ms} a sentence; the scan at {'; at '.join(cells)} a "
        "traced translation.",
    ]


def batched_lines(stats: dict[tuple[int, str], Stat], note: str, same: int, language: str, n: int, rounds: int
                  ) -> list[str]:  # fmt: skip
    """Section 3 of the report: the table of per-pair costs, ratios and pairs/s."""
    lines = [
        "",
        f"## The batched scan against a traced translation ({n} built-in {language} sentences, "
        f"{len(next(iter(stats.values())).samples)} of {rounds} interleaved rounds kept after one warm-up)",
        "",
        "Goal (issue 45): a pair's marginal cost **≤ 0.1×** a traced translation on one thread (bar 0.25×). "
        "Per pair = the contender's time over the sentences, median over rounds (range); × = median over rounds of "
        "its time ÷ the same round's traced translations at the same thread count.",
        "",
        "| contender | 1 thread: ms a pair | × traced | pairs / s | 2 threads: ms a pair | × traced | pairs / s |",
        "|---|---|---|---|---|---|---|",
    ]
    labels = {"translate": "`Bundle.translate`, traced (the unit)"}
    for size in BATCH_SIZES:
        labels[f"given {size}"] = f"scan, translations given, batch size {size}"
    for size in BATCH_SIZES:
        labels[f"own {size}"] = f"scan, the model's own translations, batch size {size}"
    labels["forward"] = (
        "the scan's forward alone, every pair in one batch: its groups' recorded passes and vocabulary projection "
        "(no decomposition, no records)"
    )
    labels["ct2"] = "CTranslate2 int8, one `translate_batch` of all (the production anchor)"
    for name, label in labels.items():
        if (THREADS[0], name) not in stats:
            continue
        cells = [label]
        for t in THREADS:
            stat = stats[(t, name)]
            per = Stat(tuple(s / n for s in stat.samples))
            cells += [per.ms, f"{paired_ratio(stat, stats[(t, 'translate')]):.2f}×", f"{n / stat.median:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    if note:
        lines += ["", f"CTranslate2: {note}."]
    else:
        lines += ["", f"CTranslate2 int8's translations equal the lab's (traced greedy) for {same} of {n} sentences."]
    return lines


def timed_scan(checkpoint: Path, pairs_file: Path, out: Path, runner: Runner) -> tuple[float, float]:
    """(seconds to the first line written: start-up and checkpoint load included, seconds to the last)."""
    start = time.perf_counter()
    first: list[float] = []
    scan(checkpoint, pairs_file, out, runner=runner, progress=False,
         on_record=lambda n: first.append(time.perf_counter() - start) if n == 1 else None)  # fmt: skip
    return first[0], time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scan_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=120)
    parser.add_argument("--checkpoint", default="distilled-en-pt")
    parser.add_argument("--sentences", type=int, default=32, help="section 3: built-in sentences per round")
    parser.add_argument("--rounds", type=int, default=3, help="sections 3 and 4: interleaved rounds kept")
    parser.add_argument("--heldout", type=int, default=64, help="section 4: held-out pairs")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "scan_speed.md")
    args = parser.parse_args()
    import ray  # the optional extra (make test installs it); only this benchmark's Ray rows need it

    checkpoint = ROOT / "checkpoints" / args.checkpoint
    rows = teacher_table(max(args.pairs, 200), 0)[: args.pairs]  # the first rows: the same sentences at any n
    pairs = [(en, pt) for en, pt, _ in rows]
    load = os.getloadavg()[0]
    torch.set_num_threads(1)
    costs = per_pair_costs(checkpoint, pairs)
    batched = batched_costs(checkpoint, args.sentences, args.rounds)
    heldout = heldout_costs(checkpoint, args.heldout, args.rounds)
    work = Path(tempfile.mkdtemp(prefix="scan-speed-"))
    pairs_file = work / "pairs.tsv"
    pairs_file.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    runs: dict[str, tuple[float, float]] = {}
    torch.set_num_threads(1)
    runs["this process, 1 torch thread"] = timed_scan(checkpoint, pairs_file, work / "local1.jsonl", local_records)
    torch.set_num_threads(2)
    runs["this process, 2 torch threads"] = timed_scan(checkpoint, pairs_file, work / "local2.jsonl", local_records)
    torch.set_num_threads(1)
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    try:
        for n in (1, 2):
            runner = functools.partial(ray_records, address="auto", workers=n)
            runs[f"Ray, {n} worker{'s' if n > 1 else ''}"] = timed_scan(checkpoint, pairs_file, work / f"ray{n}.jsonl",
                                                                        runner)  # fmt: skip
    finally:
        ray.shutdown()
    reference = (work / "local1.jsonl").read_bytes()
    files = {
        "this process, 1 torch thread": "local1",
        "this process, 2 torch threads": "local2",
        "Ray, 1 worker": "ray1",
        "Ray, 2 workers": "ray2",
    }
    lines = [
        "# Scan speed",
        "",
        f"Made by `python -m benchmarks.scan_speed --pairs {args.pairs} --checkpoint {args.checkpoint} "
        f"--sentences {args.sentences} --rounds {args.rounds} --heldout {args.heldout}` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC: {os.cpu_count()} CPUs ({platform.machine()}), "
        f"torch {torch.__version__}, Ray {ray.__version__}, load average {load:.1f} at the start (a shared machine: "
        "compare rows of this one run only). The method is in the script's docstring.",
        "",
        f"Per pair (median of {args.pairs}, 1 torch thread): `Bundle.translate` (traced) {costs['translate']:.3f} s, "
        f"untraced greedy {costs['greedy']:.3f} s, `contributions` on the given translation "
        f"{costs['contributions']:.3f} s: contributions cost **{costs['contributions'] / costs['translate']:.2f}×** a "
        f"traced translation, **{costs['contributions'] / costs['greedy']:.2f}×** an untraced one; `contributions` "
        f"of the model's own translation (greedy decoding included) {costs['own']:.3f} s, "
        f"**{costs['own'] / costs['translate']:.2f}×** a traced translation.",
        "",
        "| scan of the pairs | wall time | of which to the first line | pairs / s | pairs / s after the first line "
        "| same bytes as the 1-thread scan here |",
        "|---|---|---|---|---|---|",
    ]
    for name, (first, seconds) in runs.items():
        same = (work / f"{files[name]}.jsonl").read_bytes() == reference
        # the scan writes a batch at a time: when the first batch holds nearly every pair there is no steady rate
        after = seconds - first
        steady = f"{(args.pairs - 1) / after:.2f}" if after > 0.2 * seconds else "— (one batch)"
        lines.append(
            f"| {name} | {seconds:.1f} s | {first:.1f} s | {args.pairs / seconds:.2f} | {steady} "
            f"| {'yes' if same else 'no'} |"
        )
    lines += batched_lines(*batched, args.sentences, args.rounds)
    lines += heldout_lines(*heldout, args.heldout)
    text = "\n".join(lines) + "\n"
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
