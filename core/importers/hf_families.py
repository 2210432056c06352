"""The Hugging Face import: one family table, one folder reader, one convert.

config.json's ``model_type``, read in ONE place (``opened_config``), picks the family's entry (``FAMILIES``: Marian,
T5, the BART family; each entry is data and small functions, ``hf_entry.Family``). ``read_hf_folder`` checks what
every folder shares (config.json, the architecture, the weights, tokenizer_config.json, generation_config.json,
the licence) and asks the entry to check its tokenizer's files; ``convert`` runs the same steps for every family:
the tokenizer and languages, the config, the weights mapped by name onto core's model, the provenance record and
card, the checkpoint written whole. A folder of a family the lab does not open is refused by name: what the folder
is (when the model type is a known one) and what the lab opens.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..config import ModelConfig
from ..errors import CheckpointError, InputError
from ..storage.progress import ImportSteps, Progress
from ..storage.weights import assign_weights, empty_model
from ..transformer.model import Transformer
from . import hf_bart, hf_marian, hf_t5
from .hf_card import card_text
from .hf_common import check_rows, imported_meta, mapped_state, provenance
from .hf_entry import Family, HFFolder, Languages
from .hf_folder import (
    CONFIG,
    GENERATION_CONFIG,
    WEIGHTS,
    find_licence,
    folder_dtype,
    read_json,
    read_tokenizer_config,
    read_weights,
)
from .staging import save_with_files

# the family table: what differs between the families the lab opens, and the module of each one's steps
FAMILIES: dict[str, Family] = {
    "marian": Family("huggingface-marian", hf_marian.MODELS, hf_marian),
    "t5": Family("huggingface-t5", hf_t5.MODELS, hf_t5, prefixed=True),
    "bart": Family("huggingface-bart-family", hf_bart.MODELS, hf_bart),
}
# model_type -> (what it is, its family's entry)
OPENED: dict[str, tuple[str, Family]] = {
    model_type: (kind.what, entry) for entry in FAMILIES.values() for model_type, kind in entry.models.items()
}
# model types people try that the lab does not open, said plainly
KNOWN = {
    "whisper": "a speech-recognition model (audio in, text out)",
    "pegasus": "a Pegasus summarisation model (its sinusoids and norms differ from the families opened here)",
    "nllb-moe": "NLLB's mixture-of-experts model (its feed-forward layers are routed experts)",
    "umt5": "UMT5 (a relative position bias in every layer, not one per stack)",
    "longt5": "LongT5 (local / transient-global attention)",
    "switch_transformers": "a Switch Transformer (mixture-of-experts feed-forward layers)",
    "bert": "an encoder-only model (no decoder to translate with)",
    "roberta": "an encoder-only model (no decoder to translate with)",
    "gpt2": "a decoder-only language model (no encoder)",
    "llama": "a decoder-only language model (no encoder)",
    "fsmt": (
        "a FairSeq machine-translation model (FSMT, fairseq's WMT19 models): its tokenizer runs Moses' punctuation "
        "normalisation and word splitting (sacremoses) before BPE, which no tokenizer.json expresses, so the lab "
        "could not give its source ids; convert it with fairseq's own tools, or use an M2M100 / NLLB / Marian model"
    ),
    "prophetnet": "ProphetNet (n-stream self-attention)",
}


def snapshot(folder: str | Path) -> Path:
    """The folder that holds the model: ``folder`` itself, or, for a model's folder in the Hugging Face cache
    (``~/.cache/huggingface/hub/models--ORG--NAME``, which holds ``refs/`` and ``snapshots/<hash>/``), the snapshot
    ``refs/main`` names, else its only snapshot; CheckpointError naming the snapshots when several could be meant."""
    folder = Path(folder)
    snapshots = folder / "snapshots"
    if (folder / CONFIG).is_file() or not snapshots.is_dir():
        return folder
    ref = folder / "refs" / "main"
    if ref.is_file():
        named = snapshots / ref.read_text(encoding="utf-8").strip()
        if (named / CONFIG).is_file():
            return named
    found = sorted(p for p in snapshots.iterdir() if (p / CONFIG).is_file())
    if len(found) == 1:
        return found[0]
    if not found:
        raise CheckpointError(f"{snapshots}: no snapshot there holds {CONFIG} (the download is unfinished?)")
    raise CheckpointError(
        f"{folder}: holds {len(found)} snapshots and refs/main names none of them; pass one: "
        + ", ".join(str(p) for p in found)
    )


def opened_config(folder: Path) -> dict[str, Any]:
    """config.json of ``folder`` when its model_type is one the lab opens; CheckpointError naming what the folder
    is and what opens."""
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder — pass the folder that holds {CONFIG} and the weights")
    if not (folder / CONFIG).is_file():
        raise CheckpointError(f"{folder / CONFIG}: missing — a Hugging Face model folder has {CONFIG}")
    config = read_json(folder / CONFIG, required=True)
    model_type = config.get("model_type")
    if model_type in OPENED:
        return config
    what = KNOWN.get(str(model_type), "not a model family this lab opens") if model_type else "no model_type given"
    opens = ", ".join(f"{name} ('{key}')" for key, (name, _) in OPENED.items())
    raise CheckpointError(f"{folder / CONFIG}: model_type {model_type!r} — {what}. The lab opens: {opens}")


# a snapshot in the Hugging Face cache (…/models--ORG--NAME/snapshots/HASH), and the model's own folder there
HUB_CACHE = re.compile(r"models--(?P<repo>[^/]+)/snapshots/(?P<snapshot>[^/]+)/?$")
HUB_MODEL = re.compile(r"models--(?P<repo>[^/]+)/?$")


def checkpoint_name(folder: str | Path) -> str:
    """A checkpoint name for ``folder``: the model's name for a folder in the Hugging Face cache
    (``models--Helsinki-NLP--opus-mt-en-de[/snapshots/<hash>]`` -> ``opus-mt-en-de``), else the folder's name."""
    resolved = Path(folder).expanduser().resolve()
    found = HUB_CACHE.search(resolved.as_posix()) or HUB_MODEL.search(resolved.as_posix())
    raw = found.group("repo").split("--")[-1] if found else resolved.name
    return re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip(".-_")[:80] or "imported"


