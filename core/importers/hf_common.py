"""What every family's Hugging Face importer shares: mapping the file's tensors onto core's parameter names with
every check (missing, unknown, misshapen), and the provenance record a checkpoint keeps under ``imported_from``."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import torch

from ..checkpoint import CheckpointMeta
from ..config import ModelConfig
from ..errors import CheckpointError
from ..progress import Progress
from ..weights import parameter_shapes
from .hf_folder import CONFIG, WEIGHTS


class HFWeights(Protocol):
    """A read folder (``HFMarianFolder``, ``HFT5Folder``, ...): its config, tensors, licence and paths."""

    @property
    def folder(self) -> Path: ...

    @property
    def config(self) -> dict[str, Any]: ...

    @property
    def tensors(self) -> dict[str, torch.Tensor]: ...

    @property
    def licence(self) -> str: ...

    def path(self, name: str) -> Path: ...


def mapped_state(
    f: HFWeights,
    cfg: ModelConfig,
    names: Mapping[str, str],
    state: dict[str, torch.Tensor],
    used: set[str],
    what: str,
) -> dict[str, torch.Tensor]:
    """``state`` (the embeddings and head the caller resolved) plus every tensor ``names`` maps (core name -> the
    file's name); CheckpointError naming the first tensor missing, any the model does not have (outside ``used``,
    the names the caller read or knows to ignore), or one whose shape ``cfg`` does not imply. what: the model the
    config describes, for the messages (e.g. "MarianMTModel of 2+2 layers")."""
    weights = f.path(WEIGHTS)
    used = set(used)
    for ours, theirs in names.items():
        if theirs not in f.tensors:
            raise CheckpointError(f"{weights}: tensor {theirs} is missing ({CONFIG} says a {what})")
        state[ours] = f.tensors[theirs]
        used.add(theirs)
    unknown = sorted(set(f.tensors) - used)
    if unknown:
        raise CheckpointError(
            f"{weights}: tensors a {what} does not have: {unknown[:6]}{'...' if len(unknown) > 6 else ''}"
        )
    for name, shape in parameter_shapes(cfg).items():  # nothing allocated
        if name in state and tuple(state[name].shape) != shape:
            raise CheckpointError(
                f"{weights}: tensor {names.get(name, name)} has shape {tuple(state[name].shape)}, "
                f"{CONFIG} implies {shape}"
            )
    return state


def sha256(path: Path, progress: Progress | None = None) -> str:
    """The SHA-256 of the file at ``path`` (hex), read in 1 MiB blocks; progress: told every 64 MiB and at the end."""
    digest, size, done = hashlib.sha256(), max(path.stat().st_size, 1), 0
    with path.open("rb") as fh:
        for n, block in enumerate(iter(lambda: fh.read(1 << 20), b""), 1):
            digest.update(block)
            done += len(block)
            if progress is not None and n % 64 == 0 and done < size:
                progress(done / size, f"Digest of {path.name}: {done >> 20:,} of {size >> 20:,} MiB")
    if progress is not None:
        progress(1.0, f"Digest of {path.name}: done")
    return digest.hexdigest()


def provenance(f: HFWeights, fmt: str, command: str, progress: Progress | None = None, **more: str) -> dict[str, Any]:
    """What a checkpoint records under ``imported_from``: the format, the folder, its licence, the weights' SHA-256,
    the transformers version that wrote it, the command; ``more`` adds fields (e.g. the family). progress: the
    digest's."""
    return {
        "format": fmt,
        **more,
        "folder": str(f.folder.resolve()),
        "licence": f.licence,
        "weights_sha256": sha256(f.path(WEIGHTS), progress),
        "transformers_version": f.config.get("transformers_version"),
        "command": command,
    }


def imported_meta(
    out: Path, languages: tuple[str, str], dtype: torch.dtype, tokenizer: dict[str, Any], origin: dict[str, Any]
) -> CheckpointMeta:
    """The checkpoint's meta: named after ``out``, its languages and dtype, the tokenizer's spec and ``origin`` (the
    ``provenance`` record) under ``imported_from``."""
    return CheckpointMeta(
        name=out.name,
        source_language=languages[0],
        target_language=languages[1],
        dtype=str(dtype).replace("torch.", ""),
        extra={"tokenizer": tokenizer, "imported_from": origin},
    )
