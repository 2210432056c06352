"""Export a core checkpoint as a Hugging Face Marian folder that ``MarianMTModel.from_pretrained`` and
``MarianTokenizer.from_pretrained`` load and that computes the same outputs.

    python -m core export-hf CHECKPOINT OUT

What fits Marian: masked self-attention decoders, concatenated sinusoids (``concatenated_hf`` is transformers' own
table; ``concatenated``, Marian C++'s frequencies, is written into the weights as the position table, which
transformers loads), post-norm, relu / gelu / swish. Refused by name: SSRU decoders, learned positions, interleaved
sinusoids, pre-norm. The folder follows Opus-MT's conventions: the joint SentencePiece model is written as both
``source.spm`` and ``target.spm`` with a ``vocab.json`` of its pieces; a model that starts decoding from a zero
vector gets a zero ``<pad>`` row appended as ``decoder_start_token_id`` (as transformers' Opus-MT conversion and
CTranslate2 expect), with a -1e4 logit bias so it is never chosen. With transformers installed, the export is
loaded back and checked (greedy ids and logits) before it is moved into place.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..config import ModelConfig
from ..decoding.beam_finish import generation_settings
from ..decoding.generation_rules import hf_settings
from ..errors import CheckpointError
from ..importers.hf_bart_config import BIAS, DEC_EMB, ENC_EMB, HEAD, NORM_EPS, SHARED, layer_names
from ..importers.hf_marian_config import POSITIONS
from ..storage.checkpoint import CARD, CONFIG, load_checkpoint
from ..text.tokenizer import MarianVocabTokenizer, Tokenizer
from ..transformer.model import Transformer
from ..transformer.positional import sinusoidal_table

PAD_PIECE = "<pad>"
NEVER = -1e4  # the appended <pad>'s logit bias: exp(-1e4) is 0 in float32, so probabilities equal core's


@dataclass(frozen=True)
class Vocabulary:
    """The exported folder's ids: the checkpoint's, plus an appended zero ``<pad>`` row when ``appended``."""

    pieces: dict[str, int]
    size: int  # rows of the exported embeddings
    appended: bool
    pad_id: int
    decoder_start_id: int


def misfits(cfg: ModelConfig) -> list[str]:
    """What in ``cfg`` transformers' MarianMTModel cannot compute (empty: it fits)."""
    problems = []
    if cfg.decoder_self != "attention":
        problems.append(
            f"decoder_self {cfg.decoder_self!r}: Marian decoder layers use masked self-attention; an SSRU decoder "
            "has no counterpart"
        )
    if cfg.positional != "sinusoidal":
        problems.append(f"positional {cfg.positional!r}: Marian's positions are fixed sinusoids, not learned vectors")
    elif cfg.pe_layout == "interleaved":
        problems.append(
            "pe_layout 'interleaved': Marian's sinusoids are concatenated (the sines, then the cosines), not "
            "interleaved"
        )
    if cfg.norm != "post":
        problems.append(
            f"norm {cfg.norm!r}: transformers' MarianMTModel is post-norm (a LayerNorm after each residual)"
        )
    if cfg.src_vocab_size != cfg.tgt_vocab_size:
        problems.append(
            f"src_vocab_size {cfg.src_vocab_size} != tgt_vocab_size {cfg.tgt_vocab_size}: one joint vocab.json "
            "names every row"
        )
    return problems


def vocabulary(tokenizer: Tokenizer, cfg: ModelConfig, where: Path) -> Vocabulary:
    """Piece -> id for vocab.json, and the special ids of the exported folder."""
    if isinstance(tokenizer, MarianVocabTokenizer):
        pieces = dict(tokenizer.vocab)
    else:
        pieces = {tokenizer.piece(i): i for i in range(tokenizer.vocab_size)}
    if sorted(set(pieces.values())) != list(range(cfg.src_vocab_size)):
        raise CheckpointError(
            f"{where}: the tokenizer names {len(set(pieces.values()))} ids but the model has "
            f"{cfg.src_vocab_size} rows; vocab.json must name every row"
        )
    pad = tokenizer.special_ids()["pad_id"]
    appended = cfg.start == "zeros" or pad < 0
    if appended and PAD_PIECE in pieces:
        raise CheckpointError(
            f"{where}: start 'zeros' needs a zero '{PAD_PIECE}' row appended as the decoder's start token, but the "
            f"vocabulary has a '{PAD_PIECE}' piece already (id {pieces[PAD_PIECE]})"
        )
    n = cfg.src_vocab_size
    if appended:
        pieces[PAD_PIECE] = n
    return Vocabulary(
        pieces=pieces,
        size=n + int(appended),
        appended=appended,
        pad_id=n if appended else pad,
        decoder_start_id=n if cfg.start == "zeros" else cfg.bos_id,
    )


