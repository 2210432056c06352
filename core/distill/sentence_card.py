"""The sentence recipe's card (``python -m core distill``): its sections, computed from the run, as a ``Card``."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..storage.checkpoint import load_checkpoint
from ..text.tokenizer import Tokenizer
from ..training.evaluate import translate_many
from ..transformer.model import Transformer
from .card import EVERYDAY, Card, columns_table, md_table, switches_table
from .data import read_lines
from .settings import SentenceRecipe


def side_by_side(student: Transformer, teacher: Transformer, tok: Tokenizer, compare: Path | None) -> dict:
    """Greedy translations of ``EVERYDAY`` by teacher and student (and an optional other checkpoint)."""
    out: dict[str, list[str] | str] = {
        "english": EVERYDAY,
        "teacher": translate_many(teacher, tok, EVERYDAY, max_source_tokens=128),
        "student": translate_many(student, tok, EVERYDAY, max_source_tokens=128),
    }
    if compare is not None and (compare / "config.json").is_file():
        other, other_tok, data = load_checkpoint(compare)
        out["compare"] = translate_many(other, other_tok, EVERYDAY, max_source_tokens=128)
        out["compare_name"] = (
            f"{data.get('name', compare.name)} ({data.get('source_language')}→{data.get('target_language')})"
        )
    return out


def build_card(
    recipe: SentenceRecipe, *, summary: dict, evaluation: dict, sbs: dict, size_mb: float, notes: str
) -> Card:
    """The distilled checkpoint's card from the run: ``summary`` (summary.json), ``evaluation`` (eval.json),
    ``sbs`` (``side_by_side``), the published folder's size in MB, the hand-written ``--notes`` ('' for none);
    the data folder's statistics and the short trials' logs are read from the recipe's folders."""
    data_dir, run_dir = Path(recipe.data_dir), Path(recipe.run_dir)
    return Card(
        title="distilled-en-pt: Bergamot English → Portuguese with decoder self-attention",
        summary=f"""A full encoder–decoder Transformer in the lab's own format: Mozilla's Firefox Translations
(Bergamot) "tiny" English→Portuguese model with each decoder layer's SSRU replaced by 8-head masked
self-attention, learned by sequence-level knowledge distillation from the original model.
{summary.get("parameters", 0):,} parameters, stored as float16: **{size_mb:.1f} MB** on disk (limit 40 MB).""",
        made=_made(recipe, summary),
        data=_data(recipe, summary, data_dir),
        results=(
            ("Training", _training(recipe, summary, run_dir)),
            (
                f"Scores: student vs teacher on the {evaluation['n']:,} held-out Ding-test English sentences",
                _scores(recipe, summary, evaluation),
            ),
        ),
        side_by_side=_side(sbs, notes),
        languages=("English", "Portuguese"),
        teacher=Path(recipe.teacher),
        commands=(canonical_command(recipe),),
        reproduce_note=_reproduce_note(recipe),
    )


def _made(recipe: SentenceRecipe, summary: dict) -> str:
    tc = summary.get("train_config", {})
    init_text = (
        (
            f"\n* **Started from `{recipe.init_from}`** (`--init-from`), an earlier student, not from the copy "
            "described above;\n  the steps, minutes and curves below are this second phase's only."
        )
        if recipe.init_from
        else ""
    )
    return f"""\
* **Teacher**: `checkpoints/bergamot-en-pt` (imported by `python -m core import-bergamot`, float32; decoder
  self-part = SSRU). Greedy decoding in core's batched KV-cached decoder (`core.decoding.search.greedy`, batches
  sorted by length, ≤ 2,000 padded source tokens per batch).
* **Student**: the teacher's `ModelConfig` with `decoder_self="attention"` (8 heads of 32). Copied from the
  teacher: shared embedding / tied output projection and output bias, the 6-layer encoder, each decoder
  layer's cross-attention, feed-forward and all LayerNorms (the SSRU sublayer's post-norm becomes the
  self-attention sublayer's norm). New: decoder self-attention q/k/v (Xavier) and `out_proj` = **0**, so at
  step 0 the student equals the teacher with its SSRU output zeroed (post-norm: `LayerNorm(x + 0)`).
  Marian conventions kept: first decoder input is a zero vector, `</s>` = pad = start = id 0 (explicit
  keep-flags everywhere).{init_text}
* **Trained** with `core.training.train.Trainer`/`fit`: only `{recipe.scope}` trainable
  ({summary.get("trainable", 0):,} values; reused teacher parameters among them at {recipe.reused_lr_scale:g}×
  the learning rate); everything else frozen. Cross-entropy on the teacher's output
  (label smoothing {tc.get("label_smoothing")}), Adam + warm-up schedule (warmup {tc.get("warmup")},
  factor {tc.get("lr_factor")}), ≤ {tc.get("max_tokens")} tokens per batch, Ding sentences and fortune
  cookies ×{recipe.sentence_weight} per epoch. Best step chosen by greedy chrF against the teacher on the
  first {summary.get("dev_chrf_sentences", recipe.dev_chrf_sentences)} Ding-dev English sentences."""


