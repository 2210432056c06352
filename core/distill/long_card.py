"""Stage "publish" of ``python -m core distill-long``: measure the student and write its checkpoint folder and card.

Measured here, on the machine that publishes (greedy, against the teacher's greedy output):
fidelity by source length (``core.distill.fidelity``, on the run's held-out test sources, joined where longer),
optionally the same for an earlier student (``--compare-student``); invented words of the teacher and the
student on the same inputs (``core.distill.invented``, where Debian's word lists are installed); the held-out
test sentences one by one, as trained and with the decoder's causal mask off or its self-attention heads ablated;
a side-by-side of everyday inputs; the alignment-heads table (``core.analysis.survey``). The training figures
come from the run's ``summary.json`` and ``log.jsonl`` (``--run-dir``), wherever the run was made.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..analysis.survey import measured_alignment_section
from ..bundle import Bundle
from ..errors import InputError
from ..storage.checkpoint import CheckpointMeta, folder_mb, load_checkpoint, read_config, save_checkpoint
from ..text.tokenizer import Tokenizer
from ..training.evaluate import translate_many
from ..training.train import plot_curves
from ..transformer.model import Transformer
from .card import EVERYDAY, Card, columns_table, compose, md_table, section, switches_table, write_card_file
from .data import read_lines
from .fidelity import (
    BUCKETS,
    CLITICS,
    HEADER,
    BucketFidelity,
    corpus_words,
    fidelity,
    inputs_by_length,
    source_sentences,
    word_list,
)
from .invented import InventedTable, dictionary, invented_section, measure
from .settings import LongRecipe
from .student import SCOPES, options_grid, switch_rows

LANGUAGES = {"en": "English", "pt": "Portuguese", "de": "German"}


def everyday_inputs(source_language: str, test_sources: list[str]) -> list[str]:
    """The card's side-by-side inputs: the 20 everyday English sentences, or (another source language) the
    first 20 held-out test sources of 6-16 words."""
    if source_language == "en":
        return list(EVERYDAY)
    return [s for s in test_sources if 6 <= len(s.split()) <= 16][:20]


def _fidelity_table(rows: list[BucketFidelity], label: str | None = None) -> str:
    header = HEADER if label is None else HEADER.replace("| source pieces |", "| model | source pieces |", 1)
    if label is not None:
        header = header.replace("|---|", "|---|---|", 1)
    return "\n".join([header, *[(f"| {label} " if label else "") + r.row() for r in rows]])


@dataclass(frozen=True)
class Measured:
    """Everything the publish stage measured, for the card."""

    rows: list[BucketFidelity]
    compare_rows: list[BucketFidelity]
    switches: dict[str, dict]
    side: dict[str, list[str]]
    alignment: str
    size_mb: float
    n_heads: int
    has_word_list: bool
    corpus_words: int  # words (distinct) of the teacher's translations of the distillation corpus counted as known
    invented: InventedTable | None = None  # invented words of teacher and student (None: no word list installed)


def goal_verdict(rows: list[BucketFidelity]) -> dict[str, bool | None]:
    """The long-sentence goals per criterion: True met, False not met, None not measured (a bucket is empty).
    chrF ≥ 95 for every bucket up to 60 pieces and ≥ 90 above; no output under 85 % of the teacher's length;
    at most 1 non-word per 100 inputs in every bucket."""
    if len(rows) != len(BUCKETS) or any(r.n == 0 or math.isnan(r.chrf) for r in rows):
        return {"chrf": None, "not_cut": None, "words": None}
    return {
        "chrf": all(r.chrf >= (95 if r.pieces[1] <= 60 else 90) for r in rows),
        "not_cut": all(r.short_share == 0 for r in rows),
        "words": all(100 * r.non_words <= r.n for r in rows),
    }


def quality_line(switches: dict[str, dict], rows: list[BucketFidelity]) -> str:
    measured = [r.chrf for r in rows if r.n and not math.isnan(r.chrf)]
    line = f"Reproduces its production teacher at chrF {switches['as trained']['chrf']:.1f} on held-out sentences"
    if len(measured) == len(BUCKETS):
        line += f" and {min(measured):.1f}–{max(measured):.1f} in every length bucket up to {BUCKETS[-1][1]} pieces"
    return line + "."


def publish(recipe: LongRecipe, teacher: Transformer, tok: Tokenizer, student: Transformer) -> Path:
    data_dir, run_dir, out = Path(recipe.data_dir), Path(recipe.run_dir), Path(recipe.out)
    src_lang, tgt_lang = recipe.source_language, recipe.target_language
    student = student.half().float().eval()  # measure the weights that are published (float16), not the run's
    test_src, test_ref = read_lines(data_dir / "test.src"), read_lines(data_dir / "test.tgt")
    if not test_src or len(test_src) != len(test_ref):
        raise FileNotFoundError(f"{data_dir}: test.src / test.tgt missing or of different lengths (teacher stage)")
    summary = json.loads((run_dir / "summary.json").read_text())
    sources = json.loads((data_dir / "sources.json").read_text())
    # the buckets exactly as `python -m core eval --by-length --sources data_dir/test.src` makes them
    buckets = inputs_by_length(source_sentences(data_dir / "test.src"), tok, per_bucket=recipe.per_bucket)
    debian = word_list(tgt_lang)
    corpus = data_dir / "train.tgt"  # the teacher's translations of the distillation corpus (teacher stage)
    corpus_known = corpus_words(corpus) if corpus.is_file() else set()
    known = debian | corpus_known
    t0 = time.perf_counter()
    rows = fidelity(student, teacher, tok, buckets, word_list=known, language=tgt_lang)
    print(f"publish: fidelity by length in {time.perf_counter() - t0:.0f} s", flush=True)
    compare_rows: list[BucketFidelity] = []
    if recipe.compare_student:
        earlier, earlier_tok, _ = load_checkpoint(recipe.compare_student)
        compare_rows = fidelity(
            earlier, teacher, earlier_tok, buckets, teacher_tokenizer=tok, word_list=known, language=tgt_lang
        )
    invented = measure_invented(teacher, student, tok, buckets, tgt_lang)
    switches = switch_rows(student, tok, test_src, test_ref, options_grid(student.config, per_layer=False))
    everyday = everyday_inputs(src_lang, test_src)
    side = {
        "input": everyday,
        "teacher": translate_many(teacher, tok, everyday, max_source_tokens=128),
        "student": translate_many(student, tok, everyday, max_source_tokens=128),
    }
    by_length = [
        {"pieces": list(r.pieces), "chrf": r.chrf, "bleu": r.bleu, "short": r.short_share, "non_words": r.non_words}
        for r in rows
    ]
    extra = {
        "teacher": str(recipe.teacher),
        "quality": quality_line(switches, rows),
        "trained_source_pieces": int(summary.get("max_pieces", recipe.max_pieces)),  # Bundle warns beyond it
        "distillation": {
            "recipe": "distill-long (word-level + sequence-level KD, long joined inputs)",
            "scope": summary.get("scope"),
            "steps": summary.get("steps"),
            "device": summary.get("device"),
            "held_out_vs_teacher": switches,
            "by_length": by_length,
        },
    }
    meta = CheckpointMeta(name=out.name, source_language=src_lang, target_language=tgt_lang, extra=extra)
    save_checkpoint(student, tok.path, out, card="(being written)\n", meta=meta, dtype=torch.float16)
    if (run_dir / "log.jsonl").is_file():
        kd = summary.get("kd_weight", recipe.kd_weight)
        plot_curves(
            run_dir / "log.jsonl",
            out / "curves.png",
            train_label=f"train: {1 - kd:g} × CE + {kd:g} × KL to the teacher",
            loss_label="loss (nats per target piece)",
        )
    measured = Measured(
        rows=rows,
        compare_rows=compare_rows,
        switches=switches,
        side=side,
        alignment=measured_alignment_section(Bundle(student, tok, read_config(out), out)),
        size_mb=folder_mb(out),
        n_heads=student.config.n_heads,
        has_word_list=bool(debian),
        corpus_words=len(corpus_known),
        invented=invented,
    )
    write_card_file(out, compose(build_card(recipe, summary, sources, measured, out)))
    print(f"published {out} ({folder_mb(out):.1f} MB)", flush=True)
    return out


def measure_invented(
    teacher: Transformer, student: Transformer, tok: Tokenizer, buckets: list[list[str]], language: str
) -> InventedTable | None:
    """Invented words of the teacher and the student on the fidelity buckets (``core.distill.invented``); None,
    with a note, when the target language's Debian word lists are not installed."""
    try:
        known = dictionary(language)
    except InputError as exc:
        print(f"publish: invented words not measured: {exc}", flush=True)
        return None
    t0 = time.perf_counter()
    table = measure(teacher, student, tok, buckets, known, language)
    print(f"publish: invented words in {time.perf_counter() - t0:.0f} s", flush=True)
    return table


