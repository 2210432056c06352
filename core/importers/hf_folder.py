"""The files of a local Hugging Face model folder that every family reads the same way, each checked before anything
is converted. Nothing here imports transformers, and nothing is unpickled.

    config.json              the model's config (its model_type picks the family: ``hf_families``)
    model.safetensors        the weights (pytorch_model.bin is refused: it is a pickle)
    tokenizer_config.json    special pieces, languages, the tokenizer's class (optional)
    generation_config.json   generation settings (optional): what transformers' generate reads first
    README.md, LICENSE       the licence, when the folder states one (optional)

The tokenizer's own files differ by family (each family's entry checks them: ``hf_marian``, ``hf_t5``, ``hf_bart``).
Every problem is a CheckpointError naming the file and the field.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError
from ..storage.progress import Progress
from ..storage.weights import read_safetensors
from ..text.tokenizer import read_vocab

CONFIG, WEIGHTS, TOKENIZER_CONFIG, GENERATION_CONFIG = (
    "config.json",
    "model.safetensors",
    "tokenizer_config.json",
    "generation_config.json",
)
TOKENIZER_JSON, VOCAB = "tokenizer.json", "vocab.json"  # the tokenizers library's file; a piece -> id map
PICKLES = ("pytorch_model.bin", "model.ckpt", "pytorch_model.bin.index.json")
OTHER_WEIGHTS = ("tf_model.h5", "flax_model.msgpack", "model.safetensors.index.json")
LICENCE_FILES = ("LICENSE", "LICENSE.txt", "LICENSE.md", "LICENCE", "LICENCE.txt", "COPYING")


def read_json(path: Path, *, required: bool) -> dict[str, Any]:
    """A JSON object from ``path`` ({} when it is optional and absent)."""
    if not path.is_file():
        if required:
            raise CheckpointError(f"{path}: missing — a Hugging Face folder has {path.name}")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: must hold a JSON object, got {type(data).__name__}")
    return data


def read_vocab_file(path: Path) -> dict[str, int]:
    """A vocab.json piece -> id map; CheckpointError naming the file when it is not one."""
    try:
        return read_vocab(path)
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


SPECIAL_TOKENS_MAP = "special_tokens_map.json"


def read_tokenizer_config(folder: Path) -> dict[str, Any]:
    """tokenizer_config.json ({} when absent) as transformers 5 reads a folder: one written before transformers
    named its tokens there (no ``added_tokens_decoder``) takes its special tokens from special_tokens_map.json
    ('eos_token', 'unk_token', ...; an AddedToken written out read as its content). Its token lists are not read
    for T5's sentinel count: transformers 5 takes ``extra_ids`` (100 unless named) whatever the map lists."""
    config = read_json(folder / TOKENIZER_CONFIG, required=False)
    if "added_tokens_decoder" in config or not (folder / SPECIAL_TOKENS_MAP).is_file():
        return config
    special = read_json(folder / SPECIAL_TOKENS_MAP, required=False)

    def content(value: Any) -> Any:
        return value.get("content") if isinstance(value, dict) else value

    for key, value in special.items():
        if key.endswith("_token"):
            config[key] = content(value)
    return config


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
