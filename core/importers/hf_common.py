"""What every family's Hugging Face import shares: reading config.json's fields (one ``field``, with the model
type's defaults), the generation settings transformers' generate reads (beam, rules, banned ids), mapping the file's
tensors onto core's parameter names with every check (missing, unknown, misshapen), and the provenance record a
checkpoint keeps under ``imported_from``."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..config import ModelConfig
from ..decoding.generation_rules import is_penalty
from ..errors import CheckpointError
from ..storage.checkpoint import CheckpointMeta
from ..storage.progress import Progress
from ..storage.weights import parameter_shapes
from ..text.tokenizer import first_id_beyond
from .hf_entry import HFFolder, Setup, Tensors
from .hf_folder import CONFIG, GENERATION_CONFIG, WEIGHTS

# how a field of the wrong kind is named in a refusal (any other kind: "a number")
WORDS: dict[Any, str] = {bool: "true or false", int: "a whole number", str: "text"}


def field(f: HFFolder, name: str, kind: type | tuple[type, ...]) -> Any:
    """config.json's ``name`` (transformers' default for the folder's model type when absent), checked to be a
    ``kind`` (never a bool for a number)."""
    value = f.config.get(name, f.defaults.get(name))
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        what = WORDS.get(kind, "a number")
        raise CheckpointError(f"{f.path(CONFIG)}: field {name} must be {what}, got {value!r}")
    return value


def one_id(value: Any, name: str, where: Path) -> int:
    """One token id of a config field (transformers writes some as one-element lists); CheckpointError otherwise."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CheckpointError(f"{where}: field {name} must be one token id, got {value!r}")
    return value


def check_rows(f: HFFolder, chosen: Setup, rows: int) -> None:
    """CheckpointError naming the first id without one of the embedding's ``rows`` among those a text can give,
    those the tokenizer uses (specials, the framing's language codes) and the decoder's start and forced first ids
    the framing chose; other ids of the tokenizer may lie beyond the embedding, as transformers allows."""
    tokenizer = chosen.tokenizer
    beyond = first_id_beyond(tokenizer, rows)
    if beyond is not None:
        what = "can give" if beyond < tokenizer.text_rows else "uses"  # (first_id_beyond: text's ids first)
        raise CheckpointError(
            f"{f.path(CONFIG)}: the model has {rows} embedding rows, but the tokenizer {what} id {beyond} "
            f"({tokenizer.piece(beyond)!r}), which has no row"
        )
    for name, i in (("the decoder's start", chosen.start_id), ("the forced first output", chosen.forced_bos_id)):
        if i is not None and i >= rows:
            raise CheckpointError(
                f"{f.path(CONFIG)}: the model has {rows} embedding rows, but {name} is id {i} ({tokenizer.piece(i)!r}),"
                " which has no row"
            )


def generation_source(f: HFFolder) -> tuple[dict[str, Any], Path]:
    """The settings generate reads, and their file: generation_config.json's when the folder has one, else
    config.json's."""
    return (f.generation_config, f.path(GENERATION_CONFIG)) if f.generation_config else (f.config, f.path(CONFIG))


def setting_from(f: HFFolder, name: str) -> tuple[Any, str]:
    """(one generation setting, the file it is in) as transformers 5 reads it: from generation_config.json when the
    folder has one (config.json's generation fields are then not read), else from config.json; None when unset."""
    source, where = generation_source(f)
    return source.get(name), where.name


def setting(f: HFFolder, name: str, default: Any = None) -> Any:
    """One generation setting (``setting_from``), else ``default``."""
    value, _ = setting_from(f, name)
    return default if value is None else value


def beam_settings(f: HFFolder) -> dict[str, Any]:
    """``ModelConfig``'s beam fields for an imported folder: beam search as ``generate`` runs it ("transformers",
    ``core.decoding.beam_finish``), with ``length_penalty`` and ``early_stopping`` as generate reads them
    (``generation_source``), else ``GenerationConfig``'s defaults (1.0, False)."""
    source, where = generation_source(f)
    penalty = source.get("length_penalty", 1.0)
    if not isinstance(penalty, (int, float)) or isinstance(penalty, bool) or not math.isfinite(penalty):
        raise CheckpointError(f"{where}: field length_penalty must be a number, got {penalty!r}")
    stopping = source.get("early_stopping", False)
    if not isinstance(stopping, bool) and stopping != "never":
        raise CheckpointError(f'{where}: field early_stopping must be true, false or "never", got {stopping!r}')
    return {"beam": "transformers", "length_penalty": float(penalty), "early_stopping": stopping}


