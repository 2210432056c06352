"""Checkpoint folders: model.safetensors + config.json + tokenizer.model + card.md.

(A Marian vocabulary replaces tokenizer.model with source.spm + target.spm + vocab.json: ``open_tokenizer``.)

Loading never unpickles anything. Every problem names the file and what is wrong with it.
Writes go to a temporary folder, synced to disk, that is renamed into place: a crash never leaves half a
checkpoint, and one between the two renames of a replacement is undone by the next save or load.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..config import ModelConfig
from ..errors import CheckpointError, InputError
from ..text.hf_tokenizers import FAMILY_TOKENIZERS, open_family_tokenizer
from ..text.t5_tokenizer import T5_SENTENCEPIECE, T5Tokenizer
from ..text.tokenizer import MARIAN_VOCAB, MarianVocabTokenizer, Tokenizer, first_id_beyond, read_vocab
from ..transformer.model import Transformer
from .durable import fsync_path, fsync_tree
from .weights import assign_weights, empty_model, read_safetensors

WEIGHTS, CONFIG, TOKENIZER, CARD = "model.safetensors", "config.json", "tokenizer.model", "card.md"
TMP_SUFFIX = ".partial"  # a folder being written; never loaded, removed by the next save
FORMAT_VERSION = 1


@dataclass(frozen=True)
class CheckpointMeta:
    """What config.json says besides the model shape."""

    name: str
    source_language: str = "en"
    target_language: str = "de"
    dtype: str = "float32"
    extra: dict[str, Any] = field(default_factory=dict)


def save_checkpoint(
    model: Transformer,
    tokenizer_model: str | Path,
    directory: str | Path,
    *,
    card: str,
    meta: CheckpointMeta,
    dtype: torch.dtype = torch.float32,
    extras: Mapping[str, Callable[[Path], None]] | None = None,
) -> Path:
    """Write a checkpoint folder atomically. Tied weights are stored once. Returns the folder.
    extras: more files of the folder, {file name: a function writing that file at the path it is given}."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    aliases = model.tied_aliases()
    state = {
        k: v.detach().to("cpu", dtype=dtype if v.is_floating_point() else v.dtype).contiguous()
        for k, v in model.state_dict().items()
        if k not in aliases
    }
    recover(directory)
    _remove_stale_temporaries(directory)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=TMP_SUFFIX, dir=directory.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes 0700 folders; a checkpoint is meant to be shared
    try:
        save_file(state, str(tmp / WEIGHTS), metadata={"format": "pt", "core_format": str(FORMAT_VERSION)})
        config = {
            "format_version": FORMAT_VERSION,
            "model": model.config.to_dict(),
            "name": meta.name,
            "source_language": meta.source_language,
            "target_language": meta.target_language,
            "dtype": str(dtype).replace("torch.", ""),
            "tokenizer": TOKENIZER,
            **meta.extra,
        }
        (tmp / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
        shutil.copyfile(tokenizer_model, tmp / TOKENIZER)
        (tmp / CARD).write_text(card)
        for name, write in (extras or {}).items():
            write(tmp / name)
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        fsync_tree(tmp)  # the bytes are on disk before any rename makes them the checkpoint
        place(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return directory


def place(staging: Path, directory: Path) -> Path:
    """Rename the finished, synced ``staging`` folder to ``directory`` — the one swap every writer of a whole folder
    uses (checkpoints, multi-file tokenizers, exports). A folder already there is first renamed to '.NAME.old': a
    crash between the two renames leaves only that copy, which ``recover`` (run by every later save, load and
    listing) puts back."""
    recover(directory)
    check_output_folder(directory)
    parent = directory.parent
    if directory.exists():
        old = _old(directory)
        shutil.rmtree(old, ignore_errors=True)
        os.replace(directory, old)
        fsync_path(parent)
        os.replace(staging, directory)
        fsync_path(parent)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, directory)
        fsync_path(parent)
    return directory


def check_output_folder(directory: str | Path) -> None:
    """Refuse an output path that ``place`` must never swap away: the file system's root, the current folder or
    a folder holding it, a file, or a folder of files without a config.json (someone else's). Commands call it
    before their work as well; ``place`` calls it before every swap."""
    directory = Path(directory)
    hidden_sibling(directory, "")  # the root: InputError
    here = Path.cwd()
    if directory.resolve() in (here, *here.parents):
        what = "the current folder" if directory.resolve() == here else "a folder that holds the current folder"
        raise InputError(f"{directory}: is {what}, which cannot be replaced; choose another output path")
    if not directory.exists():
        return
    if not directory.is_dir():  # a file there is someone's: never swapped away
        raise InputError(f"{directory}: a file is there, not a folder; choose another output path")
    if not (directory / CONFIG).is_file() and any(directory.iterdir()):
        raise InputError(
            f"{directory}: a folder that holds files but no {CONFIG} is there (not a model this lab wrote); "
            "choose another output path"
        )


def hidden_sibling(directory: Path, suffix: str) -> Path:
    """'.NAME<suffix>' beside ``directory`` (made absolute first: "." or "x/.." have no name of their own)."""
    directory = Path(directory).resolve()
    if not directory.name:
        raise InputError(f"{directory}: the file system's root cannot be a checkpoint folder")
    return directory.with_name(f".{directory.name}{suffix}")


def _old(directory: Path) -> Path:
    return hidden_sibling(directory, ".old")


def _remove_stale_temporaries(directory: Path) -> None:
    """Half-written folders a crashed save left beside ``directory`` (never a finished checkpoint)."""
    for stale in directory.parent.glob(f".{directory.name}.*{TMP_SUFFIX}"):
        shutil.rmtree(stale, ignore_errors=True)


def recover(directory: str | Path) -> bool:
    """Undo a save that crashed mid-swap: when ``directory`` is gone but its ``.old`` copy is there, put the
    copy back. Returns whether it did. Runs before every save and load."""
    directory = Path(directory)
    old = _old(directory)
    if directory.exists() or not (old / CONFIG).is_file():
        return False
    os.replace(old, directory)
    fsync_path(directory.parent)
    return True


def read_config(directory: str | Path) -> dict[str, Any]:
    """Parse and check config.json of a checkpoint folder."""
    directory = Path(directory)
    recover(directory)
    if directory.exists() and not directory.is_dir():
        raise CheckpointError(
            f"{directory}: is a file, not a checkpoint folder — pass the folder that holds {CONFIG}, {WEIGHTS}, "
            f"{TOKENIZER} and {CARD}"
        )
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint folder {directory} does not exist")
    path = directory / CONFIG
    if not path.is_file():
        raise CheckpointError(
            f"{path}: missing — a checkpoint folder needs {CONFIG}, {WEIGHTS}, {TOKENIZER} and {CARD}"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc}); the file is truncated or corrupt") from None
    except RecursionError:
        raise CheckpointError(f"{path}: nested too deeply to be a checkpoint config") from None
    if not isinstance(data, dict) or "model" not in data:
        raise CheckpointError(f"{path}: has no 'model' section")
    try:
        ModelConfig.from_dict(data["model"])
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: invalid model config: {exc}") from None
    return data


