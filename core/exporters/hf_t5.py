"""Export a core checkpoint of T5's shape as a Hugging Face T5 (or mT5) folder that
``T5ForConditionalGeneration.from_pretrained`` and ``AutoTokenizer.from_pretrained`` load and that computes the
same outputs.

    python -m core export-hf CHECKPOINT OUT

What fits: the configuration ``core.importers.hf_t5_config`` reads — pre-norm RMSNorm stacks, the relative position
bias, unscaled attention, no biases, unscaled shared embeddings, a plain or gated FFN (a gated one with gelu_new,
which is what transformers' 'gated-gelu' runs), a T5 tokenizer (spiece.model + sentinels). The tensor names are
``t5_names``'s, the exact inverse of the import; the task prefix goes back into ``task_specific_params``, so a
re-import puts the same prefix before the source. With transformers installed the export is loaded back and
checked (source ids, greedy ids, logits) before it is moved into place.
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
from ..importers.hf_t5 import SPIECE
from ..importers.hf_t5_config import ARCHITECTURES, HEAD, SHARED, t5_names
from ..storage.checkpoint import CONFIG, load_checkpoint
from ..text.hf_tokenizers import FastTokenizer
from ..text.t5_tokenizer import T5Tokenizer
from ..text.tokenizer import Tokenizer
from ..transformer.model import Transformer
from .hf_marian import finish_folder


def misfits(cfg: ModelConfig, tokenizer: Tokenizer) -> list[str]:
    """What in ``cfg`` (and its tokenizer) transformers' T5ForConditionalGeneration cannot compute (empty: it fits)."""
    wanted = {
        "positional": "relative",
        "norm": "pre",
        "norm_kind": "rms",
        "attention_scale": False,
        "linear_bias": False,
        "scale_embedding": False,
        "share_embeddings": True,
        "output_bias": False,
        "decoder_self": "attention",
        "start": "bos",
    }
    problems = [
        f"{name} {getattr(cfg, name)!r}: T5 has {value!r}"
        for name, value in wanted.items()
        if getattr(cfg, name) != value
    ]
    if cfg.gated_ffn and cfg.activation not in ("gelu_new", "relu", "silu", "swish"):
        problems.append(
            f"activation {cfg.activation!r} in a gated FFN: transformers' 'gated-gelu' runs gelu_new (the tanh "
            "approximation), not the exact GELU"
        )
    if cfg.d_value != cfg.d_head:
        problems.append(f"d_v {cfg.d_value} != d_kv {cfg.d_head}: T5's d_kv is the size of keys and values alike")
    if cfg.scale_decoder_output and not cfg.tie_output:
        problems.append("scale_decoder_output with an untied head: transformers' T5 rescales only a tied one")
    if not isinstance(tokenizer, (T5Tokenizer, FastTokenizer)):
        problems.append(
            f"tokenizer {type(tokenizer).__name__}: a T5 folder's tokenizer is tokenizer.json or spiece.model with "
            "sentinels (a checkpoint imported from a T5 folder has one)"
        )
    return problems


def feed_forward_proj(cfg: ModelConfig) -> str:
    """transformers' name of the FFN: 'relu', 'gelu_new', ... or 'gated-gelu' (gelu_new), 'gated-silu', ..."""
    if not cfg.gated_ffn:
        return cfg.activation
    return "gated-gelu" if cfg.activation == "gelu_new" else f"gated-{cfg.activation}"


def hf_tensors(model: Transformer) -> dict[str, torch.Tensor]:
    """transformers' T5ForConditionalGeneration tensor names -> float32 tensors."""
    cfg = model.config
    state = {k: v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()}
    tensors = {SHARED: state["src_embed.weight"]}
    if not cfg.tie_output:
        tensors[HEAD] = state["output.weight"].clone()
    for ours, theirs in t5_names(cfg).items():
        tensors[theirs] = state[ours]
    return tensors


