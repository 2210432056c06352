"""Read a local Hugging Face Marian folder (what ``MarianMTModel.save_pretrained`` and ``MarianTokenizer`` write)
and check every file before anything is converted. Nothing here imports transformers, and nothing is unpickled.

    config.json              MarianConfig (model_type 'marian')
    model.safetensors        the weights (pytorch_model.bin is refused: it is a pickle)
    source.spm, target.spm   SentencePiece models for source and target text
    vocab.json               the joint piece -> id map both sides share
    tokenizer_config.json    special pieces, languages (optional)
    generation_config.json   generation settings (optional): bad_words_ids / suppress_tokens are kept
    README.md, LICENSE       the licence, when the folder states one (optional)

Every problem is a CheckpointError naming the file and the field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import sentencepiece as spm
import torch

from ..errors import CheckpointError
from ..progress import Progress
from ..tokenizer import read_vocab
from ..weights import read_safetensors

CONFIG, WEIGHTS, SOURCE_SPM, TARGET_SPM, VOCAB = (
    "config.json",
    "model.safetensors",
    "source.spm",
    "target.spm",
    "vocab.json",
)
TOKENIZER_CONFIG, GENERATION_CONFIG = "tokenizer_config.json", "generation_config.json"
PICKLES = ("pytorch_model.bin", "model.ckpt", "pytorch_model.bin.index.json")
OTHER_WEIGHTS = ("tf_model.h5", "flax_model.msgpack", "model.safetensors.index.json")
LICENCE_FILES = ("LICENSE", "LICENSE.txt", "LICENSE.md", "LICENCE", "LICENCE.txt", "COPYING")


class HFFolder(Protocol):
    """What every family's folder reader gives (``HFMarianFolder`` is one): its path, config.json and
    generation_config.json ({} when absent)."""

    @property
    def folder(self) -> Path: ...

    @property
    def config(self) -> dict[str, Any]: ...

    @property
    def generation_config(self) -> dict[str, Any]: ...

    def path(self, name: str) -> Path: ...


@dataclass(frozen=True)
class HFMarianFolder:
    """The checked contents of a Hugging Face Marian folder."""

    folder: Path
    config: dict[str, Any]
    tensors: dict[str, torch.Tensor]  # the file's dtypes, names as in the file
    tokenizer_config: dict[str, Any]
    generation_config: dict[str, Any]  # {} when the folder has none
    vocab: dict[str, int]
    licence: str  # what the folder says, or "not stated in the folder"

    def path(self, name: str) -> Path:
        return self.folder / name


def read_json(path: Path, *, required: bool) -> dict[str, Any]:
    """A JSON object from ``path`` ({} when it is optional and absent)."""
    if not path.is_file():
        if required:
            raise CheckpointError(f"{path}: missing — a Hugging Face Marian folder has {path.name}")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: must hold a JSON object, got {type(data).__name__}")
    return data


def read_weights(folder: Path, progress: Progress | None = None) -> dict[str, torch.Tensor]:
    """The tensors of ``model.safetensors`` in the file's own dtypes (float32, float16, bfloat16); CheckpointError
    for pickles, other formats, bad tensors. progress: told after each tensor is checked."""
    path = folder / WEIGHTS
    if not path.is_file():
        pickles = [name for name in PICKLES if (folder / name).exists()]
        if pickles:
            raise CheckpointError(
                f"{folder / pickles[0]}: refused — it is a Python pickle, and unpickling a file can run any code "
                f"it holds, so this lab never opens one. Convert it to {WEIGHTS} where you trust the file: "
                "AutoModelForSeq2SeqLM.from_pretrained(folder).save_pretrained(folder, safe_serialization=True)"
            )
        others = [name for name in OTHER_WEIGHTS if (folder / name).exists()]
        if others:
            raise CheckpointError(
                f"{folder / others[0]}: not supported — the weights must be one {WEIGHTS} file "
                "(save_pretrained(folder, safe_serialization=True, max_shard_size='10GB'))"
            )
        raise CheckpointError(f"{path}: missing — a Hugging Face folder has its weights in {WEIGHTS}")
    # each tensor checked one at a time, then the file mapped: a tensor is read when the conversion uses it (and
    # cast to the model's float32 only as it is assigned: a float16 folder is never held twice in float32)
    return read_safetensors(path, progress)


def folder_dtype(tensors: dict[str, torch.Tensor]) -> torch.dtype:
    """The floating dtype most of the folder's values are stored in: what its checkpoint keeps unless asked
    otherwise (a float16 or bfloat16 folder stays so: half the disk of float32)."""
    sizes: dict[torch.dtype, int] = {}
    for tensor in tensors.values():
        if tensor.is_floating_point():
            sizes[tensor.dtype] = sizes.get(tensor.dtype, 0) + tensor.numel()
    return max(sizes, key=lambda dtype: sizes[dtype]) if sizes else torch.float32


def find_licence(folder: Path, config: dict[str, Any]) -> str:
    """The licence the folder states: config.json's 'license', README.md's front matter, or a LICENSE file."""
    for key in ("license", "licence"):
        if isinstance(config.get(key), str) and config[key].strip():
            return f"{config[key].strip()} ({CONFIG} '{key}')"
    readme = folder / "README.md"
    if readme.is_file():
        text = readme.read_text(encoding="utf-8", errors="replace")
        front = re.match(r"---\s*\n(.*?)\n---", text, re.S)
        if front:
            found = re.search(r"^licen[sc]e:[ \t]*(.*)$((?:\n[ \t]*-[ \t].*)*)", front.group(1), re.M)
            if found:
                values = [found.group(1).strip()] + [v.strip(" \t-") for v in found.group(2).splitlines()]
                named = ", ".join(v.strip("'\"") for v in values if v.strip("'\""))
                if named:
                    return f"{named} (README.md front matter 'license')"
    for name in LICENCE_FILES:
        if (folder / name).is_file():
            first = next(
                (line.strip() for line in (folder / name).read_text(errors="replace").splitlines() if line.strip()), ""
            )
            return f"see the folder's {name} file (it begins: {first[:80]!r})"
    return "not stated in the folder"


def read_folder(folder: str | Path, progress: Progress | None = None) -> HFMarianFolder:
    """Read and check a Hugging Face Marian folder (see the module docstring); progress: per tensor read."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder — pass the folder that holds {CONFIG} and {WEIGHTS}")
    config = read_json(folder / CONFIG, required=True)
    model_type = config.get("model_type")
    if model_type != "marian":
        raise CheckpointError(
            f"{folder / CONFIG}: model_type is {model_type!r}; only Marian translation models ('marian') are supported"
        )
    architectures = config.get("architectures")
    if architectures is not None and "MarianMTModel" not in (architectures or []):
        raise CheckpointError(
            f"{folder / CONFIG}: architectures {architectures!r} — only MarianMTModel (encoder-decoder translation) "
            "is supported"
        )
    tensors = read_weights(folder, progress)
    tokenizer_config = read_json(folder / TOKENIZER_CONFIG, required=False)
    for name in (SOURCE_SPM, TARGET_SPM, VOCAB):
        if not (folder / name).is_file():
            raise CheckpointError(
                f"{folder / name}: missing — a Marian folder's tokenizer is {SOURCE_SPM}, {TARGET_SPM} and {VOCAB}"
            )
    for name in (SOURCE_SPM, TARGET_SPM):
        try:
            spm.SentencePieceProcessor(model_file=str(folder / name))
        except Exception as exc:  # sentencepiece raises RuntimeError/OSError with C++ text
            raise CheckpointError(f"{folder / name}: not a readable SentencePiece model ({exc})") from None
    try:
        vocab = read_vocab(folder / VOCAB)
    except ValueError as exc:
        raise CheckpointError(f"{folder / VOCAB}: {exc}") from None
    return HFMarianFolder(
        folder=folder,
        config=config,
        tensors=tensors,
        tokenizer_config=tokenizer_config,
        generation_config=read_json(folder / GENERATION_CONFIG, required=False),
        vocab=vocab,
        licence=find_licence(folder, config),
    )
