"""Write a folder whole: build it under a hidden name beside its destination, sync it, rename it into place.

``save_with_files`` is ``core.storage.checkpoint.save_checkpoint`` for checkpoints whose tokenizer is more than one
file (a Marian vocabulary: source.spm, target.spm, vocab.json); finished folders go into place with
``core.storage.checkpoint.place``, the swap every whole-folder writer shares.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import torch

from ..storage.checkpoint import TMP_SUFFIX, TOKENIZER, CheckpointMeta, hidden_sibling, place, save_checkpoint
from ..storage.durable import fsync_tree
from ..transformer.model import Transformer


def staging_folder(directory: Path, purpose: str) -> Path:
    """A hidden sibling of ``directory`` to build it in: '.NAME.PURPOSE.partial' (a later save of ``directory``
    removes one a crash left behind; listings skip hidden folders)."""
    staging = hidden_sibling(directory, f".{purpose}{TMP_SUFFIX}")
    shutil.rmtree(staging, ignore_errors=True)
    return staging


def save_with_files(
    model: Transformer,
    files: Mapping[str, Path],
    directory: str | Path,
    *,
    card: str,
    meta: CheckpointMeta,
    dtype: torch.dtype = torch.float32,
) -> Path:
    """A checkpoint folder whose tokenizer is ``files`` (name in the folder -> file to copy) instead of one
    tokenizer.model; ``meta.extra['tokenizer']`` says how to read them. Written whole: see the module docstring."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    first, *rest = files
    staging = staging_folder(directory, "files")
    try:
        save_checkpoint(model, files[first], staging, card=card, meta=meta, dtype=dtype)
        os.replace(staging / TOKENIZER, staging / first)
        for name in rest:
            shutil.copyfile(files[name], staging / name)
            os.chmod(staging / name, 0o644)
        fsync_tree(staging)
        return place(staging, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
