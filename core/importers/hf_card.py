"""The card (card.md) of a checkpoint imported from a Hugging Face Marian folder: where it came from, its licence,
and what the conversion did and did not carry over."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..config import ModelConfig
from ..tokenizer import MarianVocabTokenizer
from .hf_folder import CONFIG, GENERATION_CONFIG, WEIGHTS, HFFolder, HFMarianFolder

POSITION_WORDS = {  # the two layouts the importer accepts (``position_layout``)
    "concatenated_hf": "transformers' `MarianSinusoidalPositionalEmbedding`, the paper's frequencies; position "
    "tables in the file, if any, were checked equal to it",
    "concatenated": "Marian C++'s frequencies, as Bergamot models and this lab's `export-hf` of them store; the "
    "file's position tables were checked equal to them",
}
# generation settings transformers' generate reads that a call here chooses for itself (greedy or beam, its length)
CALL_FIELDS = ("num_beams", "max_length", "max_new_tokens")
# ... and rules core does not reproduce, with the value that switches each off (a folder's "off" is not listed)
UNAPPLIED_FIELDS: dict[str, Any] = {
    "repetition_penalty": 1.0,
    "encoder_no_repeat_ngram_size": 0,
    "min_new_tokens": 0,
    "exponential_decay_length_penalty": None,
    "sequence_bias": None,
    "do_sample": False,
    "num_beam_groups": 1,
    "diversity_penalty": 0.0,
}


def generation_text(f: HFFolder, cfg: ModelConfig, piece: Callable[[int], str]) -> str:
    """The card's paragraph on the folder's generation settings (generation_config.json's, else config.json's, as
    generate reads them): the rules core applies as generate does (``core.generation_rules``, ``core.beam_finish``,
    the banned and forced ids), those it does not, and those each call chooses."""
    settings, name = (f.generation_config, GENERATION_CONFIG) if f.generation_config else (f.config, CONFIG)
    applied = [f"`length_penalty={cfg.length_penalty:g}` and `early_stopping={cfg.early_stopping!r}` (beam search)"]
    if cfg.forced_bos_id is not None:
        applied.append(f"the first output forced to {cfg.forced_bos_id} (`{piece(cfg.forced_bos_id)}`)")
    if cfg.min_length > 1:
        applied.append(f"`min_length={cfg.min_length}` (eos banned at the first {cfg.min_length - 1} output steps)")
    if cfg.no_repeat_ngram_size:
        applied.append(f"`no_repeat_ngram_size={cfg.no_repeat_ngram_size}` (no n-gram of that size twice)")
    if cfg.forced_eos_id is not None:
        applied.append(
            f"`forced_eos_token_id={cfg.forced_eos_id}` (`{piece(cfg.forced_eos_id)}` forced at the last step a call "
            "allows)"
        )
    if cfg.suppress_ids:
        applied.append("never chosen: " + ", ".join(f"{i} (`{piece(i)}`)" for i in cfg.suppress_ids))
    unapplied = [
        f"`{key}={settings[key]!r}`"
        for key, off in UNAPPLIED_FIELDS.items()
        if settings.get(key, off) not in (None, off)
    ]
    if settings.get("forced_bos_token_id") is not None and cfg.forced_bos_id is None:
        unapplied.append(f"`forced_bos_token_id={settings['forced_bos_token_id']!r}`")
    chosen = [f"`{key}={settings[key]!r}`" for key in CALL_FIELDS if settings.get(key) is not None]
    return (
        f"Generation settings (`{name}`), applied as transformers' `generate` applies them: {'; '.join(applied)}. "
        f"Not applied: {', '.join(unapplied) or 'none set'}. Chosen per call instead: {', '.join(chosen) or 'none set'}"
        " — greedy or beam search and the output length, in the app or the command line."
    )


def card_text(
    *,
    name: str,
    f: HFMarianFolder,
    cfg: ModelConfig,
    tokenizer: MarianVocabTokenizer,
    languages: tuple[str, str],
    n_params: int,
    dtype: torch.dtype,
    command: str,
) -> str:
    banned_in = GENERATION_CONFIG if f.generation_config else CONFIG
    suppressed = ", ".join(f"{i} (`{tokenizer.piece(i)}`)" for i in cfg.suppress_ids) or "none"
    embeddings = (
        "one matrix for source, target and output"
        if cfg.share_embeddings and cfg.tie_output
        else f"source {'and target share one matrix' if cfg.share_embeddings else 'and target have their own'}, "
        f"output {'tied to the target embedding' if cfg.tie_output else 'its own matrix'}"
    )
    version = f.config.get("transformers_version") or "not recorded"
    return f"""# {name}: imported from a Hugging Face Marian folder

Converted from the local folder `{f.folder.resolve()}` (written by transformers {version}). All credit for the
model goes to its authors; this checkpoint only converts it so the lab can show its attention.

## Licence

licence: {f.licence}

Keep the original folder's licence and credits with this checkpoint.

## Model

* {languages[0]} → {languages[1]}; {cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers, d_model {cfg.d_model},
  {cfg.n_heads} heads, FFN {cfg.d_ff} ({cfg.activation}), {n_params:,} parameters, saved as
  {str(dtype).replace("torch.", "")}.
* Vocabulary: {cfg.src_vocab_size:,} source / {cfg.tgt_vocab_size:,} target ids; embeddings: {embeddings};
  embeddings {"scaled by sqrt(d_model)" if cfg.scale_embedding else "not scaled"}; output bias
  {"(final_logits_bias)" if cfg.output_bias else "none (final_logits_bias is all zeros or absent)"}.

## Conversion

```
{command}
```

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
  transformers' `MarianTokenizer` does (a leading language code like `>>fra<<` is one token).

{generation_text(f, cfg, tokenizer.piece)}
Beam search runs as transformers' does (`num_beams` hypotheses live, a pool of finished ones), so greedy and beam
outputs are `generate`'s. `config.json` records the source under `imported_from`.
"""