def family(folder: str | Path) -> str:
    """The folder's model_type, when the lab opens it (``opened_config``). A model's folder in the Hugging Face
    cache is read at its snapshot (``snapshot``)."""
    return str(opened_config(snapshot(folder))["model_type"])


def check_architectures(where: Path, model_type: str, config: dict[str, Any]) -> None:
    """config.json's architectures (when it names any) must hold the model type's class; CheckpointError saying
    whose class it names instead (a config that contradicts itself) or which class opens."""
    architectures = config.get("architectures")
    wanted = OPENED[model_type][1].models[model_type].architecture
    if architectures is None or wanted in (architectures or []):
        return
    for other, (_, entry) in OPENED.items():
        if entry.models[other].architecture in architectures:
            raise CheckpointError(
                f"{where}: model_type is {model_type!r}, but architectures {architectures!r} names the class of "
                f"model_type {other!r}; the config contradicts itself"
            )
    raise CheckpointError(
        f"{where}: architectures {architectures!r} — only {wanted} (the encoder-decoder model with its language-model "
        "head) opens here"
    )


def read_hf_folder(folder: str | Path, progress: Progress | None = None) -> HFFolder:
    """Read and check a Hugging Face folder of a family the lab opens (see the module docstring), its tokenizer's
    files checked by the family's entry; progress: per tensor read."""
    folder = Path(folder)
    config = opened_config(folder)
    model_type = str(config["model_type"])
    check_architectures(folder / CONFIG, model_type, config)
    entry = OPENED[model_type][1]
    f = HFFolder(
        folder=folder,
        entry=entry,
        model_type=model_type,
        config=config,
        tensors=read_weights(folder, progress),
        tokenizer_config=read_tokenizer_config(folder),
        generation_config=read_json(folder / GENERATION_CONFIG, required=False),
        licence=find_licence(folder, config),
    )
    return entry.steps.read_tokenizer(f)


def build_model(f: HFFolder, cfg: ModelConfig) -> Transformer:
    """The core Transformer (eval mode) of ``cfg`` holding the folder's weights, each tensor checked."""
    state = mapped_state(f, cfg, f.entry.steps.tensors(f, cfg))
    return assign_weights(empty_model(cfg), state, f.path(WEIGHTS)).eval()  # no copy


def convert(
    folder: str | Path,
    out: str | Path,
    *,
    dtype: torch.dtype | None = None,
    languages: Languages = (None, None),
    command: str = "",
    source_prefix: str | None = None,
    progress: Progress | None = None,
) -> Path:
    """Import ``folder`` by its family's entry (``family``) into the checkpoint folder ``out``, its weights saved in
    ``dtype`` (None: the folder's own, ``hf_folder.folder_dtype``); returns ``out``. progress: told
    ``(fraction, text)`` at each real step (each tensor read and checked, the weights' digest, writing), with
    fractions that only grow, ending at 1.0 when the checkpoint is written."""
    folder = snapshot(folder)
    kind = family(folder)
    if source_prefix is not None and not OPENED[kind][1].prefixed:
        raise InputError(f"--source-prefix is for T5-family folders; {folder} is {OPENED[kind][0]}")
    steps = ImportSteps(progress)
    f = read_hf_folder(folder, steps.reading)
    dtype = dtype or folder_dtype(f.tensors)  # the folder's own unless asked
    out = Path(out)
    with tempfile.TemporaryDirectory() as scratch:  # a tokenizer file an entry builds lives here until written
        chosen = f.entry.steps.setup(f, languages, source_prefix, Path(scratch))
        cfg = f.entry.steps.model_config(f, chosen)  # its shapes checked against config.json first
        check_rows(f, chosen, min(cfg.src_vocab_size, cfg.tgt_vocab_size))  # every id a text gives or a run uses
        model = build_model(f, cfg)
        origin = provenance(f, command, steps.digest, **chosen.origin)
        meta = imported_meta(out, chosen.languages, dtype, chosen.spec, origin)
        card = card_text(
            name=out.name,
            f=f,
            card=f.entry.steps.card(f, chosen, model, dtype),
            cfg=model.config,
            piece=chosen.tokenizer.piece,
            command=command,
        )
        steps.writing(out)
        return steps.done(save_with_files(model, chosen.files, out, card=card, meta=meta, dtype=dtype))
