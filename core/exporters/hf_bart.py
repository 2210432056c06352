"""Export a core checkpoint of the BART family's shape as the Hugging Face folder it came from: BART, mBART, M2M100
or NLLB, which ``AutoModelForSeq2SeqLM.from_pretrained`` and ``AutoTokenizer.from_pretrained`` load and that
computes the same outputs.

    python -m core export-hf CHECKPOINT OUT

What fits: what ``core.importers.hf_bart_config`` reads — positions from row 2 (learned, one table per side, with the
embedding LayerNorm: BART post-norm, mBART pre-norm; or fairseq's sinusoids, pre-norm: M2M100 / NLLB), one shared
embedding, and the tokenizer the importer keeps (a tokenizer.json, or M2M100's vocab.json + sentencepiece.bpe.model).
The tensor names are ``bart_names``'s, the inverse of the import; the languages go back into tokenizer_config.json
(src_lang / tgt_lang) and the forced first id into generation_config.json, so a re-import frames sources and starts
the decoder the same way.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..config import ModelConfig
from ..decoding.beam_finish import generation_settings
from ..decoding.generation_rules import hf_settings
from ..errors import CheckpointError
from ..importers.hf_bart import SPM
from ..importers.hf_bart_config import ARCHITECTURES, BIAS, HEAD, POSITION_OFFSET, SHARED, bart_names
from ..importers.hf_folder import TOKENIZER_JSON, VOCAB
from ..storage.checkpoint import CONFIG, load_checkpoint
from ..text.hf_tokenizers import FastTokenizer, M2M100VocabTokenizer
from ..text.tokenizer import Tokenizer
from ..transformer.model import Transformer
from .hf_marian import finish_folder, shape_fields

TOKENIZER_CLASSES = {
    "bart": "BartTokenizer",
    "mbart": "MBartTokenizer",
    "m2m100": "M2M100Tokenizer",
    "nllb": "NllbTokenizer",
}


def family_of(cfg: ModelConfig, tokenizer: Tokenizer) -> str | None:
    """'bart', 'mbart', 'm2m100' or 'nllb' for a checkpoint of one of their shapes, else None."""
    if cfg.position_offset != POSITION_OFFSET:
        return None
    if cfg.positional == "learned" and cfg.embed_norm and cfg.separate_positions:
        return "bart" if cfg.norm == "post" else "mbart"
    if cfg.positional == "sinusoidal" and cfg.pe_layout == "concatenated" and cfg.norm == "pre":
        return "m2m100" if isinstance(tokenizer, M2M100VocabTokenizer) else "nllb"
    return None


def misfits(cfg: ModelConfig, tokenizer: Tokenizer) -> list[str]:
    """What in ``cfg`` and its tokenizer the family's transformers model cannot compute (empty: it fits)."""
    problems = []
    family = family_of(cfg, tokenizer)
    if family is None:
        problems.append(
            "positions: the BART family reads them from row 2 (position_offset 2) as learned tables with an "
            "embedding norm (BART, mBART) or fairseq's concatenated sinusoids with pre-norm (M2M100, NLLB)"
        )
    elif family != "m2m100" and not isinstance(tokenizer, FastTokenizer):
        problems.append(f"tokenizer: a {family} folder's tokenizer is a tokenizer.json")
    if family is not None and cfg.pad_position_zero != (family in ("m2m100", "nllb")):
        problems.append(
            f"pad_position_zero {cfg.pad_position_zero!r}: transformers' {family} "
            f"{'gives' if family in ('m2m100', 'nllb') else 'does not give'} <pad> a zero position"
        )
    for name, value in {
        "share_embeddings": True,
        "decoder_self": "attention",
        "start": "bos",
        "norm_kind": "layer",
        "attention_scale": True,
        "linear_bias": True,
        "gated_ffn": False,
        "d_kv": None,
    }.items():
        if getattr(cfg, name) != value:
            problems.append(f"{name} {getattr(cfg, name)!r}: the BART family has {value!r}")
    if cfg.src_vocab_size != cfg.tgt_vocab_size:
        problems.append("one vocabulary for both sides: src_vocab_size must equal tgt_vocab_size")
    return problems


