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
from .hf_folder import CONFIG, WEIGHTS
from .staging import save_with_files

FORMAT = "huggingface-bart-family"
FAMILY_NAMES = {"bart": "BART", "mbart": "mBART", "m2m100": "M2M100", "nllb": "NLLB (dense, M2M100 architecture)"}


def pick_language(f: HFBartFolder, codes: dict[str, int], asked: str | None, default: str | None, flag: str) -> str:
    """The language code ``asked`` (a flag), else ``default`` (the folder's); InputError naming the codes there are."""
    chosen = asked or default
    if not codes:
        return chosen or ("src" if flag == "--source-language" else "tgt")
    if chosen is None:
        raise InputError(f"{f.folder}: name the language with {flag}; this tokenizer has: {', '.join(codes)}")
    if chosen not in codes:
        raise InputError(
            f"{flag} {chosen!r}: not a language code of this {f.family} tokenizer; it has: {', '.join(codes)}"
        )
    return chosen


def framing(
    f: HFBartFolder, tokenizer: Tokenizer, languages: tuple[str | None, str | None]
) -> tuple[Framing, tuple[str, str], int, int | None]:
    """(the source / target framing, the language pair, the decoder's start id, the forced first id)."""
    codes = f.languages(tokenizer)
    names = {i: code for code, i in codes.items()}
    forced_setting = f.setting("forced_bos_token_id")
    src = pick_language(f, codes, languages[0], f.tokenizer_config.get("src_lang"), "--source-language")
    default_tgt = names.get(forced_setting) if forced_setting is not None else f.tokenizer_config.get("tgt_lang")
    tgt = pick_language(f, codes, languages[1], default_tgt, "--target-language")
    ids = tokenizer.special_ids()
    bos, eos = ids["bos_id"], ids["eos_id"]
    start = f.setting("decoder_start_token_id", f.config.get("bos_token_id", bos) if f.model_type == "mbart" else eos)
    if not isinstance(start, int) or isinstance(start, bool):
        raise CheckpointError(f"{f.path(CONFIG)}: field decoder_start_token_id must be one token id, got {start!r}")
    if f.family == "bart":
        forced = forced_setting if isinstance(forced_setting, int) and not isinstance(forced_setting, bool) else None
        return Framing((bos,), (eos,), () if forced is None else (forced,)), (src, tgt), start, forced
    if f.family == "mbart" and start in names:  # mbart-large-cc25 / en-ro: the decoder starts from the language code
        return Framing((), (eos, codes[src])), (src, tgt), codes[tgt], None
    if f.family == "mbart" or (f.family == "nllb" and f.tokenizer_config.get("legacy_behaviour")):
        source = Framing((), (eos, codes[src]), (codes[tgt],))
    else:  # NLLB, M2M100: the language code first
        source = Framing((codes[src],), (eos,), (codes[tgt],))
    return source, (src, tgt), start, codes[tgt]


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

* family: {family} (`model_type` {f.model_type!r}); {languages[0]} → {languages[1]}.
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
    dtype: torch.dtype = torch.float32,
    languages: tuple[str | None, str | None] = (None, None),
    command: str = "",
    progress: Progress | None = None,
) -> Path:
    """Read ``folder``, convert it and write the checkpoint folder ``out``. Returns ``out``. progress: told at each
    step (``core.progress.ImportSteps``), ending at 1.0 when the checkpoint is written."""
    steps = ImportSteps(progress)
    f = read_bart_folder(folder, steps.reading)
    out = Path(out)
    with tempfile.TemporaryDirectory() as scratch:
        files = f.tokenizer_files(Path(scratch))
        plain = f.tokenizer(files)
        frame, (src, tgt), start, forced = framing(f, plain, languages)
        tokenizer = f.tokenizer(files, frame)
        cfg = config_from_bart(
            f, unk_id=tokenizer.special_ids()["unk_id"], start_id=start, forced_bos_id=forced, rows=tokenizer.vocab_size
        )
        model = assign_weights(empty_model(cfg), state_from_bart(f, cfg), f.path(WEIGHTS)).eval()  # no copy
        names = {name: name for name in files}
        if isinstance(tokenizer, FastTokenizer):
            spec = tokenizer.spec(file=next(iter(names)))
        else:
            assert isinstance(tokenizer, M2M100VocabTokenizer)
            spec = tokenizer.spec(model="sentencepiece.bpe.model", vocab="vocab.json")
        origin = provenance(f, FORMAT, command, steps.digest, family=f.family)
        meta = imported_meta(out, (src, tgt), dtype, spec, origin)
        card = card_text(name=out.name, f=f, model=model, tokenizer=tokenizer, languages=(src, tgt), command=command)
        steps.writing(out)
        return steps.done(save_with_files(model, files, out, card=card, meta=meta, dtype=dtype))