def invented_card_section(recipe: LongRecipe, table: InventedTable, out: Path, per_bucket: str, second: bool) -> str:
    """The card's "Invented words" section (``per_bucket``: the inputs per bucket, as the fidelity table says;
    ``second``: the sources are a first run's teacher outputs)."""
    made_from = "translations of the Ding **test** sentences" if second else "Ding **test** sentences"
    sources = Path(recipe.data_dir) / "test.src"
    command = f"python -m core eval --invented-words --teacher {recipe.teacher} --checkpoint {out} --sources {sources}"
    return invented_section(
        table,
        teacher_name=Path(recipe.teacher).name,
        inputs=f"the {per_bucket} held-out inputs per length bucket of the table above (from the {made_from})",
        command=command + (f" --per-bucket {recipe.per_bucket}" if recipe.per_bucket != 100 else ""),
    )


def build_card(recipe: LongRecipe, summary: dict, sources: dict, m: Measured, out: Path) -> Card:
    """The published student's card: ``summary`` (the run's summary.json), ``sources`` (the data folder's
    sources.json), what publish measured, the output folder."""
    src = LANGUAGES.get(recipe.source_language, recipe.source_language)
    tgt = LANGUAGES.get(recipe.target_language, recipe.target_language)
    second = "sources_from" in sources  # the sources are another run's teacher outputs
    test_inputs = "translations of the Ding **test** sentences" if second else "Ding **test** sentences"
    n_per = "/".join(map(str, sorted({r.n for r in m.rows})))
    invented = [section(invented_card_section(recipe, m.invented, out, n_per, second))] if m.invented else []
    alignment = [section(m.alignment)] if m.alignment.strip() else []
    device = str(summary.get("device", "cpu"))
    return Card(
        title=f"{out.name}: Bergamot {src} → {tgt} with decoder self-attention, distilled for every input length",
        summary=f"A full encoder–decoder Transformer in the lab's own format: the imported Bergamot model "
        f"`{recipe.teacher}` with each decoder layer's SSRU replaced by {m.n_heads}-head masked self-attention, "
        f"learned from the teacher by `python -m core distill-long`. {m.size_mb:.1f} MB on disk (float16; limit "
        "40 MB).",
        made=_made(recipe, summary, second),
        data=_data(sources, src, tgt, second),
        results=(
            ("Fidelity to the teacher by source length", _fidelity(recipe, m, out, test_inputs, tgt)),
            *invented,
            ("Held-out sentences one by one, and the switches", _held_out(recipe, m, test_inputs)),
            *alignment,
        ),
        side_by_side=columns_table(
            {
                src: m.side["input"],
                "teacher (Bergamot, SSRU)": m.side["teacher"],
                "student (self-attention)": m.side["student"],
            }
        ),
        languages=(src, tgt),
        teacher=Path(recipe.teacher),
        commands=tuple(_reproduce(recipe, summary, sources.get("sources_from"))),
        reproduce_note="`--stages train` resumes from the run folder's `state.safetensors` (saved every minute); the "
        f"teacher stage appends its translations chunk by chunk. This checkpoint's teacher and train stages ran on "
        f"{device}, its publish stage (every figure above) on a 2-core CPU"
        + (
            "; on the CPU the first recipe's teacher took 63 min for 317,160 mostly short lines on one thread, so "
            "expect hours here (`scripts/gpu_session.sh` is the GPU session's script)."
            if device != "cpu"
            else "."
        ),
    )


