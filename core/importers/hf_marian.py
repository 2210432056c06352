"""Marian's steps in the family table (``hf_families.FAMILIES``): a local Hugging Face Marian folder (Opus-MT and
the like) as a core checkpoint.

    python -m core import-hf FOLDER --out checkpoints/NAME

Its tokenizer is ``source.spm`` and ``target.spm`` (SentencePiece models for source and target text) with the joint
piece -> id map ``vocab.json`` both sides share. transformers' ``MarianMTModel`` is the same network as core's
``Transformer`` once its variants are set as configuration (``hf_marian_config``): concatenated sinusoids at the
paper's frequencies starting at position 0 (``pe_layout='concatenated_hf'``; Marian C++'s frequencies,
``'concatenated'``, when the file's position tables hold those), embeddings scaled by sqrt(d_model) only when
``scale_embedding``, post-norm layers with LayerNorm eps 1e-5, scores scaled by 1/sqrt(d_head), the FFN activation
``activation_function``, ``final_logits_bias`` as the output bias, the decoder starting from the
``decoder_start_token_id`` embedding (Marian's <pad>), shared / tied embeddings as the weights are, and the ids
generation_config.json bans (``bad_words_ids``) as ``suppress_ids``. Anything else is refused by name.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import sentencepiece as spm
import torch

from ..config import ModelConfig
from ..errors import CheckpointError
from ..text.tokenizer import MarianVocabTokenizer
from ..transformer.model import Transformer
from .hf_bart_config import BIAS, DEC_EMB, ENC_EMB, HEAD, SHARED, layer_names
from .hf_entry import Card, HFFolder, Languages, ModelType, Setup, Tensors
from .hf_folder import CONFIG, GENERATION_CONFIG, TOKENIZER_CONFIG, VOCAB, WEIGHTS, read_vocab_file
from .hf_marian_config import ARCHITECTURES, MARIAN_DEFAULTS, POSITIONS, config_from_marian, embeddings, special_pieces

SOURCE_SPM, TARGET_SPM = "source.spm", "target.spm"
MODELS = {"marian": ModelType("Marian (Opus-MT)", ARCHITECTURES["marian"], MARIAN_DEFAULTS)}
POSITION_WORDS = {  # the two layouts the importer accepts (``position_layout``)
    "concatenated_hf": "transformers' `MarianSinusoidalPositionalEmbedding`, the paper's frequencies; position "
    "tables in the file, if any, were checked equal to it",
    "concatenated": "Marian C++'s frequencies, as Bergamot models and this lab's `export-hf` of them store; the "
    "file's position tables were checked equal to them",
}


def read_tokenizer(f: HFFolder) -> HFFolder:
    """source.spm, target.spm (readable SentencePiece models) and vocab.json (its map read), one joint vocabulary."""
    for name in (SOURCE_SPM, TARGET_SPM, VOCAB):
        if not f.path(name).is_file():
            raise CheckpointError(
                f"{f.path(name)}: missing — a Marian folder's tokenizer is {SOURCE_SPM}, {TARGET_SPM} and {VOCAB}"
            )
    for name in (SOURCE_SPM, TARGET_SPM):
        try:
            spm.SentencePieceProcessor(model_file=str(f.path(name)))
        except Exception as exc:  # sentencepiece raises RuntimeError/OSError with C++ text
            raise CheckpointError(f"{f.path(name)}: not a readable SentencePiece model ({exc})") from None
    where = f.path(TOKENIZER_CONFIG)
    if f.tokenizer_config.get("separate_vocabs"):
        raise CheckpointError(f"{where}: field separate_vocabs is true; only one joint vocab.json is supported")
    kwargs = f.tokenizer_config.get("sp_model_kwargs")
    if kwargs:
        raise CheckpointError(f"{where}: field sp_model_kwargs {kwargs!r} is not supported")
    vocab = read_vocab_file(f.path(VOCAB))
    return dataclasses.replace(f, tokenizer_files=(SOURCE_SPM, TARGET_SPM, VOCAB), vocab=vocab)


def setup(f: HFFolder, languages: Languages, source_prefix: str | None, scratch: Path) -> Setup:
    """MarianTokenizer's reading of the files; the languages asked for, else tokenizer_config.json's."""
    tokenizer = MarianVocabTokenizer(f.path(SOURCE_SPM), f.path(TARGET_SPM), f.vocab, **special_pieces(f))
    src = languages[0] or f.tokenizer_config.get("source_lang") or "src"
    tgt = languages[1] or f.tokenizer_config.get("target_lang") or "tgt"
    return Setup(
        tokenizer=tokenizer,
        languages=(str(src), str(tgt)),
        files={name: f.path(name) for name in f.tokenizer_files},
        spec=tokenizer.spec(source=SOURCE_SPM, target=TARGET_SPM, vocab=VOCAB),
    )


def model_config(f: HFFolder, chosen: Setup) -> ModelConfig:
    """config.json as core's ModelConfig (``hf_marian_config``; the tokenizer's pieces are read from the folder)."""
    return config_from_marian(f)


def tensors(f: HFFolder, cfg: ModelConfig) -> Tensors:
    """The embeddings and head as MarianMTModel ties them, the bias, then every layer by name."""
    enc, dec, head = embeddings(f)
    given = {"src_embed.weight": enc, "tgt_embed.weight": dec, "output.weight": head}
    if cfg.output_bias:
        given["output.bias"] = f.tensors[BIAS].reshape(-1)
    known = {SHARED, ENC_EMB, DEC_EMB, HEAD, BIAS}  # model.shared.weight is unused by transformers when untied
    known |= {name for name in POSITIONS if name in f.tensors}  # checked by position_layout
    what = f"MarianMTModel of {cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers"
    return Tensors(given, layer_names(cfg), known, what)


def card(f: HFFolder, chosen: Setup, model: Transformer, dtype: torch.dtype) -> Card:
    """The card's Marian facts: languages, shape, embeddings, and the configuration the conversion set."""
    cfg, tokenizer, (src, tgt) = model.config, chosen.tokenizer, chosen.languages
    banned_in = GENERATION_CONFIG if f.generation_config else CONFIG
    suppressed = ", ".join(f"{i} (`{tokenizer.piece(i)}`)" for i in cfg.suppress_ids) or "none"
    embedded = (
        "one matrix for source, target and output"
        if cfg.share_embeddings and cfg.tie_output
        else f"source {'and target share one matrix' if cfg.share_embeddings else 'and target have their own'}, "
        f"output {'tied to the target embedding' if cfg.tie_output else 'its own matrix'}"
    )
    model_text = f"""* {src} → {tgt}; {cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers, d_model {cfg.d_model},
  {cfg.n_heads} heads, FFN {cfg.d_ff} ({cfg.activation}), {model.n_parameters():,} parameters, saved as
  {str(dtype).replace("torch.", "")}.
* Vocabulary: {cfg.src_vocab_size:,} source / {cfg.tgt_vocab_size:,} target ids; embeddings: {embedded};
  embeddings {"scaled by sqrt(d_model)" if cfg.scale_embedding else "not scaled"}; output bias
  {"(final_logits_bias)" if cfg.output_bias else "none (final_logits_bias is all zeros or absent)"}."""
    conversion = f"""\
`core/importers/hf_marian.py` read `{CONFIG}` and `{WEIGHTS}` (safetensors; a pickled `pytorch_model.bin` is never
opened) and mapped every tensor by name onto the core Transformer, which runs transformers' `MarianMTModel`
computation as configuration:

* positions: sines then cosines from position 0 (`pe_layout: {cfg.pe_layout}`: {POSITION_WORDS[cfg.pe_layout]});
* post-norm layers, LayerNorm eps {cfg.norm_eps:g} (transformers' fixed value), scores scaled by 1/sqrt(d_head);
* the decoder starts from the embedding of `decoder_start_token_id` {cfg.bos_id} (`{tokenizer.piece(cfg.bos_id)}`);
  eos {cfg.eos_id} (`{tokenizer.piece(cfg.eos_id)}`), pad {cfg.pad_id}, unk {cfg.unk_id};
* ids decoding never chooses (`bad_words_ids` / `suppress_tokens` of {banned_in}): {suppressed};
* tokenizer: `source.spm`, `target.spm` and `vocab.json` copied as they are: source text goes through `source.spm`,
  reference translations through `target.spm`, and both sides' pieces through the one `vocab.json` map, as
  transformers' `MarianTokenizer` does (a leading language code like `>>fra<<` is one token)."""
    return Card(title="Marian", model=model_text, conversion=conversion)