def hf_tensors(model: Transformer) -> dict[str, torch.Tensor]:
    """transformers' tensor names -> float32 tensors (``bart_names`` the other way, the shared embedding, the bias)."""
    cfg = model.config
    state = {k: v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()}
    bias = state.get("output.bias", torch.zeros(cfg.tgt_vocab_size))
    tensors = {SHARED: state["src_embed.weight"], BIAS: bias[None].contiguous()}
    if not cfg.tie_output:
        tensors[HEAD] = state["output.weight"]
    for ours, theirs in bart_names(cfg).items():
        tensors[theirs] = state[ours]
    return tensors


def hf_config(cfg: ModelConfig, family: str, tokenizer: Tokenizer, origin: dict[str, Any]) -> dict[str, Any]:
    model_type = {"m2m100": "m2m_100", "nllb": "m2m_100"}.get(family, family)
    special = tokenizer.special_ids()
    return {
        "architectures": [ARCHITECTURES[model_type]],
        "model_type": model_type,
        "vocab_size": cfg.src_vocab_size,
        **shape_fields(cfg),
        "tie_word_embeddings": cfg.tie_output,
        "pad_token_id": cfg.pad_id,
        "bos_token_id": special["bos_id"],
        "eos_token_id": cfg.eos_id,
        "decoder_start_token_id": cfg.bos_id,
        "exported_from": origin,
    }


def write_folder(checkpoint: Path, folder: Path) -> tuple[Transformer, Tokenizer, dict[str, Any], list[str]]:
    """Write the Hugging Face folder for ``checkpoint`` into ``folder`` (created). Returns (model, tokenizer, the
    checkpoint's config.json, notes on the export)."""
    model, tokenizer, info = load_checkpoint(checkpoint, "cpu")
    cfg = model.config
    problems = misfits(cfg, tokenizer)
    family = family_of(cfg, tokenizer)
    if problems or family is None:
        raise CheckpointError(
            f"{checkpoint / CONFIG}: does not fit transformers' BART / mBART / M2M100: " + "; ".join(problems)
        )
    folder.mkdir(parents=True)
    origin = {"format": "transformer-attention-lab", "checkpoint": str(checkpoint.resolve()), "name": info.get("name")}
    save_file(hf_tensors(model), str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hf_config(cfg, family, tokenizer, origin), indent=2) + "\n")
    generation = {
        "decoder_start_token_id": cfg.bos_id,
        "eos_token_id": cfg.eos_id,
        "pad_token_id": cfg.pad_id,
        "max_length": 200,
        **generation_settings(cfg),
        **hf_settings(cfg),
    }
    if cfg.forced_bos_id is not None:
        generation["forced_bos_token_id"] = cfg.forced_bos_id
    if cfg.suppress_ids:
        generation["bad_words_ids"] = [[i] for i in cfg.suppress_ids]
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    languages = (str(info.get("source_language", "src")), str(info.get("target_language", "tgt")))
    tokenizer_config: dict[str, Any] = {"tokenizer_class": TOKENIZER_CLASSES[family]}
    if family != "bart":
        tokenizer_config |= {"src_lang": languages[0], "tgt_lang": languages[1]}
    assert isinstance(tokenizer, (FastTokenizer, M2M100VocabTokenizer))
    code_first = bool(tokenizer.framing.prefix)  # the source language's code before the text
    if family == "mbart" and code_first:  # mBART-50's framing
        tokenizer_config["tokenizer_class"] = "MBart50Tokenizer"
    if family == "nllb":
        tokenizer_config["legacy_behaviour"] = not code_first
    if isinstance(tokenizer, M2M100VocabTokenizer):
        shutil.copyfile(tokenizer.path, folder / SPM)
        (folder / VOCAB).write_text(json.dumps(tokenizer.vocab, ensure_ascii=False) + "\n", encoding="utf-8")
        tokenizer_config["language_codes"] = tokenizer.languages
    else:
        assert isinstance(tokenizer, FastTokenizer)
        shutil.copyfile(tokenizer.path, folder / TOKENIZER_JSON)
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, ensure_ascii=False, indent=2) + "\n")
    finish_folder(checkpoint, folder, info, [], languages, tag=family)
    return model, tokenizer, info, []