def _tokenizer_file(directory: Path, name: Any, field: str) -> Path:
    """The file ``name`` that config.json's ``field`` names: a plain file name inside the checkpoint folder."""
    if not isinstance(name, str) or not name or Path(name).is_absolute() or Path(name).name != name:
        raise CheckpointError(
            f"{directory / CONFIG}: {field} must name a file inside the checkpoint folder (e.g. "
            f"'{TOKENIZER}'), got {name!r}"
        )
    path = directory / name
    if not path.is_file():
        raise CheckpointError(f"{path}: missing — the tokenizer's files must sit in the checkpoint folder")
    return path


def open_tokenizer(directory: str | Path, spec: Any = TOKENIZER) -> Tokenizer:
    """The tokenizer config.json's ``tokenizer`` names: a file name (one SentencePiece model, e.g.
    'tokenizer.model'), ``{"type": "marian-vocab", "source": ..., "target": ..., "vocab": ...}`` (a Marian
    vocabulary: ``MarianVocabTokenizer``) or ``{"type": "t5-sentencepiece", "model": ..., "extra_ids": ...,
    "source_prefix": ...}`` (``T5Tokenizer``). Every file must sit in the folder; CheckpointError names what is
    wrong."""
    directory = Path(directory)
    if not isinstance(spec, dict):
        return Tokenizer(_tokenizer_file(directory, spec, "'tokenizer'"))  # CheckpointError: not SentencePiece
    where = f"{directory / CONFIG}: 'tokenizer'"
    if spec.get("type") == T5_SENTENCEPIECE:  # T5's: one SentencePiece model, sentinels, a task prefix
        model = _tokenizer_file(directory, spec.get("model"), "'tokenizer.model'")
        try:
            return T5Tokenizer.from_spec(model, spec)
        except ValueError as exc:
            raise CheckpointError(f"{where}: {exc}") from None
    if spec.get("type") in FAMILY_TOKENIZERS:  # BART / mBART / NLLB / M2M100 (core.text.hf_tokenizers)
        try:
            return open_family_tokenizer(
                spec, lambda key: _tokenizer_file(directory, spec.get(key), f"'tokenizer.{key}'")
            )
        except ValueError as exc:
            raise CheckpointError(f"{where}: {exc}") from None
    if spec.get("type") != MARIAN_VOCAB:
        raise CheckpointError(
            f"{where} has type {spec.get('type')!r}; the kinds of tokenizer table are {MARIAN_VOCAB!r} and "
            f"{T5_SENTENCEPIECE!r}"
        )
    files = {
        key: _tokenizer_file(directory, spec.get(key), f"'tokenizer.{key}'") for key in ("source", "target", "vocab")
    }
    pieces = {}
    for key in ("unk_piece", "eos_piece", "pad_piece"):
        if not isinstance(spec.get(key), str) or not spec[key]:
            raise CheckpointError(f"{where}.{key} must be a piece (e.g. '<unk>'), got {spec.get(key)!r}")
        pieces[key] = spec[key]
    try:  # a file that is not SentencePiece: CheckpointError from the tokenizer, naming it
        return MarianVocabTokenizer(files["source"], files["target"], read_vocab(files["vocab"]), **pieces)
    except ValueError as exc:
        raise CheckpointError(f"{files['vocab']}: {exc}") from None