def _data(recipe: SentenceRecipe, summary: dict, data_dir: Path) -> str:
    sources = json.loads((data_dir / "sources.json").read_text())
    train_stats = json.loads((data_dir / "train.stats.json").read_text())
    held_stats = json.loads((data_dir / "heldout.stats.json").read_text())
    extra_stats = (
        json.loads((data_dir / "extra.stats.json").read_text()) if (data_dir / "extra.stats.json").is_file() else None
    )
    n_train = len(read_lines(data_dir / "train.pt"))
    rows = [
        (
            "Ding dictionary (Debian package `trans-de-en`, Frank Richter, TU Chemnitz), train split, English side: "
            "sentences",
            "GPL-2.0-or-later",
            f"{sources['sentences']:,}",
            f"{min(n_train, sources['sentences']):,}",
        ),
        (
            "same, English phrases (shuffled; translated in order until done or out of time)",
            "GPL-2.0-or-later",
            f"{sources['phrases']:,}",
            f"{max(0, n_train - sources['sentences']):,}",
        ),
        (
            "fortune cookies (Debian packages `fortunes-min`, `fortunes`: fortune-mod 1.99.1; single-paragraph "
            "sentences of 3–30 words, attribution removed; files ethnic, men-women, computers, startrek, zippy and "
            "other non-prose files skipped)",
            "BSD licence of fortune-mod (Debian `copyright`: The Regents of the University of California); the "
            "cookies are quotations collected by the fortune-mod maintainers, authors as named in the files",
            f"{len(read_lines(data_dir / 'extra.en')):,}",
            f"{len(read_lines(data_dir / 'extra.pt')):,}",
        ),
        (
            "**held out**: Ding dev + test English sentences, in no training line (casefolded, trailing .?! ignored)",
            "GPL-2.0-or-later",
            f"{sources['heldout']:,}",
            f"{sources['heldout']:,}",
        ),
    ]
    extra_rate = f" Fortune cookies {extra_stats['sentences_per_s']} sentences/s." if extra_stats else ""
    return f"""Sequence-level KD: English → teacher Portuguese.

{md_table(["source", "licence", "English lines", "translated by the teacher"], rows)}

The Portuguese side is the teacher's output, so it carries the teacher's licence (below). Training used
{summary.get("pairs", 0):,} pairs after filtering (empty, > {recipe.max_pieces} pieces, runaway outputs).

Teacher throughput (greedy, {train_stats.get("threads")} CPU thread(s) while another training job shared
the 2-core machine): training data {train_stats["sentences_per_s"]} sentences/s,
{train_stats["output_tokens_per_s"]} output tokens/s ({train_stats["source_tokens_per_s"]} source tokens/s)
over {train_stats["sentences"]:,} lines in {train_stats["seconds"] / 60:.1f} min; held-out sentences
{held_stats["sentences_per_s"]} sentences/s.{extra_rate}"""


def _trials(run_dir: Path) -> list[tuple]:
    """(trial, step, minutes, dev loss, dev chrF, dev BLEU) of each short trial's last evaluation."""
    trials = []
    for log in sorted(run_dir.glob("trial-*/log.jsonl")):
        evals = [json.loads(line) for line in log.read_text().splitlines() if '"eval"' in line]
        if evals:
            e = evals[-1]
            trials.append((log.parent.name, e["step"], e["minutes"], e["dev_loss"], e["dev_chrf"], e["dev_bleu"]))
    return trials