def hf_tensors(model: Transformer, vocab: Vocabulary) -> dict[str, torch.Tensor]:
    """transformers' MarianMTModel tensor names -> float32 tensors (see the module docstring)."""
    cfg = model.config
    state = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}

    def rows(matrix: torch.Tensor) -> torch.Tensor:  # (n, D) -> (size, D): the appended row is zeros
        return torch.cat([matrix, matrix.new_zeros(vocab.size - matrix.shape[0], matrix.shape[1])]).contiguous()

    enc, dec, head = rows(state["src_embed.weight"]), rows(state["tgt_embed.weight"]), rows(state["output.weight"])
    bias = state.get("output.bias", torch.zeros(cfg.tgt_vocab_size))
    tensors = {BIAS: torch.cat([bias, bias.new_full((vocab.size - bias.shape[0],), NEVER)])[None].contiguous()}
    if cfg.share_embeddings and cfg.tie_output:
        tensors[SHARED] = enc  # transformers ties the encoder's, the decoder's and the output's weights to it
    else:  # without tie_word_embeddings transformers ties nothing: each weight is its own tensor
        tensors.update({ENC_EMB: enc, DEC_EMB: dec.clone()})
        if cfg.share_embeddings:
            tensors[SHARED] = enc.clone()  # unused by transformers then; present so nothing is reported missing
        if not cfg.tie_output:
            tensors[HEAD] = head
    for ours, theirs in layer_names(cfg).items():
        tensors[theirs] = state[ours].contiguous()
    if cfg.pe_layout != "concatenated_hf":  # transformers' own table differs: ship ours (it loads it)
        for name in POSITIONS:
            tensors[name] = sinusoidal_table(cfg.max_positions, cfg.d_model, cfg.pe_layout)
    return tensors


def shape_fields(cfg: ModelConfig) -> dict[str, Any]:
    """The config.json fields of the model's shape (and inference-mode dropouts), as Marian's and the BART family's
    configs name them."""
    return {
        "d_model": cfg.d_model,
        "encoder_layers": cfg.n_encoder_layers,
        "decoder_layers": cfg.n_decoder_layers,
        "encoder_attention_heads": cfg.n_heads,
        "decoder_attention_heads": cfg.n_heads,
        "encoder_ffn_dim": cfg.d_ff,
        "decoder_ffn_dim": cfg.d_ff,
        "activation_function": cfg.activation,
        "max_position_embeddings": cfg.max_positions,
        "scale_embedding": cfg.scale_embedding,
        "dropout": cfg.dropout,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "is_encoder_decoder": True,
        "dtype": "float32",
    }


def hf_config(cfg: ModelConfig, vocab: Vocabulary, origin: dict[str, Any]) -> dict[str, Any]:
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": vocab.size,
        "decoder_vocab_size": vocab.size,
        **shape_fields(cfg),
        "share_encoder_decoder_embeddings": cfg.share_embeddings,
        "tie_word_embeddings": cfg.tie_output,
        "pad_token_id": vocab.pad_id,
        "eos_token_id": cfg.eos_id,
        "forced_eos_token_id": cfg.forced_eos_id,
        "decoder_start_token_id": vocab.decoder_start_id,
        "bos_token_id": None,
        "exported_from": origin,
    }


def generation_config(cfg: ModelConfig, vocab: Vocabulary) -> dict[str, Any]:
    banned = sorted(set(cfg.suppress_ids) | ({vocab.pad_id} if vocab.appended else set()))
    config: dict[str, Any] = {
        "decoder_start_token_id": vocab.decoder_start_id,
        "eos_token_id": cfg.eos_id,
        "pad_token_id": vocab.pad_id,
        "max_length": 512,
        **generation_settings(cfg),
        **hf_settings(cfg),
    }
    if banned:
        config["bad_words_ids"] = [[i] for i in banned]
    return config


def tokenizer_files(tokenizer: Tokenizer) -> tuple[Path, Path]:
    """(source, target) SentencePiece models: the checkpoint's one model twice, or a Marian vocabulary's pair."""
    if isinstance(tokenizer, MarianVocabTokenizer):
        return tokenizer.path, tokenizer.target_path
    return tokenizer.path, tokenizer.path


