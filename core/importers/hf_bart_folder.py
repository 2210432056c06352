"""Read a local Hugging Face BART / mBART / M2M100 / NLLB folder (what ``save_pretrained`` of the model and its
tokenizer write) and check every file before anything is converted. Nothing here imports transformers, and nothing
is unpickled.

    config.json              BartConfig / MBartConfig / M2M100Config (model_type 'bart', 'mbart', 'm2m_100')
    model.safetensors        the weights (pytorch_model.bin is refused: it is a pickle)
    tokenizer.json           BART, mBART, NLLB: the tokenizer transformers runs (read with the tokenizers library);
                             a BART folder may have vocab.json + merges.txt instead
    vocab.json + sentencepiece.bpe.model     M2M100 (tokenizer_class M2M100Tokenizer)
    tokenizer_config.json    tokenizer_class (NllbTokenizer makes an m2m_100 folder NLLB), src_lang / tgt_lang
    generation_config.json   decoder_start_token_id, forced_bos_token_id (optional)

Every problem is a CheckpointError naming the file and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError
from ..hf_tokenizers import FastTokenizer, Framing, M2M100VocabTokenizer, byte_level_bpe
from ..progress import Progress
from ..tokenizer import Tokenizer, read_vocab
from .hf_folder import CONFIG, GENERATION_CONFIG, TOKENIZER_CONFIG, find_licence, read_json, read_weights

TOKENIZER_JSON, VOCAB, MERGES, SPM = "tokenizer.json", "vocab.json", "merges.txt", "sentencepiece.bpe.model"
ARCHITECTURES = {
    "bart": "BartForConditionalGeneration",
    "mbart": "MBartForConditionalGeneration",
    "m2m_100": "M2M100ForConditionalGeneration",
}
SPECIALS = {"bos": "<s>", "pad": "<pad>", "eos": "</s>", "unk": "<unk>"}  # every family's pieces
LANGUAGE_CODE = {  # what a language token of each tokenizer looks like
    "mbart": re.compile(r"[a-z]{2}_[A-Z]{2}"),  # en_XX, de_DE
    "nllb": re.compile(r"[a-z]{3}_[A-Z][a-z]{3}"),  # eng_Latn
}


@dataclass(frozen=True)
class HFBartFolder:
    """The checked contents of a Hugging Face BART, mBART, M2M100 or NLLB folder."""

    folder: Path
    model_type: str  # 'bart', 'mbart' or 'm2m_100'
    config: dict[str, Any]
    tensors: dict[str, torch.Tensor]  # the file's dtypes, names as in the file
    tokenizer_config: dict[str, Any]
    generation_config: dict[str, Any]  # {} when the folder has none
    licence: str

    def path(self, name: str) -> Path:
        return self.folder / name

    @property
    def family(self) -> str:
        """'bart', 'mbart', 'm2m100' or 'nllb' (an m2m_100 folder whose tokenizer is NllbTokenizer)."""
        if self.model_type == "m2m_100":
            return "nllb" if str(self.tokenizer_config.get("tokenizer_class", "")).startswith("Nllb") else "m2m100"
        return self.model_type

    def setting(self, name: str, default: Any = None) -> Any:
        """A generation setting: generation_config.json's, else config.json's, else ``default``."""
        value, _ = self.setting_from(name)
        return default if value is None else value

    def setting_from(self, name: str) -> tuple[Any, str]:
        """(a generation setting, the file it is in): generation_config.json's, else config.json's; (None, "")."""
        for source, file in ((self.generation_config, GENERATION_CONFIG), (self.config, CONFIG)):
            if source.get(name) is not None:
                return source[name], file
        return None, ""

    def tokenizer_files(self, scratch: Path) -> dict[str, Path]:
        """The files the checkpoint keeps (name in the checkpoint -> file here); a BART folder with only
        vocab.json + merges.txt gets a tokenizer.json built from them, written into the folder ``scratch``."""
        if self.family == "m2m100":
            return {SPM: self.path(SPM), VOCAB: self.path(VOCAB)}
        if self.path(TOKENIZER_JSON).is_file():
            return {TOKENIZER_JSON: self.path(TOKENIZER_JSON)}
        built = scratch / TOKENIZER_JSON
        byte_level_bpe(self.path(VOCAB), self.path(MERGES), [*SPECIALS.values(), "<mask>"]).save(str(built))
        return {TOKENIZER_JSON: built}

    def tokenizer(self, files: dict[str, Path], framing: Framing | None = None) -> Tokenizer:
        """The folder's tokenizer read from ``files`` (``tokenizer_files``), with ``framing`` (None: none)."""
        framing = framing or Framing()
        if self.family == "m2m100":
            try:
                vocab = read_vocab(files[VOCAB])
                languages = str(self.tokenizer_config.get("language_codes", "m2m100"))
                return M2M100VocabTokenizer(files[SPM], vocab, languages, framing)
            except ValueError as exc:
                raise CheckpointError(f"{self.path(VOCAB)}: {exc}") from None
        return FastTokenizer.from_file(files[TOKENIZER_JSON], framing, SPECIALS)

    def languages(self, tokenizer: Tokenizer) -> dict[str, int]:
        """The language codes the tokenizer has -> their ids ({} for BART: it has none)."""
        if isinstance(tokenizer, M2M100VocabTokenizer):
            return {token.strip("_"): i for token, i in tokenizer.language_ids.items()}
        pattern = LANGUAGE_CODE.get(self.family)
        if pattern is None or not isinstance(tokenizer, FastTokenizer):
            return {}
        added = tokenizer.backend.get_added_tokens_decoder()
        return {t.content: int(i) for i, t in added.items() if pattern.fullmatch(t.content)}


def read_bart_folder(folder: str | Path, progress: Progress | None = None) -> HFBartFolder:
    """Read and check a Hugging Face BART / mBART / M2M100 / NLLB folder (see the module docstring); progress: per
    tensor read."""
    folder = Path(folder)
    config = read_json(folder / CONFIG, required=True)
    model_type = config.get("model_type")
    if model_type not in ARCHITECTURES:
        raise CheckpointError(
            f"{folder / CONFIG}: model_type is {model_type!r}, not BART ('bart'), mBART ('mbart') or M2M100 / NLLB "
            "('m2m_100')"
        )
    architectures = config.get("architectures")
    if architectures is not None and ARCHITECTURES[model_type] not in (architectures or []):
        raise CheckpointError(
            f"{folder / CONFIG}: architectures {architectures!r} — only {ARCHITECTURES[model_type]} (the "
            "encoder-decoder model with its language-model head) opens here"
        )
    tokenizer_config = read_json(folder / TOKENIZER_CONFIG, required=False)
    f = HFBartFolder(
        folder=folder,
        model_type=str(model_type),
        config=config,
        tensors={},
        tokenizer_config=tokenizer_config,
        generation_config=read_json(folder / GENERATION_CONFIG, required=False),
        licence=find_licence(folder, config),
    )
    if f.family == "m2m100":
        needed = [SPM, VOCAB]
    elif f.family == "bart" and not (folder / TOKENIZER_JSON).is_file():
        needed = [VOCAB, MERGES]
    else:
        needed = [TOKENIZER_JSON]
    for name in needed:
        if not (folder / name).is_file():
            raise CheckpointError(
                f"{folder / name}: missing — a {f.family} folder's tokenizer is {' + '.join(needed)} (save it with "
                "AutoTokenizer.from_pretrained(folder).save_pretrained(folder))"
            )
    return HFBartFolder(**{**f.__dict__, "tensors": read_weights(folder, progress)})