def _training(recipe: SentenceRecipe, summary: dict, run_dir: Path) -> str:
    tc = summary.get("train_config", {})
    trials = _trials(run_dir)
    trial_text = (
        (
            "\n\nShort trial (4 minutes each, 1 thread each, side by side, same data and schedule), Ding-dev "
            "loss and greedy chrF/BLEU against the teacher:\n\n"
            + md_table(["trial", "step", "minutes", "dev loss", "dev chrF", "dev BLEU"], trials)
            + "\n\n`trial-attn` = `--scope self_attn+norm`; `trial-decoder` = `--scope decoder --reused-lr-scale 0.1` "
            "(cross-attention and FFN also learn, at a tenth of the rate). The lower dev loss decided: the main run "
            "continued `trial-attn`."
        )
        if trials
        else ""
    )
    first = next((t for t in trials if t[0] == "trial-attn"), None)  # the trial this run continued (see trial_text)
    curve_note = " ".join(
        filter(
            None,
            [
                "The train curve is plain cross-entropy: label smoothing was 0, despite the legend."
                if not tc.get("label_smoothing")
                else "",
                f"The first {first[1]} steps are `{first[0]}` above ({first[2]:g} minutes, 1 thread, side by side "
                "with the other trial)."
                if first
                else "",
            ],
        )
    )
    curve_note = f"\n\n({curve_note})" if curve_note else ""
    epochs = summary.get("epochs_completed")
    epochs_text = f"{epochs} full epoch{'' if epochs == 1 else 's'}."
    minutes = summary.get("minutes")
    anneal_text = (
        f" The rate followed the warm-up schedule, then fell linearly to 0 from step {tc['anneal_start']} over "
        f"{tc['anneal_steps']} steps (cool-down)."
        if tc.get("anneal_steps")
        else ""
    )
    return f"""\
{summary.get("steps")} steps, {minutes} min wall time (CPU; the threads of each piece are in the notes below),
{summary.get("tokens_seen", 0):,} target tokens, {summary.get("target_tokens_per_s")} target tokens/s overall
(median logging window {summary.get("median_window_tokens_per_s")} tokens/s); {epochs_text}{anneal_text}{trial_text}

![training curves](curves.png){curve_note}"""


def _scores(recipe: SentenceRecipe, summary: dict, evaluation: dict) -> str:
    sw = evaluation["switches"]
    zero = evaluation["zero_init_student"]
    scores = switches_table(
        sw,
        extra=[("student at initialisation (out_proj = 0: teacher without SSRU)", zero["chrf"], zero["bleu"], "", "")],
    )
    sweep = evaluation.get("single_head_ablation_chrf")
    sweep_text = ""
    if sweep:
        worst = sorted(sweep["chrf"].items(), key=lambda kv: kv[1])[:4]
        sweep_text = (
            f"\n\nSingle-head ablation (chrF vs teacher, first {sweep['n']} test sentences; layer.head): "
            + ", ".join(f"{k}: {v}" for k, v in sorted(sweep["chrf"].items()))
            + f". Most important: {', '.join(k for k, _ in worst)}."
        )
    beam_text = "".join(
        f" With {name.split(', ')[1]} instead of greedy decoding the student reaches chrF {r['chrf']} "
        "against the teacher's greedy output."
        for name, r in sw.items()
        if name.startswith("as trained, beam")
    )
    goal_met = sw["as trained"]["chrf"] >= 90
    longer_text = (
        ""
        if goal_met
        else " Training longer is the next step: raise `--max-minutes` (and move the cool-down) and run the same "
        "command; the trainer resumes."
    )
    n_dev_chrf = summary.get("dev_chrf_sentences", recipe.dev_chrf_sentences)
    teacher_tokens_per_s = evaluation["teacher_output_tokens_per_s"]
    return f"""sacreBLEU chrF and BLEU of the student's greedy output with the teacher's greedy output as the reference
(how faithfully it learned the teacher, not translation quality against human references). The test
sentences were used neither for training nor for choosing the checkpoint.

{scores}{sweep_text}

Goal chrF ≥ 90 against the teacher: **{"met" if goal_met else "not met"}**
({sw["as trained"]["chrf"]}: the published weights are step {summary.get("best_step")} of {summary.get("steps")} steps /
{summary.get("minutes")} min, the step with the best Ding-dev chrF
during training {summary.get("best_dev_chrf")}, on the first {n_dev_chrf} dev sentences).{beam_text}{longer_text}

How to read the switches: *causal mask off* decodes without the key/value cache, recomputing the whole
prefix at each step with every decoder position attending to every other. The newest position — the one
that picks the next token — sees the whole prefix with the mask on as well, so only the earlier positions'
layer-0 outputs (which layer 1 reads) change: a small drop is what "the decoder uses self-attention" predicts
here, while removing it (*heads ablated*: each head's output zeroed before `out_proj`) destroys the output.
The "at initialisation" row is the same network with `out_proj` = 0, i.e. the teacher with its SSRU silenced.

Greedy speed on these sentences ({torch.get_num_threads()} threads): student
{evaluation["student_sentences_per_s"]} sentences/s ({evaluation["student_output_tokens_per_s"]} output tokens/s),
teacher {evaluation["teacher_sentences_per_s"]} sentences/s ({teacher_tokens_per_s} output tokens/s)."""


