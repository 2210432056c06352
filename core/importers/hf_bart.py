"""Import a local Hugging Face BART / mBART / M2M100 / NLLB folder as a core checkpoint.

    python -m core import-hf FOLDER --out checkpoints/NAME [--source-language en_XX --target-language de_DE]

The folder is read by ``hf_bart_folder``, its config translated by ``hf_bart_config``. The languages are chosen here
and kept in the checkpoint: the source language's code frames every source (mBART ``x </s> en_XX``; NLLB
``eng_Latn x </s>``; M2M100 ``__en__ x </s>``; BART ``<s> x </s>``), and the target language's code is the forced
first output (``forced_bos_id``: mBART-50, M2M100, NLLB), or the decoder's start token when the folder starts the
decoder from a language code (mBART-cc25 / en-ro style ``decoder_start_token_id``). Defaults: the flags, else the
folder's tokenizer_config.json ``src_lang`` / ``tgt_lang`` and ``forced_bos_token_id``; a code the tokenizer does not
have is refused with the list of those it has.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from ..config import ModelConfig
from ..errors import CheckpointError, InputError
from ..hf_tokenizers import FastTokenizer, Framing, M2M100VocabTokenizer
from ..model import Transformer
from ..progress import ImportSteps, Progress
from ..tokenizer import Tokenizer
from ..weights import assign_weights, empty_model
from .hf_bart_config import BIAS, DEC_EMB, ENC_EMB, HEAD, IGNORED, SHARED, bart_names, config_from_bart, embeddings
from .hf_bart_folder import HFBartFolder, read_bart_folder
from .hf_card import generation_text
from .hf_common import imported_meta, mapped_state, provenance
from .hf_folder import CONFIG, TOKENIZER_CONFIG, WEIGHTS, folder_dtype
from .staging import save_with_files

FORMAT = "huggingface-bart-family"
FAMILY_NAMES = {"bart": "BART", "mbart": "mBART", "m2m100": "M2M100", "nllb": "NLLB (dense, M2M100 architecture)"}


def pick_language(
    f: HFBartFolder, codes: dict[str, int], asked: str | None, default: tuple[str | None, str], flag: str
) -> tuple[str, str]:
    """(the language code, where it came from): ``asked`` (a flag), else ``default`` (the folder's, and the field
    that says it); InputError naming the codes there are."""
    chosen, source = (asked, flag) if asked else default
    if not codes:
        return (chosen, source) if chosen else ("src" if flag == "--source-language" else "tgt", "none: no codes")
    if chosen is None:
        raise InputError(f"{f.folder}: name the language with {flag}; this tokenizer has: {', '.join(codes)}")
    if chosen not in codes:
        has = f"not a language code of this {f.family} tokenizer; it has: {', '.join(codes)}"
        if source == flag:
            raise InputError(f"{flag} {chosen!r}: {has}")
        raise InputError(f"{f.folder}: {source} says {chosen!r}, {has} (name one with {flag})")
    return chosen, source


def target_default(f: HFBartFolder, names: dict[int, str]) -> tuple[str | None, str]:
    """The folder's target language as ``generate`` takes it, and the field that says it: the forced first token
    (``forced_bos_token_id``), else the decoder's start token when it is a language code (mBART-cc25 / en-ro),
    else tokenizer_config.json's ``tgt_lang``."""
    for name in ("forced_bos_token_id", "decoder_start_token_id"):
        value, where = f.setting_from(name)
        if value in names:
            return names[value], f"{where} {name}"
    return f.tokenizer_config.get("tgt_lang"), f"{TOKENIZER_CONFIG} tgt_lang"


def code_first(f: HFBartFolder, tokenizer: Tokenizer) -> bool:
    """Whether the source language's code comes before the text (``en_XX x </s>``) rather than after its eos
    (``x </s> en_XX``), as the folder's tokenizer class frames it: mBART-50 and NLLB (unless its
    ``legacy_behaviour``) before, mBART-cc25 after; a folder that names no class, as its tokenizer.json's template."""
    cls = str(f.tokenizer_config.get("tokenizer_class") or "")
    if cls.startswith("MBart50"):
        return True
    if cls.startswith("Nllb"):
        return not f.tokenizer_config.get("legacy_behaviour")
    if cls.startswith("MBart") or not isinstance(tokenizer, FastTokenizer):
        return f.family != "mbart"
    template = template_order(tokenizer)
    return f.family != "mbart" if template is None else template