def readme(
    info: dict[str, Any], card: str, notes: list[str], languages: tuple[str, str], *, tag: str = "marian"
) -> str:
    """An exported folder's README.md: its licence and languages as front matter (tagged ``tag``: the family), the
    notes on the export, the checkpoint's card."""
    origin = info.get("imported_from") or info.get("origin") or {}
    licence = str(origin.get("licence", "")).split(" (")[0].strip()
    known = licence and not licence.startswith(("not stated", "see the"))
    front = f"license: {licence.lower()}\n" if known else ""
    lines = "\n".join(f"* {note}" for note in notes)
    return f"""---
{front}language:
- {languages[0]}
- {languages[1]}
tags:
- translation
- {tag}
---

# {info.get("name", "model")} (exported from Transformer Attention Lab)

Written by `python -m core export-hf` from a core checkpoint. Licence: {licence if known else "see the card below"}.

{lines}

## The checkpoint's card

{card}"""


def finish_folder(
    checkpoint: Path,
    folder: Path,
    info: dict[str, Any],
    notes: list[str],
    languages: tuple[str, str],
    *,
    tag: str = "marian",
) -> None:
    """The last step of every family's export: README.md (``readme``, with the checkpoint's card) and every file made
    readable by all (safetensors writes 0600; an export is meant to be shared)."""
    card = (checkpoint / CARD).read_text(encoding="utf-8") if (checkpoint / CARD).is_file() else ""
    (folder / "README.md").write_text(readme(info, card, notes, languages, tag=tag), encoding="utf-8")
    for path in folder.iterdir():
        path.chmod(0o644)


def write_folder(checkpoint: Path, folder: Path) -> tuple[Transformer, Tokenizer, dict[str, Any], list[str]]:
    """Write the Hugging Face folder for ``checkpoint`` into ``folder`` (created). Returns (model, tokenizer, the
    checkpoint's config.json, notes on the export)."""
    model, tokenizer, info = load_checkpoint(checkpoint, "cpu")
    cfg = model.config
    problems = misfits(cfg)
    if problems:
        raise CheckpointError(
            f"{checkpoint / CONFIG}: does not fit transformers' MarianMTModel: " + "; ".join(problems)
        )
    vocab = vocabulary(tokenizer, cfg, checkpoint / CONFIG)
    notes = []
    if cfg.pe_layout == "concatenated":
        notes.append(
            "positions: this model's sinusoids use Marian C++'s frequencies, which differ from the table transformers "
            "computes; the table is stored in model.safetensors (model.*.embed_positions.weight) and transformers "
            "loads it. Re-saving with save_pretrained drops it (transformers skips those tensors on save): keep "
            "these files."
        )
    if cfg.norm_eps != NORM_EPS:
        notes.append(
            f"LayerNorm eps: this model uses {cfg.norm_eps:g}, transformers' Marian a fixed {NORM_EPS:g}; "
            "outputs differ very slightly (see the check below)."
        )
    if vocab.appended:
        notes.append(
            f"'{PAD_PIECE}' (id {vocab.pad_id}) was appended with zero embeddings"
            + (
                " as the decoder's start token (core starts from a zero vector)"
                if cfg.start == "zeros"
                else " as the padding token"
            )
            + f" and logit bias {NEVER:g}; generation_config.json bans it too."
        )
    folder.mkdir(parents=True)
    origin = {"format": "transformer-attention-lab", "checkpoint": str(checkpoint.resolve()), "name": info.get("name")}
    save_file(hf_tensors(model, vocab), str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hf_config(cfg, vocab, origin), indent=2) + "\n")
    (folder / "generation_config.json").write_text(json.dumps(generation_config(cfg, vocab), indent=2) + "\n")
    source, target = tokenizer_files(tokenizer)
    shutil.copyfile(source, folder / "source.spm")
    shutil.copyfile(target, folder / "target.spm")
    (folder / "vocab.json").write_text(json.dumps(vocab.pieces, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    languages = (str(info.get("source_language", "src")), str(info.get("target_language", "tgt")))
    special = {name: tokenizer.piece(getattr(cfg, f"{name}_id")) for name in ("unk", "eos")}
    tokenizer_config = {
        "tokenizer_class": "MarianTokenizer",
        "source_lang": languages[0],
        "target_lang": languages[1],
        "unk_token": special["unk"],
        "eos_token": special["eos"],
        "pad_token": PAD_PIECE if vocab.appended else tokenizer.piece(vocab.pad_id),
        "model_max_length": 512,
        "separate_vocabs": False,
        "sp_model_kwargs": {},
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, ensure_ascii=False, indent=2) + "\n")
    finish_folder(checkpoint, folder, info, notes, languages)
    return model, tokenizer, info, notes