def _side(sbs: dict, notes: str) -> str:
    """The everyday sentences by teacher, student (and the ``--compare`` checkpoint), then the hand-written
    ``--notes``."""
    columns = {
        "English": sbs["english"],
        "teacher (Bergamot, SSRU)": sbs["teacher"],
        "student (self-attention)": sbs["student"],
    }
    if "compare" in sbs:
        columns[sbs["compare_name"]] = sbs["compare"]
    intro = f"{len(sbs['english'])} everyday sentences (written for this card)."
    return "\n\n".join(filter(None, [intro, columns_table(columns), notes.strip()]))


def _reproduce_note(recipe: SentenceRecipe) -> str:
    init_note = (
        f"This command starts from `{recipe.init_from}`, the best checkpoint of an earlier run: make that "
        "one first (its command is in the notes above). "
        if recipe.init_from
        else ""
    )
    eval_path = Path(recipe.run_dir) / "eval.json"
    return f"""\
{init_note}`--notes` is the hand-written comparison shown under the side-by-side (leave it out to get the card
without it). This run itself was made in pieces on a shared 2-core machine (the pieces and their thread
counts are in the notes above); the same command resumes each stage where it stopped.

Stages skip what exists: data files are appended chunk by chunk (`{recipe.data_dir}`), training resumes from
`{recipe.run_dir}` (state.safetensors + state.json), the evaluation is cached in `{eval_path}`."""


def canonical_command(recipe: SentenceRecipe) -> str:
    """The command that makes this student: the recipe's settings as flags (max-steps and annealing when set)."""
    train = recipe.train
    parts = [
        "python -m core distill",
        f"--teacher {recipe.teacher}",
        f"--out {recipe.out}",
        f"--data-dir {recipe.data_dir}",
        f"--run-dir {recipe.run_dir}",
        f"--scope {recipe.scope}",
        f"--reused-lr-scale {recipe.reused_lr_scale:g}",
        f"--translate-minutes {recipe.translate_minutes:g}",
        f"--max-minutes {train.max_minutes:g}" if train.max_minutes else "",
        f"--threads {recipe.threads}",
    ]
    parts.append(f"--head-sweep {recipe.head_sweep} --eval-beam {recipe.eval_beam}")
    for name in ("warmup", "lr_factor", "max_tokens", "label_smoothing", "eval_every"):
        value = getattr(train, name)
        flag = "--" + name.replace("_", "-")
        parts.append(f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
    for name in ("max_steps", "anneal_start", "anneal_steps"):  # 0: not set
        if getattr(train, name):
            parts.append(f"--{name.replace('_', '-')} {getattr(train, name)}")
    if recipe.init_from:
        parts.append(f"--init-from {recipe.init_from}")
    if recipe.compare:
        parts.append(f"--compare {recipe.compare}")
    if recipe.notes:
        parts.append(f"--notes {recipe.notes}")
    return " ".join(p for p in parts if p)