def template_order(tokenizer: FastTokenizer) -> bool | None:
    """Whether tokenizer.json's single-sequence template puts a special token before the text; None without one."""
    post = json.loads(tokenizer.backend.to_str()).get("post_processor") or {}
    single = post.get("single") if isinstance(post, dict) else None
    if not isinstance(single, list) or not single:
        return None
    return isinstance(single[0], dict) and "SpecialToken" in single[0]


def framing(
    f: HFBartFolder, tokenizer: Tokenizer, languages: tuple[str | None, str | None]
) -> tuple[Framing, tuple[str, str], int, int | None, tuple[str, str]]:
    """(the source / target framing, the language pair, the decoder's start id, the forced first id, where each
    language came from)."""
    codes = f.languages(tokenizer)
    if not codes and f.family != "bart":
        example = {"mbart": "en_XX", "nllb": "eng_Latn"}.get(f.family, "__en__")
        raise CheckpointError(
            f"{tokenizer.path}: has no language codes (tokens like {example}), which a {f.family} model reads and "
            "writes; save the tokenizer with its languages (NllbTokenizer: extra_special_tokens=FAIRSEQ_LANGUAGE_CODES)"
        )
    names = {i: code for code, i in codes.items()}
    src_default = (f.tokenizer_config.get("src_lang"), f"{TOKENIZER_CONFIG} src_lang")
    src, src_from = pick_language(f, codes, languages[0], src_default, "--source-language")
    tgt, tgt_from = pick_language(f, codes, languages[1], target_default(f, names), "--target-language")
    ids = tokenizer.special_ids()
    bos, eos = ids["bos_id"], ids["eos_id"]
    start = f.setting("decoder_start_token_id", f.config.get("bos_token_id", bos) if f.model_type == "mbart" else eos)
    if not isinstance(start, int) or isinstance(start, bool):
        raise CheckpointError(f"{f.path(CONFIG)}: field decoder_start_token_id must be one token id, got {start!r}")
    where = (src_from, tgt_from)
    forced_setting = f.setting("forced_bos_token_id")
    if f.family == "bart":
        forced = forced_setting if isinstance(forced_setting, int) and not isinstance(forced_setting, bool) else None
        return Framing((bos,), (eos,), () if forced is None else (forced,)), (src, tgt), start, forced, where
    first = code_first(f, tokenizer)
    prefix, suffix = ((codes[src],), (eos,)) if first else ((), (eos, codes[src]))
    if f.family == "mbart" and start in names:  # mbart-large-cc25 / en-ro: the decoder starts from the language code
        return Framing(prefix, suffix), (src, tgt), codes[tgt], None, where
    return Framing(prefix, suffix, (codes[tgt],)), (src, tgt), start, codes[tgt], where