def hf_config(cfg: ModelConfig, model_type: str, info: dict[str, Any], tokenizer: Tokenizer) -> dict[str, Any]:
    languages = (info.get("source_language", "src"), info.get("target_language", "tgt"))
    tasks = {f"translation_{languages[0]}_to_{languages[1]}": {"prefix": tokenizer.source_prefix}}
    origin = {"format": "transformer-attention-lab", "name": info.get("name")}
    return {
        "architectures": [ARCHITECTURES[model_type]],
        "model_type": model_type,
        "vocab_size": cfg.tgt_vocab_size,
        "d_model": cfg.d_model,
        "d_kv": cfg.d_head,
        "d_ff": cfg.d_ff,
        "num_layers": cfg.n_encoder_layers,
        "num_decoder_layers": cfg.n_decoder_layers,
        "num_heads": cfg.n_heads,
        "relative_attention_num_buckets": cfg.relative_buckets,
        "relative_attention_max_distance": cfg.relative_max_distance,
        "dropout_rate": cfg.dropout,
        "layer_norm_epsilon": cfg.norm_eps,
        "feed_forward_proj": feed_forward_proj(cfg),
        "is_encoder_decoder": True,
        "tie_word_embeddings": cfg.tie_output,
        "scale_decoder_outputs": cfg.scale_decoder_output,
        "pad_token_id": cfg.pad_id,
        "eos_token_id": cfg.eos_id,
        "decoder_start_token_id": cfg.bos_id,
        "task_specific_params": tasks if tokenizer.source_prefix else {},
        "dtype": "float32",
        "exported_from": origin,
    }


def generation_config(cfg: ModelConfig) -> dict[str, Any]:
    config: dict[str, Any] = {
        "decoder_start_token_id": cfg.bos_id,
        "eos_token_id": cfg.eos_id,
        "pad_token_id": cfg.pad_id,
        "max_length": 512,
        **generation_settings(cfg),
        **hf_settings(cfg),
    }
    if cfg.suppress_ids:
        config["bad_words_ids"] = [[i] for i in cfg.suppress_ids]
    return config


def write_folder(checkpoint: Path, folder: Path) -> tuple[Transformer, Tokenizer, dict[str, Any], list[str]]:
    """Write the Hugging Face T5 folder for ``checkpoint`` into ``folder`` (created). Returns (model, tokenizer, the
    checkpoint's config.json, notes on the export)."""
    model, tokenizer, info = load_checkpoint(checkpoint, "cpu")
    cfg = model.config
    problems = misfits(cfg, tokenizer)
    if problems:
        raise CheckpointError(
            f"{checkpoint / CONFIG}: does not fit transformers' T5ForConditionalGeneration: " + "; ".join(problems)
        )
    model_type = "mt5" if (info.get("imported_from") or {}).get("family") == "mt5" else "t5"
    notes = [
        f"task prefix: {tokenizer.source_prefix!r}, in config.json's task_specific_params; put it before the text"
        if tokenizer.source_prefix
        else "no task prefix"
    ]
    folder.mkdir(parents=True)
    save_file(hf_tensors(model), str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hf_config(cfg, model_type, info, tokenizer), indent=2) + "\n")
    (folder / "generation_config.json").write_text(json.dumps(generation_config(cfg), indent=2) + "\n")
    tokenizer_config = {
        "tokenizer_class": "T5Tokenizer",
        "eos_token": tokenizer.piece(cfg.eos_id),
        "unk_token": tokenizer.piece(cfg.unk_id),
        "pad_token": tokenizer.piece(cfg.pad_id),
        "model_max_length": 512,
    }
    if isinstance(tokenizer, T5Tokenizer):
        shutil.copyfile(tokenizer.path, folder / SPIECE)
        tokenizer_config["extra_ids"] = tokenizer.extra_ids
    else:  # tokenizer.json holds the sentinels among its tokens: none added again
        shutil.copyfile(tokenizer.path, folder / "tokenizer.json")
        tokenizer_config["extra_ids"] = 0
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, ensure_ascii=False, indent=2) + "\n")
    languages = (str(info.get("source_language", "src")), str(info.get("target_language", "tgt")))
    finish_folder(checkpoint, folder, info, notes, languages, tag=model_type)
    return model, tokenizer, info, notes