def _made(recipe: LongRecipe, summary: dict, second: bool) -> str:
    cfg = summary.get("train_config", {})
    kd = summary.get("kd_weight", recipe.kd_weight)
    scale = summary.get("reused_lr_scale", recipe.reused_lr_scale)
    scope = summary.get("scope", recipe.scope)
    device = str(summary.get("device", "cpu"))
    n_dev = len(read_lines(Path(recipe.data_dir) / "dev.src"))
    lines = [
        "* **Student**: `core.distill.student.build_student` — every tensor is the teacher's except the decoder "
        f"self-attention (new, its output projection starting at 0). `--scope {scope}`: "
        + SCOPES.get(scope, scope).format(scale=f"{scale:g}")
        + f" ({summary.get('trainable', 0):,} values)."
        + (
            f" This run went on from an earlier student, `{summary['init_from']}` as it was then (`--init-from`; "
            f"weights digest {str(summary.get('init_digest'))[:16]}; that version's own card, in the history of "
            "that folder, says how it was made): the figures below count this run's steps only, and that student "
            "was evaluated before the first step, so the run could only publish something that scored better"
            + (" — none did: these are its weights" if summary.get("best_step") == 0 else "")
            + "."
            if summary.get("init_from")
            else ""
        ),
        f"* **Loss**: {1 - kd:g} × cross-entropy on the teacher's greedy output + {kd:g} × KL(teacher ‖ student) at "
        "every target position (word-level distillation: the teacher's whole next-piece distribution, from one "
        "teacher-forced pass over its own output).",
        f"* **Training**: {summary.get('steps', 0):,} steps, {summary.get('minutes')} min on {device}"
        + (" (bfloat16 autocast for the student; the teacher in float32 with TF32 matmuls)" if device != "cpu" else "")
        + f", {summary.get('tokens_seen', 0):,} target pieces ({summary.get('target_tokens_per_s', 0):,.0f} per "
        f"second), ≤ {cfg.get('max_tokens')} padded tokens per batch, the paper's schedule (warm-up "
        f"{cfg.get('warmup')}, factor {cfg.get('lr_factor')})"
        + (
            f"; {summary['skipped_batches']} batches skipped for a non-finite loss or gradient"
            if summary.get("skipped_batches")
            else ""
        )
        + f". The published weights are the step with the best chrF against the teacher on the {n_dev} dev inputs "
        f"(every length bucket, made from Ding **dev** sentences{' and translated' if second else ''}): "
        f"{summary.get('best_dev_chrf')}.",
        "",
        "![training curves](curves.png)",
    ]
    return "\n".join(lines)