def state_from_bart(f: HFBartFolder, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Core parameter name -> tensor (aliases included); CheckpointError for missing, unknown or misshapen tensors."""
    shared, head = embeddings(f)
    state = {"src_embed.weight": shared, "tgt_embed.weight": shared, "output.weight": head}
    if cfg.output_bias:
        state["output.bias"] = f.tensors[BIAS].reshape(-1)
    used = {SHARED, ENC_EMB, DEC_EMB, HEAD, BIAS, *IGNORED}
    what = f"{f.model_type} model of {cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers"
    return mapped_state(f, cfg, bart_names(cfg), state, used, what)


def card_text(
    *,
    name: str,
    f: HFBartFolder,
    model: Transformer,
    tokenizer: FastTokenizer | M2M100VocabTokenizer,
    languages: tuple[str, str],
    chosen_from: tuple[str, str],
    command: str,
) -> str:
    """The checkpoint's card.md: which family, its size, where it came from and what the conversion did."""
    cfg = model.config
    family = FAMILY_NAMES[f.family]
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
    around = tokenizer.framing
    framed = " ".join(f"`{p}`" for p in [*tokenizer.pieces(around.prefix), "…", *tokenizer.pieces(around.suffix)])
    version = f.config.get("transformers_version") or "not recorded"
    layers = f"{cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers"
    size = f"{model.n_parameters():,} parameters; {layers}, d_model {cfg.d_model}"
    return f"""# {name}: imported from a Hugging Face {family} folder

Converted from the local folder `{f.folder.resolve()}` (written by transformers {version}). All credit for the
model goes to its authors; this checkpoint only converts it so the lab can show its attention.

## Licence

licence: {f.licence}

Keep the original folder's licence and credits with this checkpoint.

## Model

* family: {family} (`model_type` {f.model_type!r}); {languages[0]} → {languages[1]} (the source language from
  {chosen_from[0]}, the target language from {chosen_from[1]}).
* size: {size}, {cfg.n_heads} heads,
  FFN {cfg.d_ff} ({cfg.activation}), vocabulary {cfg.src_vocab_size:,}.
* {norms}; positions: {positions}; embeddings {"scaled by sqrt(d_model)" if cfg.scale_embedding else "not scaled"};
  output bias {"`final_logits_bias`" if cfg.output_bias else "none"}.
* a source is read as {framed} (its pieces at …); the decoder starts from {start}{forced}.

## Conversion

```
{command or "core.importers.hf_bart.convert (no command line)"}
```

`core/importers/hf_bart.py` read `{CONFIG}` and `{WEIGHTS}` (safetensors; a pickled file is never opened) and mapped
every tensor by name. {generation_text(f, cfg, tokenizer.piece)}
Beam search runs as transformers' does (`num_beams` hypotheses live, a pool of finished ones), so greedy and beam
outputs are `generate`'s. `config.json` records the source under `imported_from`.
"""


def convert(
    folder: str | Path,
    out: str | Path,
    *,
    dtype: torch.dtype | None = None,
    languages: tuple[str | None, str | None] = (None, None),
    command: str = "",
    progress: Progress | None = None,
) -> Path:
    """Read ``folder``, convert it and write the checkpoint folder ``out``. Returns ``out``. progress: told at each
    step (``core.progress.ImportSteps``), ending at 1.0 when the checkpoint is written."""
    steps = ImportSteps(progress)
    f = read_bart_folder(folder, steps.reading)
    dtype = dtype or folder_dtype(f.tensors)  # the folder's own unless asked
    out = Path(out)
    with tempfile.TemporaryDirectory() as scratch:
        files = f.tokenizer_files(Path(scratch))
        plain = f.tokenizer(files)
        frame, (src, tgt), start, forced, chosen_from = framing(f, plain, languages)
        tokenizer = f.tokenizer(files, frame)
        cfg = config_from_bart(f, tokenizer=tokenizer, start_id=start, forced_bos_id=forced)
        model = assign_weights(empty_model(cfg), state_from_bart(f, cfg), f.path(WEIGHTS)).eval()  # no copy
        names = {name: name for name in files}
        if isinstance(tokenizer, FastTokenizer):
            spec = tokenizer.spec(file=next(iter(names)))
        else:
            assert isinstance(tokenizer, M2M100VocabTokenizer)
            spec = tokenizer.spec(model="sentencepiece.bpe.model", vocab="vocab.json")
        origin = provenance(
            f,
            FORMAT,
            command,
            steps.digest,
            family=f.family,
            source_language_from=chosen_from[0],
            target_language_from=chosen_from[1],
        )
        meta = imported_meta(out, (src, tgt), dtype, spec, origin)
        card = card_text(
            name=out.name,
            f=f,
            model=model,
            tokenizer=tokenizer,
            languages=(src, tgt),
            chosen_from=chosen_from,
            command=command,
        )
        steps.writing(out)
        return steps.done(save_with_files(model, files, out, card=card, meta=meta, dtype=dtype))
