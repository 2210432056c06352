"""The card (card.md) of a checkpoint imported from a Hugging Face T5 / Flan-T5 / mT5 folder: which family and
shape it is, where it came from, its licence, the task prefix the lab puts before source texts, and what the
conversion did and did not carry over."""

from __future__ import annotations

import torch

from ..model import Transformer
from ..t5_tokenizer import T5Tokenizer
from ..tokenizer import Tokenizer
from .hf_card import generation_text
from .hf_t5_folder import CONFIG, WEIGHTS, HFT5Folder


def family_name(f: HFT5Folder, model: Transformer) -> str:
    """Which T5 this is, as far as the folder tells: mT5, or T5 v1.0-shaped / v1.1-shaped (Flan-T5 is v1.1)."""
    cfg = model.config
    if f.model_type == "mt5":
        return "mT5 (multilingual T5, v1.1 shape: gated-GELU feed-forward, a head of its own)"
    if cfg.gated_ffn:
        head = "a head of its own" if not cfg.tie_output else "the head tied to the embedding"
        return f"T5 v1.1-shaped (gated feed-forward, {head}), as T5 v1.1 and Flan-T5 are"
    return "T5 v1.0-shaped (ReLU feed-forward, head tied to the embedding), as the original T5 is"


def card_text(
    *,
    name: str,
    f: HFT5Folder,
    model: Transformer,
    tokenizer: Tokenizer,
    languages: tuple[str, str],
    prefix_from: str,
    dtype: torch.dtype,
    command: str,
) -> str:
    cfg = model.config
    tasks = f.config.get("task_specific_params") or {}
    other_tasks = ", ".join(f"`{t}`" for t in tasks) or "none"
    suppressed = ", ".join(f"{i} (`{tokenizer.piece(i)}`)" for i in cfg.suppress_ids) or "none"
    version = f.config.get("transformers_version") or "not recorded"
    prefix = f"`{tokenizer.source_prefix!r}`" if tokenizer.source_prefix else "none"
    head = (
        "the shared embedding (tied), the decoder's output scaled by d_model^-0.5 first"
        if cfg.tie_output and cfg.scale_decoder_output
        else "the shared embedding (tied), no rescale"
        if cfg.tie_output
        else "`lm_head.weight`, a matrix of its own"
    )
    spare = cfg.tgt_vocab_size - tokenizer.vocab_size
    if isinstance(tokenizer, T5Tokenizer):
        held = f"{tokenizer.n_pieces:,} SentencePiece pieces and {tokenizer.extra_ids} sentinels `<extra_id_N>`"
    else:
        held = f"`{f.tokenizer_file}` read with the tokenizers library, the sentinels `<extra_id_N>` among its tokens"
    beyond = f"; {spare} rows beyond it have no piece" if spare > 0 else ""
    beyond = f"; its last {-spare} ids have no row (no text gives them)" if spare < 0 else beyond
    return f"""# {name}: imported from a Hugging Face {f.model_type.upper()} folder

Converted from the local folder `{f.folder.resolve()}` (written by transformers {version}). All credit for the
model goes to its authors; this checkpoint only converts it so the lab can show its attention.

## Licence

licence: {f.licence}

Keep the original folder's licence and credits with this checkpoint.

## Model

* family: {family_name(f, model)}; model_type `{f.model_type}`.
* size: {model.n_parameters():,} parameters, saved as {str(dtype).replace("torch.", "")};
  {cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers, d_model {cfg.d_model}, {cfg.n_heads} heads of d_kv {cfg.d_head};
  feed-forward {cfg.d_ff} ({"gated " if cfg.gated_ffn else ""}{cfg.activation}).
* vocabulary: {cfg.tgt_vocab_size:,} embedding rows shared by source and target; the tokenizer has
  {tokenizer.vocab_size:,} ids ({held}){beyond}.
* output head: {head}.
* {languages[0]} → {languages[1]}.

## Task prefix

T5 checkpoints translate when the source starts with a task prefix. This checkpoint's: {prefix} (from
{prefix_from}). The lab puts it before the text you type, so your text stays what you typed and the prefix's pieces
are the first source tokens on every page. Tasks the folder's {CONFIG} names: {other_tasks}. Another one:
import again with `--source-language` / `--target-language`, or `--source-prefix "..."`.

## Conversion

```
{command}
```

`core/importers/hf_t5.py` read `{CONFIG}`, `{WEIGHTS}` (safetensors; a pickled `pytorch_model.bin` is never
opened) and `{f.tokenizer_file}`, and mapped every tensor by name onto the core Transformer, which runs transformers'
`T5ForConditionalGeneration` computation as configuration:

* pre-norm layers with RMSNorm (no mean, no bias; eps {cfg.norm_eps:g}) and a final RMSNorm per stack;
* no absolute positions: a learned relative position bias ({cfg.relative_buckets} buckets, max distance
  {cfg.relative_max_distance}), bidirectional in the encoder and causal in the decoder, added to every
  self-attention score of its stack (none on cross-attention); switching positional encoding off removes it;
* attention scores not divided by sqrt(d_kv); no biases on any projection; embeddings not scaled;
* the decoder starts from `decoder_start_token_id` {cfg.bos_id} (`{tokenizer.piece(cfg.bos_id)}`); eos {cfg.eos_id}
  (`{tokenizer.piece(cfg.eos_id)}`), pad {cfg.pad_id}, unk {cfg.unk_id}; ids decoding never chooses: {suppressed};
* tokenizer: `{f.tokenizer_file}` copied as it is; source text = prefix + your text, then `</s>`.

{generation_text(f, cfg, tokenizer.piece)}
Beam search runs as transformers' does (`num_beams` hypotheses live, a pool of finished ones), so greedy and beam
outputs are `generate`'s. `config.json` records the source under `imported_from`.
"""