def _data(sources: dict, src: str, tgt: str, second: bool) -> str:
    origin = sources.get("origin", sources)
    table = md_table(
        ["source text (English)", "inputs", "licence"],
        [
            [
                "Ding dictionary (Debian `trans-de-en`), training split, English sentences",
                f"{origin.get('ding_sentences', 0):,}",
                "GPL-2.0-or-later",
            ],
            [
                "fortune cookies (Debian `fortunes-min`, `fortunes`), single-paragraph sentences",
                f"{origin.get('fortunes', 0):,}",
                "BSD (fortune-mod)",
            ],
            ["Ding training phrases (short)", f"{origin.get('ding_phrases', 0):,}", "GPL-2.0-or-later"],
            [
                "runs of consecutive sentences of the two above, joined into 16–120-piece inputs, "
                "evenly over the buckets 16–30, 31–60, 61–120",
                f"{origin.get('joined_runs', 0):,}",
                "as their sentences",
            ],
        ],
    )
    if not second:
        held_note = (
            "Held out: Ding dev (best-step choice) and test sentences (every figure below), none in any training "
            f"input (casefolded, trailing .?! ignored). The {tgt} side of every pair is the teacher's greedy output."
        )
    else:
        dropped = sources.get("train_dropped_as_held_out")
        held_note = (
            f"The {src} sources are the first run's teacher outputs (`--sources-from {sources['sources_from']}`), the "
            f"{tgt} side this teacher's greedy output, so no human {src} either. The English held-out sentences are in "
            "no training input; "
            + (
                f"training sources equal to a dev or test source were dropped ({dropped:,})."
                if dropped is not None
                else "whether a training source's translation equals a held-out one's was not checked for this run."
            )
        )
    return f"{table}\n\n{held_note}"


