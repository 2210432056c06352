"""T5's steps in the family table (``hf_families.FAMILIES``): a local Hugging Face T5 / Flan-T5 / mT5 folder as a
core checkpoint.

    python -m core import-hf FOLDER --out checkpoints/NAME [--source-language en --target-language de]
                                                           [--source-prefix "translate English to German: "]

Its tokenizer is ``tokenizer.json`` (all transformers 5 writes for T5: read first, with the tokenizers library, as
AutoTokenizer prefers it), else ``spiece.model`` (ids: <pad> 0, </s> 1, <unk> 2) with tokenizer_config.json's
``extra_ids`` sentinels ``<extra_id_N>`` above its pieces (default 100). Its config is translated by
``hf_t5_config``: transformers' ``T5ForConditionalGeneration`` is core's ``Transformer`` with T5's variants set as
configuration (RMSNorm pre-norm, relative position bias, unscaled attention, d_kv, gated or plain FFN, the head as
the weights have it). T5 checkpoints translate when the source starts with a task prefix: the one config.json's
``task_specific_params`` holds for the languages asked for (the first translation task when none is asked for), or
``--source-prefix``; the checkpoint keeps it in its tokenizer entry and the lab puts it before what the person types.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import torch

from ..config import ModelConfig
from ..errors import CheckpointError, InputError
from ..text.hf_tokenizers import FastTokenizer, Framing
from ..text.t5_tokenizer import T5Tokenizer
from ..text.tokenizer import Tokenizer
from ..transformer.model import Transformer
from .hf_common import one_id
from .hf_entry import Card, HFFolder, Languages, ModelType, Setup, Tensors
from .hf_folder import CONFIG, TOKENIZER_CONFIG, TOKENIZER_JSON, WEIGHTS
from .hf_t5_config import (
    ARCHITECTURES,
    DEC_EMB,
    ENC_EMB,
    HEAD,
    IGNORED,
    MT5_DEFAULTS,
    SHARED,
    T5_DEFAULTS,
    config_from_t5,
    head,
    t5_names,
)

SPIECE = "spiece.model"
MODELS = {
    "t5": ModelType("T5 / T5 v1.1 / Flan-T5", ARCHITECTURES["t5"], T5_DEFAULTS),
    "mt5": ModelType("mT5", ARCHITECTURES["mt5"], MT5_DEFAULTS),
}
SPECIAL_DEFAULTS = {"eos": "</s>", "unk": "<unk>", "pad": "<pad>"}  # T5Tokenizer's, when tokenizer_config names none
DEFAULT_EXTRA_IDS = 100  # transformers' T5Tokenizer's
_TASK = re.compile(r"translation_([A-Za-z-]+)_to_([A-Za-z-]+)")


def extra_ids(f: HFFolder) -> int:
    """tokenizer_config.json's ``extra_ids``, or the number of ``<extra_id_N>`` pieces it lists, else 100."""
    value = f.tokenizer_config.get("extra_ids")
    if value is None:
        listed = f.tokenizer_config.get("additional_special_tokens") or f.tokenizer_config.get("extra_special_tokens")
        sentinels = [t for t in listed or [] if isinstance(t, str) and t.startswith("<extra_id_")]
        value = len(sentinels) if sentinels else DEFAULT_EXTRA_IDS
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 10_000:
        raise CheckpointError(
            f"{f.path(TOKENIZER_CONFIG)}: field extra_ids must be a whole number from 0 to 10,000, got {value!r}"
        )
    return value


def specials(f: HFFolder) -> dict[str, str]:
    """'eos' / 'unk' / 'pad' -> piece, as tokenizer_config.json names them (T5's defaults otherwise)."""
    found = {}
    for name, default in SPECIAL_DEFAULTS.items():
        value = f.tokenizer_config.get(f"{name}_token", default)
        value = value.get("content") if isinstance(value, dict) else value  # an AddedToken written out
        if not isinstance(value, str) or not value:
            raise CheckpointError(f"{f.path(TOKENIZER_CONFIG)}: field {name}_token must be a piece, got {value!r}")
        found[name] = value
    return found


def t5_tokenizer(f: HFFolder, source_prefix: str = "") -> Tokenizer:
    """The folder's tokenizer (tokenizer.json when it has one, else spiece.model), with a task prefix before
    source texts; a source is the text's pieces then ``</s>``."""
    if f.tokenizer_files[0] == TOKENIZER_JSON:
        pieces = specials(f)
        plain = FastTokenizer.from_file(f.path(TOKENIZER_JSON), Framing(), pieces)
        framed = Framing((), (plain.eos_id,))
        return FastTokenizer(plain.backend, plain.path, framed, pieces, source_prefix=source_prefix)
    return T5Tokenizer(f.path(SPIECE), extra_ids=extra_ids(f), source_prefix=source_prefix)