def generation_rules(f: HFFolder) -> dict[str, Any]:
    """``ModelConfig``'s generation rules for an imported folder (``core.decoding.generation_rules``): ``min_length``,
    ``no_repeat_ngram_size``, ``encoder_no_repeat_ngram_size``, ``repetition_penalty`` and ``forced_eos_token_id``
    as generate reads them (``generation_source``); absent or
    null = off (``GenerationConfig``'s defaults)."""
    source, where = generation_source(f)
    rules: dict[str, Any] = {}
    for name in ("min_length", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size"):
        value = source.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise CheckpointError(f"{where}: field {name} must be a whole number of at least 0, got {value!r}")
        rules[name] = value
    penalty = source.get("repetition_penalty")
    if penalty is not None:
        if not is_penalty(penalty):
            raise CheckpointError(f"{where}: field repetition_penalty must be a number above 0, got {penalty!r}")
        rules["repetition_penalty"] = float(penalty)
    forced = source.get("forced_eos_token_id")
    if forced is not None:
        rules["forced_eos_id"] = one_id(forced, "forced_eos_token_id", where)
    return rules


def suppressed_ids(f: HFFolder) -> tuple[int, ...]:
    """The ids transformers' generate never picks for this folder: ``bad_words_ids`` (one-token entries) and
    ``suppress_tokens`` as generate reads them (``generation_source``)."""
    source, where = generation_source(f)
    ids: list[int] = []
    bad = source.get("bad_words_ids") or []
    if not isinstance(bad, list) or any(not isinstance(entry, list) for entry in bad):
        raise CheckpointError(f"{where}: field bad_words_ids must be a list of id lists, got {bad!r}")
    for entry in bad:
        if len(entry) != 1:
            raise CheckpointError(
                f"{where}: field bad_words_ids holds {entry!r}; only single-token entries are supported (core "
                "suppresses ids, not sequences)"
            )
        ids.append(one_id(entry, "bad_words_ids", where))
    suppress = source.get("suppress_tokens") or []
    if not isinstance(suppress, list):
        raise CheckpointError(f"{where}: field suppress_tokens must be a list of ids, got {suppress!r}")
    ids += [one_id(i, "suppress_tokens", where) for i in suppress]
    eos = source.get("eos_token_id", f.config.get("eos_token_id", f.defaults.get("eos_token_id")))
    if eos in ids:
        raise CheckpointError(
            f"{where}: field bad_words_ids / suppress_tokens bans eos ({eos}): decoding could not stop"
        )
    if source.get("begin_suppress_tokens"):
        raise CheckpointError(f"{where}: field begin_suppress_tokens is not supported")
    return tuple(sorted(set(ids)))


def imported_config(f: HFFolder, build: Callable[[dict[str, Any]], ModelConfig]) -> ModelConfig:
    """``build(generation)``: the family's ModelConfig of config.json, given the fields every family reads the same
    way (``generation``: the banned ids, beam search, the rules) to pass on; CheckpointError naming config.json for
    what core cannot run."""
    try:
        return build({"suppress_ids": suppressed_ids(f), **beam_settings(f), **generation_rules(f)})
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{f.path(CONFIG)}: cannot be run by core: {exc}") from None


def mapped_state(f: HFFolder, cfg: ModelConfig, tensors: Tensors) -> dict[str, torch.Tensor]:
    """Core parameter name -> tensor: ``tensors.given`` plus every tensor ``tensors.names`` maps; CheckpointError
    naming the first tensor missing, any the model does not have (outside ``tensors.known`` and the names read),
    or one whose shape ``cfg`` does not imply."""
    weights, names, what = f.path(WEIGHTS), tensors.names, tensors.what
    state, used = dict(tensors.given), set(tensors.known)
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


def provenance(f: HFFolder, command: str, progress: Progress | None = None, **more: str) -> dict[str, Any]:
    """What a checkpoint records under ``imported_from``: the family's format, the folder, its licence, the
    weights' SHA-256, the transformers version that wrote it, the command; ``more`` adds fields (e.g. the family).
    progress: the digest's."""
    return {
        "format": f.entry.format,
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