def load_checkpoint(
    directory: str | Path, device: str | torch.device = "cpu"
) -> tuple[Transformer, Tokenizer, dict[str, Any]]:
    """Load (model in eval mode, tokenizer, config dict). Raises CheckpointError naming the bad file."""
    directory = Path(directory)
    data = read_config(directory)
    config = ModelConfig.from_dict(data["model"])
    tokenizer = open_tokenizer(directory, data.get("tokenizer", TOKENIZER))
    # the file that sets the ids: the SentencePiece model, or a Marian vocabulary's piece -> id map
    tok_path = directory / data["tokenizer"]["vocab"] if isinstance(tokenizer, MarianVocabTokenizer) else tokenizer.path
    vocab = min(config.src_vocab_size, config.tgt_vocab_size)
    beyond = first_id_beyond(tokenizer, vocab)
    if beyond is not None:
        raise CheckpointError(
            f"{tok_path}: can give id {beyond} ({tokenizer.piece(beyond)!r}) but {CONFIG} says the model has "
            f"{vocab} embedding rows; the tokenizer does not belong to these weights"
        )
    for name, value in tokenizer.special_ids().items():
        if value >= 0 and name in ("eos_id", "unk_id") and value != getattr(config, name):
            raise CheckpointError(
                f"{tok_path}: its {name} is {value} but {CONFIG} says {getattr(config, name)}; "
                "the tokenizer does not belong to these weights"
            )
    if not (directory / CARD).is_file():
        raise CheckpointError(f"{directory / CARD}: missing — every checkpoint carries a card (data, licence, scores)")
    weights = directory / WEIGHTS
    if not weights.is_file():
        raise CheckpointError(f"{weights}: missing")
    state = read_safetensors(weights)  # each tensor checked one at a time; the file mapped, nothing read yet
    model = empty_model(config)  # no parameter allocated: they will be the file's
    expected = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    wanted = set(expected) - set(model.tied_aliases())
    missing, unexpected = sorted(wanted - set(state)), sorted(set(state) - wanted)
    if missing or unexpected:
        raise CheckpointError(
            f"{weights}: does not match {CONFIG}: missing tensors {missing[:5]}"
            f"{'...' if len(missing) > 5 else ''}, unexpected tensors {unexpected[:5]}"
        )
    for name in wanted:
        if tuple(state[name].shape) != expected[name]:
            raise CheckpointError(
                f"{weights}: tensor {name} has shape {tuple(state[name].shape)}, {CONFIG} implies {expected[name]}"
            )
    assign_weights(model, state, weights)  # the parameters are the file's pages: one copy of the weights
    model.to(device).eval()
    return model, tokenizer, data


def list_checkpoints(root: str | Path = "checkpoints") -> list[Path]:
    """Checkpoint folders directly under ``root`` (those with a config.json), sorted by name; one whose
    replacement crashed mid-swap is put back first (see ``recover``)."""
    root = Path(root)
    if not root.is_dir():
        return []
    for old in root.glob(".*.old"):
        try:
            recover(old.with_name(old.name[1 : -len(".old")]))
        except OSError:
            pass  # a read-only root: list what is there
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / CONFIG).is_file())


def default_checkpoint(root: str | Path = "checkpoints", wanted: str = "") -> str | None:
    """The checkpoint a user meets first: ``wanted`` (a folder name or path) if it is one under ``root``,
    else the one named in ``root/DEFAULT``, else the first by name; None when there is none."""
    root = Path(root)
    names = [p.name for p in list_checkpoints(root)]
    if not wanted:
        marker = root / "DEFAULT"
        wanted = marker.read_text(encoding="utf-8").strip() if marker.is_file() else ""
    wanted = Path(wanted).name if wanted else ""
    return wanted if wanted in names else (names[0] if names else None)


def folder_mb(directory: str | Path) -> float:
    """Megabytes (10^6 bytes) of every file under ``directory``: what a checkpoint costs on disk."""
    return sum(p.stat().st_size for p in Path(directory).rglob("*") if p.is_file()) / 1e6