def read_tokenizer(f: HFFolder) -> HFFolder:
    """tokenizer.json, else spiece.model, read; its pad and eos at config.json's ids."""
    files = tuple(name for name in (TOKENIZER_JSON, SPIECE) if f.path(name).is_file())
    if not files:
        raise CheckpointError(
            f"{f.folder}: has no tokenizer — a T5 folder holds {TOKENIZER_JSON} (what transformers 5 writes) or "
            f"{SPIECE}; save it with AutoTokenizer.from_pretrained(original).save_pretrained(folder)"
        )
    f = dataclasses.replace(f, tokenizer_files=files[:1])
    extra_ids(f)  # CheckpointError for a bad count, whichever file is read
    ids = t5_tokenizer(f).special_ids()  # CheckpointError when the file is not a tokenizer
    for name, default in (("pad_token_id", 0), ("eos_token_id", 1)):
        wanted = one_id(f.generation_config.get(name, f.config.get(name, default)), name, f.path(CONFIG))
        has = ids[name.replace("_token", "")]
        if has != wanted:
            raise CheckpointError(
                f"{f.path(files[0])}: its {name.split('_')[0]} token has id {has}, but {CONFIG} says {name} "
                f"{wanted!r}; the tokenizer does not belong to these weights"
            )
    return f


def translation_tasks(f: HFFolder) -> dict[str, str]:
    """config.json's translation tasks: name ('translation_en_to_de') -> prefix."""
    tasks = f.config.get("task_specific_params") or {}
    if not isinstance(tasks, dict):
        raise CheckpointError(f"{f.path(CONFIG)}: field task_specific_params must be an object, got {tasks!r}")
    return {
        name: task["prefix"]
        for name, task in tasks.items()
        if _TASK.fullmatch(name) and isinstance(task, dict) and isinstance(task.get("prefix"), str)
    }


def task_prefix(f: HFFolder, languages: Languages, source_prefix: str | None) -> tuple[str, str, tuple[str, str]]:
    """(the source prefix, where it came from, the languages): ``source_prefix`` when given; else the translation
    task of config.json that matches ``languages`` (either may be None: any), the first one when none are given;
    else no prefix. InputError when languages are given that no task has, or that several tasks match."""
    src, tgt = languages
    tasks = translation_tasks(f)
    if source_prefix is not None or not tasks:
        how = "--source-prefix" if source_prefix is not None else "none: config.json names no translation task"
        return source_prefix or "", how, (src or "src", tgt or "tgt")
    pairs = {name: _TASK.fullmatch(name) for name in tasks}
    matching = [name for name, m in pairs.items() if m is not None and src in (None, m[1]) and tgt in (None, m[2])]
    if (src or tgt) and len(matching) != 1:
        wanted = f"translation_{src or '*'}_to_{tgt or '*'}"
        found = f"no task matches {wanted}" if not matching else f"{len(matching)} tasks match {wanted}"
        raise InputError(
            f"{f.path(CONFIG)}: in task_specific_params {found} (it has {', '.join(tasks)}); give both languages "
            "of one of them, or the prefix with --source-prefix"
        )
    name = matching[0]
    match = pairs[name]
    assert match is not None
    return tasks[name], f"{CONFIG} task_specific_params.{name}", (match[1], match[2])


def setup(f: HFFolder, languages: Languages, source_prefix: str | None, scratch: Path) -> Setup:
    """The tokenizer with the task prefix (``task_prefix``) before every source; the file copied as it is."""
    prefix, prefix_from, chosen = task_prefix(f, languages, source_prefix)
    tokenizer = t5_tokenizer(f, prefix)
    name = f.tokenizer_files[0]
    spec: dict[str, Any]
    if isinstance(tokenizer, FastTokenizer):
        spec = tokenizer.spec(file=name)
    else:
        assert isinstance(tokenizer, T5Tokenizer)
        spec = tokenizer.spec(model=name)
    return Setup(tokenizer, chosen, {name: f.path(name)}, spec, {"family": f.model_type}, prefix_from=prefix_from)


def model_config(f: HFFolder, chosen: Setup) -> ModelConfig:
    """config.json as core's ModelConfig (``hf_t5_config``)."""
    return config_from_t5(f, chosen)