def _fidelity(recipe: LongRecipe, m: Measured, out: Path, test_inputs: str, tgt: str) -> str:
    verdict = goal_verdict(m.rows)
    said = {True: "**met**", False: "**not met**", None: "not measured (a bucket is empty)"}
    goals = (
        f"chrF ≥ 95 per bucket up to 60 pieces and ≥ 90 above: {said[verdict['chrf']]}; no outputs cut short: "
        f"{said[verdict['not_cut']]}; ≤ 1 non-word per 100 inputs: {said[verdict['words']]}"
    )
    words_from = (
        f"nor in Debian's {tgt} word lists" if m.has_word_list else f"(there is no word list for {tgt}: only those)"
    )
    if m.corpus_words:
        words_from += (
            f" nor among the {m.corpus_words:,} words of the teacher's translations of the distillation corpus"
        )
    if recipe.target_language in CLITICS:  # a known verb with object pronouns after it is a word
        words_from += " (a known verb followed by object pronouns, as in “diga-me”, counts as known)"
    n_per = "/".join(map(str, sorted({r.n for r in m.rows})))
    table = (
        _fidelity_table(m.rows)
        if not m.compare_rows
        else _fidelity_table(m.rows, "this student")
        + "\n"
        + "\n".join(f"| previous student | {r.row()[2:]}" for r in m.compare_rows)
        + f"\n\n*Previous student*: `{recipe.compare_student}`, measured now on the same inputs (its own card says "
        "how it was made)."
    )
    command = (
        f"python -m core eval --by-length --teacher {recipe.teacher} --checkpoint {out} "
        f"--sources {Path(recipe.data_dir) / 'test.src'}"
        + (f" --per-bucket {recipe.per_bucket}" if recipe.per_bucket != 100 else "")
    )
    return (
        f"{n_per} held-out inputs per bucket from the {test_inputs} (single sentences for the short buckets, "
        "consecutive ones joined for the long ones); greedy; non-words are output words found neither in the "
        f"teacher's translations of these inputs {words_from}. Goals of the long-sentence issue: {goals}.\n\n"
        f"{table}\n\nReproduce: `{command}`"
    )


def _held_out(recipe: LongRecipe, m: Measured, test_inputs: str) -> str:
    n_test = len(read_lines(Path(recipe.data_dir) / "test.src"))
    as_trained, ablated = m.switches["as trained"], m.switches["all decoder self-attention heads ablated"]
    uses = as_trained["chrf"] - ablated["chrf"] >= 10
    return (
        f"The {n_test:,} {test_inputs.replace('**', '')}, greedy, against the teacher's greedy output.\n\n"
        + switches_table(m.switches, seconds="seconds (CPU)")
        + f"\n\nAblating every decoder self-attention head takes chrF from {as_trained['chrf']} to {ablated['chrf']}"
        + (": the student uses its self-attention. " if uses else ": the student barely relies on it. ")
        + "With the causal mask off the earlier positions see later ones (core recomputes the prefix at each step)."
    )


def _reproduce(recipe: LongRecipe, summary: dict, sources_from: str | None) -> list[str]:
    """The commands that make this checkpoint, from the run's own settings (``sources_from``: the inputs
    stage's, as recorded in its sources.json)."""
    cfg = summary.get("train_config", {})
    pair = f" --teacher {recipe.teacher} --source-language {recipe.source_language}"
    pair += f" --target-language {recipe.target_language}"
    common = f"--data-dir {recipe.data_dir}{pair}"
    first = f"python -m core distill-long --stages inputs,teacher {common}" + (
        f" --sources-from {sources_from}" if sources_from else ""
    )
    train = (
        f"python -m core distill-long --stages train {common} --run-dir {recipe.run_dir} "
        f"--scope {summary.get('scope', recipe.scope)} "
        f"--reused-lr-scale {summary.get('reused_lr_scale', recipe.reused_lr_scale):g} "
        f"--kd-weight {summary.get('kd_weight', recipe.kd_weight):g} --max-tokens {cfg.get('max_tokens')} "
        f"--warmup {cfg.get('warmup')} --lr-factor {cfg.get('lr_factor'):g} --eval-every {cfg.get('eval_every')} "
        f"--max-minutes {cfg.get('max_minutes'):g}"
        + (f" --init-from {summary['init_from']}" if summary.get("init_from") else "")
    )
    publish = f"python -m core distill-long --stages publish {common} --run-dir {recipe.run_dir} --out {recipe.out}"
    return [first, train, publish]
