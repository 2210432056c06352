"""The BART family's steps in the family table (``hf_families.FAMILIES``): a local Hugging Face BART / mBART /
M2M100 / NLLB folder as a core checkpoint.

    python -m core import-hf FOLDER --out checkpoints/NAME [--source-language en_XX --target-language de_DE]

Its tokenizer is ``tokenizer.json`` (BART, mBART, NLLB: read with the tokenizers library; a BART folder may have
``vocab.json`` + ``merges.txt`` instead) or ``vocab.json`` + ``sentencepiece.bpe.model`` (M2M100, tokenizer_class
M2M100Tokenizer); tokenizer_config.json's ``tokenizer_class`` NllbTokenizer makes an m2m_100 folder NLLB. Its config
is translated by ``hf_bart_config``. The languages are chosen here and kept in the checkpoint
(``hf_bart_languages``): the source language's code frames every source, and the target language's code is the
forced first output (``forced_bos_id``: mBART-50, M2M100, NLLB), or the decoder's start token when the folder starts
the decoder from a language code (mBART-cc25 / en-ro style ``decoder_start_token_id``). Defaults: the flags, else
the folder's tokenizer_config.json ``src_lang`` / ``tgt_lang`` and ``forced_bos_token_id``; a code the tokenizer
does not have is refused with the list of those it has.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from ..config import ModelConfig
from ..errors import CheckpointError
from ..text.hf_tokenizers import FastTokenizer, Framing, M2M100VocabTokenizer, byte_level_bpe
from ..text.tokenizer import Tokenizer
from ..transformer.model import Transformer
from .hf_bart_config import (
    ARCHITECTURES,
    BIAS,
    DEC_EMB,
    DEFAULTS,
    ENC_EMB,
    HEAD,
    IGNORED,
    SHARED,
    bart_names,
    config_from_bart,
    embeddings,
)
from .hf_bart_languages import framing, variant
from .hf_entry import Card, HFFolder, Languages, ModelType, Setup, Tensors
from .hf_folder import CONFIG, TOKENIZER_JSON, VOCAB, WEIGHTS, read_vocab_file

MERGES, SPM = "merges.txt", "sentencepiece.bpe.model"
SPECIALS = {"bos": "<s>", "pad": "<pad>", "eos": "</s>", "unk": "<unk>"}  # every family's pieces
MODELS = {
    "bart": ModelType("BART", ARCHITECTURES["bart"], DEFAULTS["bart"]),
    "mbart": ModelType("mBART / mBART-50", ARCHITECTURES["mbart"], DEFAULTS["mbart"]),
    "m2m_100": ModelType("M2M100 / NLLB (dense)", ARCHITECTURES["m2m_100"], DEFAULTS["m2m_100"]),
}
FAMILY_NAMES = {"bart": "BART", "mbart": "mBART", "m2m100": "M2M100", "nllb": "NLLB (dense, M2M100 architecture)"}


def read_tokenizer(f: HFFolder) -> HFFolder:
    """The tokenizer's files the folder's family has (``tokenizer.json``; BART's ``vocab.json`` + ``merges.txt``;
    M2M100's ``sentencepiece.bpe.model`` + ``vocab.json``, its map read)."""
    family = variant(f)
    if family == "m2m100":
        needed: tuple[str, ...] = (SPM, VOCAB)
    elif family == "bart" and not f.path(TOKENIZER_JSON).is_file():
        needed = (VOCAB, MERGES)
    else:
        needed = (TOKENIZER_JSON,)
    for name in needed:
        if not f.path(name).is_file():
            raise CheckpointError(
                f"{f.path(name)}: missing — a {family} folder's tokenizer is {' + '.join(needed)} (save it with "
                "AutoTokenizer.from_pretrained(folder).save_pretrained(folder))"
            )
    vocab = read_vocab_file(f.path(VOCAB)) if family == "m2m100" else {}
    return dataclasses.replace(f, tokenizer_files=needed, vocab=vocab)


def tokenizer_files(f: HFFolder, scratch: Path) -> dict[str, Path]:
    """The files the checkpoint keeps (name in the checkpoint -> file here); a BART folder with only
    vocab.json + merges.txt gets a tokenizer.json built from them, written into the folder ``scratch``."""
    if f.tokenizer_files != (VOCAB, MERGES):
        return {name: f.path(name) for name in f.tokenizer_files}
    built = scratch / TOKENIZER_JSON
    byte_level_bpe(f.path(VOCAB), f.path(MERGES), [*SPECIALS.values(), "<mask>"]).save(str(built))
    return {TOKENIZER_JSON: built}


def bart_tokenizer(f: HFFolder, files: dict[str, Path], around: Framing | None = None) -> Tokenizer:
    """The folder's tokenizer read from ``files`` (``tokenizer_files``), framing sources as ``around`` (None:
    not at all)."""
    around = around or Framing()
    if SPM not in files:
        return FastTokenizer.from_file(files[TOKENIZER_JSON], around, SPECIALS)
    try:
        languages = str(f.tokenizer_config.get("language_codes", "m2m100"))
        return M2M100VocabTokenizer(files[SPM], f.vocab, languages, around)
    except ValueError as exc:
        raise CheckpointError(f"{f.path(VOCAB)}: {exc}") from None


def setup(f: HFFolder, languages: Languages, source_prefix: str | None, scratch: Path) -> Setup:
    """The tokenizer framed for the languages chosen (``hf_bart_languages.framing``), the decoder's start and forced
    first ids with them, and where each language came from."""
    files = tokenizer_files(f, scratch)
    around, chosen, start, forced, chosen_from = framing(f, bart_tokenizer(f, files), languages)
    tokenizer = bart_tokenizer(f, files, around)
    spec: dict[str, Any]
    if isinstance(tokenizer, FastTokenizer):
        spec = tokenizer.spec(file=TOKENIZER_JSON)
    else:
        assert isinstance(tokenizer, M2M100VocabTokenizer)
        spec = tokenizer.spec(model=SPM, vocab=VOCAB)
    origin = {"family": variant(f)}
    for side, where in zip(("source", "target"), chosen_from, strict=True):
        if where:  # BART names no languages
            origin[f"{side}_language_from"] = where
    return Setup(tokenizer, chosen, files, spec, origin, chosen_from, start_id=start, forced_bos_id=forced)


def model_config(f: HFFolder, chosen: Setup) -> ModelConfig:
    """config.json as core's ModelConfig (``hf_bart_config``), with the start and forced ids ``setup`` chose."""
    return config_from_bart(f, chosen)


def tensors(f: HFFolder, cfg: ModelConfig) -> Tensors:
    """The one shared embedding, the head (``embeddings``), the bias, then every other parameter by name."""
    shared, head = embeddings(f)
    given = {"src_embed.weight": shared, "tgt_embed.weight": shared, "output.weight": head}
    if cfg.output_bias:
        given["output.bias"] = f.tensors[BIAS].reshape(-1)
    what = f"{f.model_type} model of {cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers"
    return Tensors(given, bart_names(cfg), {SHARED, ENC_EMB, DEC_EMB, HEAD, BIAS, *IGNORED}, what)


def card(f: HFFolder, chosen: Setup, model: Transformer, dtype: torch.dtype) -> Card:
    """The card's facts of the family: which one, its size, norms and positions, how a source is framed."""
    cfg, tokenizer, (src, tgt), chosen_from = model.config, chosen.tokenizer, chosen.languages, chosen.languages_from
    family = FAMILY_NAMES[variant(f)]
    positions = (
        "learned, one table per side, read from row 2 (`BartLearnedPositionalEmbedding`'s offset)"
        if cfg.positional == "learned"
        else "fairseq's sinusoids (sines then cosines) read from row 2 (`M2M100SinusoidalPositionalEmbedding`)"
    )
    norms = "post-norm" if cfg.norm == "post" else "pre-norm, a LayerNorm after each stack"
    if cfg.embed_norm:
        norms += ", a LayerNorm on the embeddings (`layernorm_embedding`)"
    start = f"{cfg.bos_id} (`{tokenizer.piece(cfg.bos_id)}`)"
    forced = (
        ""
        if cfg.forced_bos_id is None
        else f", then always {cfg.forced_bos_id} (`{tokenizer.piece(cfg.forced_bos_id)}`)"
    )
    assert isinstance(tokenizer, (FastTokenizer, M2M100VocabTokenizer))
    around = tokenizer.framing
    framed = " ".join(f"`{p}`" for p in [*tokenizer.pieces(around.prefix), "…", *tokenizer.pieces(around.suffix)])
    layers = f"{cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers"
    saved = str(dtype).removeprefix("torch.")
    size = f"{model.n_parameters():,} parameters, saved as {saved}; {layers}, d_model {cfg.d_model}"
    origins = [f"the {side} language from {w}" for side, w in zip(("source", "target"), chosen_from, strict=True) if w]
    said = f" ({', '.join(origins)})" if origins else ""
    model_text = f"""* family: {family} (`model_type` {f.model_type!r}); {src} → {tgt}{said}.
* size: {size}, {cfg.n_heads} heads,
  FFN {cfg.d_ff} ({cfg.activation}), vocabulary {cfg.src_vocab_size:,}.
* {norms}; positions: {positions}; embeddings {"scaled by sqrt(d_model)" if cfg.scale_embedding else "not scaled"};
  output bias {"`final_logits_bias`" if cfg.output_bias else "none"}.
* a source is read as {framed} (its pieces at …); the decoder starts from {start}{forced}."""
    conversion = f"""\
`core/importers/hf_bart.py` read `{CONFIG}` and `{WEIGHTS}` (safetensors; a pickled file is never opened) and mapped
every tensor by name."""
    return Card(title=family, model=model_text, conversion=conversion)
