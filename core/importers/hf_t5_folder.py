"""Read a local Hugging Face T5 / Flan-T5 / mT5 folder (what ``T5ForConditionalGeneration.save_pretrained`` and
``T5Tokenizer`` write) and check every file before anything is converted. Nothing here imports transformers, and
nothing is unpickled.

    config.json              T5Config / MT5Config (model_type 't5' or 'mt5')
    model.safetensors        the weights (pytorch_model.bin is refused: it is a pickle)
    tokenizer.json           the tokenizer transformers runs (all transformers 5 writes for T5): read first, with the
                             tokenizers library, as AutoTokenizer prefers it
    spiece.model             else the SentencePiece model (ids: <pad> 0, </s> 1, <unk> 2)
    tokenizer_config.json    extra_ids (the <extra_id_N> sentinels above spiece.model's pieces; optional, default
                             100), the special tokens (eos_token, unk_token, pad_token)
    generation_config.json   generation settings (optional): decoder_start_token_id, bad_words_ids, ...
    README.md, LICENSE       the licence, when the folder states one (optional)

Every problem is a CheckpointError naming the file and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError
from ..hf_tokenizers import FastTokenizer, Framing
from ..progress import Progress
from ..t5_tokenizer import T5Tokenizer
from ..tokenizer import Tokenizer
from .hf_config import one_id
from .hf_folder import CONFIG, GENERATION_CONFIG, TOKENIZER_CONFIG, WEIGHTS, find_licence, read_json, read_weights

SPIECE, TOKENIZER_JSON = "spiece.model", "tokenizer.json"
SPECIAL_DEFAULTS = {"eos": "</s>", "unk": "<unk>", "pad": "<pad>"}  # T5Tokenizer's, when tokenizer_config names none
ARCHITECTURES = {"t5": "T5ForConditionalGeneration", "mt5": "MT5ForConditionalGeneration"}
DEFAULT_EXTRA_IDS = 100  # transformers' T5Tokenizer's


@dataclass(frozen=True)
class HFT5Folder:
    """The checked contents of a Hugging Face T5 or mT5 folder."""

    folder: Path
    model_type: str  # 't5' or 'mt5'
    config: dict[str, Any]
    tensors: dict[str, torch.Tensor]  # the file's dtypes, names as in the file
    tokenizer_config: dict[str, Any]
    generation_config: dict[str, Any]  # {} when the folder has none
    extra_ids: int
    licence: str  # what the folder says, or "not stated in the folder"
    tokenizer_file: str  # TOKENIZER_JSON when the folder has one, else SPIECE

    def path(self, name: str) -> Path:
        return self.folder / name

    def specials(self) -> dict[str, str]:
        """'eos' / 'unk' / 'pad' -> piece, as tokenizer_config.json names them (T5's defaults otherwise)."""
        found = {}
        for name, default in SPECIAL_DEFAULTS.items():
            value = self.tokenizer_config.get(f"{name}_token", default)
            value = value.get("content") if isinstance(value, dict) else value  # an AddedToken written out
            if not isinstance(value, str) or not value:
                raise CheckpointError(
                    f"{self.path(TOKENIZER_CONFIG)}: field {name}_token must be a piece, got {value!r}"
                )
            found[name] = value
        return found

    def tokenizer(self, source_prefix: str = "") -> Tokenizer:
        """The folder's tokenizer (tokenizer.json when it has one, else spiece.model), with a task prefix before
        source texts; a source is the text's pieces then ``</s>``."""
        if self.tokenizer_file == TOKENIZER_JSON:
            specials = self.specials()
            plain = FastTokenizer.from_file(self.path(TOKENIZER_JSON), Framing(), specials)
            framed = Framing((), (plain.eos_id,))
            return FastTokenizer(plain.backend, plain.path, framed, specials, source_prefix=source_prefix)
        return T5Tokenizer(self.path(SPIECE), extra_ids=self.extra_ids, source_prefix=source_prefix)


def extra_ids(folder: Path, tokenizer_config: dict[str, Any]) -> int:
    """tokenizer_config.json's ``extra_ids``, or the number of ``<extra_id_N>`` pieces it lists, else 100."""
    value = tokenizer_config.get("extra_ids")
    if value is None:
        listed = tokenizer_config.get("additional_special_tokens") or tokenizer_config.get("extra_special_tokens")
        sentinels = [t for t in listed or [] if isinstance(t, str) and t.startswith("<extra_id_")]
        value = len(sentinels) if sentinels else DEFAULT_EXTRA_IDS
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 10_000:
        raise CheckpointError(
            f"{folder / TOKENIZER_CONFIG}: field extra_ids must be a whole number from 0 to 10,000, got {value!r}"
        )
    return value


def read_t5_folder(folder: str | Path, progress: Progress | None = None) -> HFT5Folder:
    """Read and check a Hugging Face T5 / mT5 folder (see the module docstring); progress: per tensor read."""
    folder = Path(folder)
    if not (folder / CONFIG).is_file():
        raise CheckpointError(f"{folder / CONFIG}: missing — a Hugging Face T5 folder has {CONFIG} and {WEIGHTS}")
    config = read_json(folder / CONFIG, required=True)
    model_type = config.get("model_type")
    if model_type not in ARCHITECTURES:
        raise CheckpointError(f"{folder / CONFIG}: model_type is {model_type!r}, not a T5 ('t5') or mT5 ('mt5') model")
    architectures = config.get("architectures")
    if architectures is not None and ARCHITECTURES[model_type] not in (architectures or []):
        raise CheckpointError(
            f"{folder / CONFIG}: architectures {architectures!r} — only {ARCHITECTURES[model_type]} (the "
            "encoder-decoder model with its language-model head) opens here"
        )
    tensors = read_weights(folder, progress)
    tokenizer_config = read_json(folder / TOKENIZER_CONFIG, required=False)
    files = [name for name in (TOKENIZER_JSON, SPIECE) if (folder / name).is_file()]
    if not files:
        raise CheckpointError(
            f"{folder}: has no tokenizer — a T5 folder holds {TOKENIZER_JSON} (what transformers 5 writes) or "
            f"{SPIECE}; save it with AutoTokenizer.from_pretrained(original).save_pretrained(folder)"
        )
    result = HFT5Folder(
        folder=folder,
        model_type=model_type,
        config=config,
        tensors=tensors,
        tokenizer_config=tokenizer_config,
        generation_config=read_json(folder / GENERATION_CONFIG, required=False),
        extra_ids=extra_ids(folder, tokenizer_config),
        licence=find_licence(folder, config),
        tokenizer_file=files[0],
    )
    tokenizer = result.tokenizer()  # CheckpointError when the file is not a tokenizer
    specials = tokenizer.special_ids()
    for name, default in (("pad_token_id", 0), ("eos_token_id", 1)):
        wanted = one_id(result.generation_config.get(name, config.get(name, default)), name, folder / CONFIG)
        has = specials[name.replace("_token", "")]
        if has != wanted:
            raise CheckpointError(
                f"{folder / files[0]}: its {name.split('_')[0]} token has id {has}, but {CONFIG} says {name} "
                f"{wanted!r}; the tokenizer does not belong to these weights"
            )
    return result