def tensors(f: HFFolder, cfg: ModelConfig) -> Tensors:
    """The one shared embedding (both sides), the head (``head``), then every other parameter by name."""
    shared = f.tensors[SHARED]
    for name in (ENC_EMB, DEC_EMB):  # transformers ties both sides' embeddings to `shared`
        if name in f.tensors and not torch.equal(f.tensors[name], shared):
            raise CheckpointError(f"{f.path(WEIGHTS)}: tensor {name} differs from {SHARED}; T5 shares one embedding")
    projection, _ = head(f)
    given = {"src_embed.weight": shared, "tgt_embed.weight": shared, "output.weight": projection}
    ffn = "gated" if cfg.gated_ffn else "plain"
    what = f"{f.model_type} model of {cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers, {ffn} feed-forward"
    return Tensors(given, t5_names(cfg), {SHARED, HEAD, ENC_EMB, DEC_EMB, *IGNORED}, what)


def family_name(f: HFFolder, cfg: ModelConfig) -> str:
    """Which T5 this is, as far as the folder tells: mT5, or T5 v1.0-shaped / v1.1-shaped (Flan-T5 is v1.1)."""
    if f.model_type == "mt5":
        return "mT5 (multilingual T5, v1.1 shape: gated-GELU feed-forward, a head of its own)"
    if cfg.gated_ffn:
        tied = "a head of its own" if not cfg.tie_output else "the head tied to the embedding"
        return f"T5 v1.1-shaped (gated feed-forward, {tied}), as T5 v1.1 and Flan-T5 are"
    return "T5 v1.0-shaped (ReLU feed-forward, head tied to the embedding), as the original T5 is"


def card(f: HFFolder, chosen: Setup, model: Transformer, dtype: torch.dtype) -> Card:
    """The card's T5 facts: which T5, its shape and head, the task prefix, and the configuration the conversion
    set."""
    cfg, tokenizer, (src, tgt), file = model.config, chosen.tokenizer, chosen.languages, f.tokenizer_files[0]
    other_tasks = ", ".join(f"`{t}`" for t in f.config.get("task_specific_params") or {}) or "none"
    suppressed = ", ".join(f"{i} (`{tokenizer.piece(i)}`)" for i in cfg.suppress_ids) or "none"
    prefix = f"`{tokenizer.source_prefix!r}`" if tokenizer.source_prefix else "none"
    prefix_from = chosen.prefix_from
    output = (
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
        held = f"`{file}` read with the tokenizers library, the sentinels `<extra_id_N>` among its tokens"
    beyond = f"; {spare} rows beyond it have no piece" if spare > 0 else ""
    beyond = (
        f"; its last {-spare} ids have no row (special tokens no text gives; typed, they are refused)"
        if spare < 0
        else beyond
    )
    model_text = f"""* family: {family_name(f, cfg)}; model_type `{f.model_type}`.
* size: {model.n_parameters():,} parameters, saved as {str(dtype).replace("torch.", "")};
  {cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers, d_model {cfg.d_model}, {cfg.n_heads} heads of d_kv {cfg.d_head};
  feed-forward {cfg.d_ff} ({"gated " if cfg.gated_ffn else ""}{cfg.activation}).
* vocabulary: {cfg.tgt_vocab_size:,} embedding rows shared by source and target; the tokenizer has
  {tokenizer.vocab_size:,} ids ({held}){beyond}.
* output head: {output}.
* {src} → {tgt}."""
    task = f"""## Task prefix

T5 checkpoints translate when the source starts with a task prefix. This checkpoint's: {prefix} (from
{prefix_from}). The lab puts it before the text you type, so your text stays what you typed and the prefix's pieces
are the first source tokens on every page. Tasks the folder's {CONFIG} names: {other_tasks}. Another one:
import again with `--source-language` / `--target-language`, or `--source-prefix "..."`.

"""
    conversion = f"""\
`core/importers/hf_t5.py` read `{CONFIG}`, `{WEIGHTS}` (safetensors; a pickled `pytorch_model.bin` is never
opened) and `{file}`, and mapped every tensor by name onto the core Transformer, which runs transformers'
`T5ForConditionalGeneration` computation as configuration:

* pre-norm layers with RMSNorm (no mean, no bias; eps {cfg.norm_eps:g}) and a final RMSNorm per stack;
* no absolute positions: a learned relative position bias ({cfg.relative_buckets} buckets, max distance
  {cfg.relative_max_distance}), bidirectional in the encoder and causal in the decoder, added to every
  self-attention score of its stack (none on cross-attention); switching positional encoding off removes it;
* attention scores not divided by sqrt(d_kv); no biases on any projection; embeddings not scaled;
* the decoder starts from `decoder_start_token_id` {cfg.bos_id} (`{tokenizer.piece(cfg.bos_id)}`); eos {cfg.eos_id}
  (`{tokenizer.piece(cfg.eos_id)}`), pad {cfg.pad_id}, unk {cfg.unk_id}; ids decoding never chooses: {suppressed};
* tokenizer: `{file}` copied as it is; source text = prefix + your text, then `</s>`."""
    return Card(title=f.model_type.upper(), model=model_text, conversion=conversion, more=task)
