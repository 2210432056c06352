"""Check an export against the checkpoint it came from: the same sentence through core and through the exported
model (transformers for a Hugging Face folder, CTranslate2 for a CTranslate2 model). Each library is imported only
here, only when a check runs, and a missing one is reported instead of raised."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..bundle import Bundle
from ..config import ModelConfig, Record
from ..decoding.search import max_steps
from ..errors import CheckpointError
from ..sites import ids_site, output_site
from ..storage.checkpoint import place
from ..storage.durable import fsync_tree
from ..text.tokenizer import Tokenizer
from ..transformer.model import Transformer

DEFAULT_TEXT = "The weather is nice today, so we went for a walk in the park."
MAX_TOKENS = 24


def probe_text(info: dict[str, Any], text: str | None) -> str:
    samples = info.get("samples") or []
    if text:
        return text
    if samples and isinstance(samples[0], dict) and samples[0].get("source"):
        return str(samples[0]["source"])
    return DEFAULT_TEXT


def core_greedy(
    model: Transformer, tokenizer: Tokenizer, info: dict[str, Any], text: str
) -> tuple[list[int], list[int]]:
    """(source ids with eos, greedy output ids with eos when produced) from core."""
    out = Bundle(model, tokenizer, info).translate(text, max_len=MAX_TOKENS, record=Record(qkv=False))
    return [int(i) for i in out.trace[ids_site("src")]], [int(i) for i in out.trace[output_site("ids")]]


def verify_hf(
    folder: Path, model: Transformer, tokenizer: Tokenizer, info: dict[str, Any], *, text: str | None = None
) -> dict[str, Any]:
    """Load ``folder`` with transformers (the model and tokenizer classes its config names) and compare with core on
    one sentence: source ids, greedy ids and the logits of the teacher-forced greedy output. A T5 tokenizer's task
    prefix is put before the text on transformers' side, as core's tokenizer does."""
    try:  # heavy and optional: only when a check runs
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
    except ImportError:
        return {"verified": False, "reason": "transformers is not installed (pip install -e '.[test]')"}
    text = probe_text(info, text)
    src_ids, out_ids = core_greedy(model, tokenizer, info, text)
    hf = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    hf_src = AutoTokenizer.from_pretrained(folder)([tokenizer.source_prefix + text]).input_ids[0]
    src = torch.tensor([src_ids])
    with torch.inference_mode():
        generated = hf.generate(
            input_ids=src,
            attention_mask=torch.ones_like(src),
            num_beams=1,
            do_sample=False,
            max_new_tokens=len(out_ids),
        )
        start = hf.config.decoder_start_token_id
        hf_logits = hf(input_ids=src, decoder_input_ids=torch.tensor([[start] + out_ids[:-1]])).logits
        ours = model(src, torch.tensor([[model.config.bos_id] + out_ids[:-1]]))
    report = {
        "verified": True,
        "library": "transformers",
        "text": text,
        "same_source_ids": hf_src == src_ids,
        "same_greedy_ids": generated[0, 1:].tolist() == out_ids,
        "tokens": len(out_ids),
        "max_abs_logit_difference": float((hf_logits[..., : ours.shape[-1]] - ours).abs().max()),
    }
    return report


def check(report: dict[str, Any], out: Path) -> None:
    """CheckpointError naming ``out`` when a check found different ids (the export is wrong)."""
    if report.get("verified") and not (report.get("same_source_ids", True) and report["same_greedy_ids"]):
        raise CheckpointError(f"{out}: the export does not reproduce the checkpoint: {describe(report)}")


def ct2_translate(
    folder: Path, sources: list[list[str]], target_prefix: list[list[str]] | None = None, **options: Any
) -> list[list[str]]:
    """CTranslate2's greedy pieces for each source (pieces) of the model in ``folder``, on the CPU with this process's
    torch thread count. CTranslate2 shares torch's OpenMP runtime and sets its thread count for the whole process
    when a translator is made (to the number of cores by default): a check would otherwise leave every later torch
    call on other threads than the caller chose (on 2 cores, 1 -> 2). The count is put back afterwards."""
    import ctranslate2  # an optional extra: the callers import it first and say so when it is missing

    threads = torch.get_num_threads()
    try:
        translator = ctranslate2.Translator(str(folder), device="cpu", intra_threads=threads)
        results = translator.translate_batch(sources, target_prefix=target_prefix, beam_size=1, **options)
        return [result.hypotheses[0] for result in results]
    finally:
        torch.set_num_threads(threads)


def verify_ct2(
    folder: Path, model: Transformer, tokenizer: Tokenizer, info: dict[str, Any], *, text: str | None = None
) -> dict[str, Any]:
    """Load the CTranslate2 model in ``folder`` and compare its greedy tokens with core's on one sentence (a forced
    first output, the target language, given as CTranslate2's ``target_prefix``). Ids are named as CTranslate2's
    vocabulary names them (rows beyond the tokenizer get names of its own)."""
    try:
        import ctranslate2  # noqa: F401  (an optional extra, imported only when a check runs: is it there?)
    except ImportError:
        return {"verified": False, "reason": "ctranslate2 is not installed (pip install -e '.[ct2]')"}
    cfg = model.config
    missing = [
        f"{name} {value:g}"
        for name, value, off in (
            ("repetition_penalty", cfg.repetition_penalty, 1.0),
            ("encoder_no_repeat_ngram_size", cfg.encoder_no_repeat_ngram_size, 0),
        )
        if value != off
    ]
    if missing:  # CTranslate2 has no encoder n-gram rule, and its repetition penalty is not checked equal to ours
        return {
            "verified": False,
            "reason": f"the model decodes with {', '.join(missing)}, which CTranslate2 is not known to apply as "
            "transformers does: compare its outputs yourself",
        }
    text = probe_text(info, text)
    src_ids, out_ids = core_greedy(model, tokenizer, info, text)
    names = ct2_vocabulary(folder)
    prefix = ct2_target_prefix(folder, model.config, names)
    options, compared = ct2_decoding(model.config, out_ids, max_steps(model.config, MAX_TOKENS, len(src_ids)))
    result = ct2_translate(folder, [[names[i] for i in src_ids]], [prefix] if prefix else None, **options)
    ours = [names[i] for i in compared if i != model.config.eos_id]
    return {
        "verified": True,
        "library": "ctranslate2",
        "text": text,
        "same_greedy_ids": result[0] == ours,
        "tokens": len(out_ids),
    }


def ct2_decoding(cfg: ModelConfig, out_ids: Sequence[int], max_len: int) -> tuple[dict[str, Any], list[int]]:
    """How CTranslate2 decodes what core's greedy ``out_ids`` (a call of ``max_len`` steps) decoded: its
    ``translate_batch`` options for the model's generation rules (``core.decoding.generation_rules``: ``min_length``
    counts the start token, CTranslate2's ``min_decoding_length`` does not; the same ``no_repeat_ngram_size``) and
    length, and core's ids to compare with its output. CTranslate2 has no forced eos: where core forced one at its last
    step, CTranslate2 stops a step earlier and the ids before the eos are compared."""
    forced_end = int(cfg.forced_eos_id is not None and len(out_ids) == max_len)
    options = {
        "max_decoding_length": len(out_ids) - forced_end,
        "min_decoding_length": max(0, cfg.min_length - 1),
        "no_repeat_ngram_size": cfg.no_repeat_ngram_size,
    }
    return options, list(out_ids[: len(out_ids) - forced_end])


def ct2_vocabulary(folder: Path) -> list[str]:
    """The target vocabulary of the CTranslate2 model in ``folder``: the name of each id."""
    for name in ("shared_vocabulary", "target_vocabulary"):
        if (folder / f"{name}.json").is_file():
            return list(json.loads((folder / f"{name}.json").read_text(encoding="utf-8")))
        if (folder / f"{name}.txt").is_file():
            return (folder / f"{name}.txt").read_text(encoding="utf-8").splitlines()
    raise CheckpointError(f"{folder}: no CTranslate2 vocabulary file (shared_vocabulary.json)")


def ct2_target_prefix(folder: Path, cfg: ModelConfig, names: list[str]) -> list[str]:
    """The target_prefix CTranslate2 needs to decode as the lab does: the forced first output (the target language),
    after the lab's start token when the model's config.json has no ``decoder_start_token`` (CTranslate2 then starts
    from the prefix's first token, as it converts mBART). Its hypotheses hold the forced token, not the start."""
    forced = [] if cfg.forced_bos_id is None else [names[cfg.forced_bos_id]]
    start = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("decoder_start_token")
    return forced if start is not None else [names[cfg.bos_id], *forced]


def describe(report: dict[str, Any]) -> str:
    if not report.get("verified"):
        return f"not checked: {report.get('reason')}"
    parts = [f"checked with {report['library']} on {report['text']!r} ({report['tokens']} tokens):"]
    if "same_source_ids" in report:
        parts.append(f"source ids {'the same' if report['same_source_ids'] else 'DIFFER'},")
    parts.append(f"greedy output {'the same' if report['same_greedy_ids'] else 'DIFFERS'}")
    if "max_abs_logit_difference" in report:
        parts.append(f"(max |logit difference| {report['max_abs_logit_difference']:.2e})")
    return " ".join(parts)


def append_check(readme: Path, report: dict[str, Any]) -> None:
    with readme.open("a", encoding="utf-8") as fh:
        fh.write(f"\n## Check at export\n\n{describe(report)}\n")


def publish(staging: Path, out: Path, report: dict[str, Any], *, must_match: bool = True) -> None:
    """The end of every export: refuse it when the check found different ids (``must_match``), write the check
    into its README, sync it and put it in place as ``out``."""
    if must_match:
        check(report, out)
    append_check(staging / "README.md", report)
    fsync_tree(staging)
    place(staging, out)
