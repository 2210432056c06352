"""Which family a Hugging Face folder is: config.json's ``model_type``, read in ONE place, picks the importer.

A folder of a family the lab does not open is refused by name: what the folder is (when the model type is a known
one) and what the lab opens.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from ..errors import CheckpointError, InputError
from ..progress import Progress
from . import hf_bart, hf_marian, hf_t5
from .hf_folder import CONFIG, read_json

Importer = Callable[
    ..., Path
]  # (folder, out, *, dtype, languages, command, progress[, source_prefix]) -> the checkpoint
# model_type -> (what it is, its importer)
OPENED: dict[str, tuple[str, Importer]] = {
    "marian": ("Marian (Opus-MT)", hf_marian.convert),
    "t5": ("T5 / T5 v1.1 / Flan-T5", hf_t5.convert),
    "mt5": ("mT5", hf_t5.convert),
    "bart": ("BART", hf_bart.convert),
    "mbart": ("mBART / mBART-50", hf_bart.convert),
    "m2m_100": ("M2M100 / NLLB (dense)", hf_bart.convert),
}
PREFIXED = {"t5", "mt5"}  # the families whose sources start with a task prefix (--source-prefix)
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


def family(folder: str | Path) -> str:
    """The folder's model_type, when the lab opens it; CheckpointError naming what it is and what opens. A model's
    folder in the Hugging Face cache is read at its snapshot (``snapshot``)."""
    folder = snapshot(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder — pass the folder that holds {CONFIG} and the weights")
    if not (folder / CONFIG).is_file():
        raise CheckpointError(f"{folder / CONFIG}: missing — a Hugging Face model folder has {CONFIG}")
    model_type = read_json(folder / CONFIG, required=True).get("model_type")
    if model_type in OPENED:
        return str(model_type)
    what = KNOWN.get(str(model_type), "not a model family this lab opens") if model_type else "no model_type given"
    opens = ", ".join(f"{name} ('{key}')" for key, (name, _) in OPENED.items())
    raise CheckpointError(f"{folder / CONFIG}: model_type {model_type!r} — {what}. The lab opens: {opens}")


def convert(
    folder: str | Path,
    out: str | Path,
    *,
    dtype: torch.dtype | None = None,
    languages: tuple[str | None, str | None] = (None, None),
    command: str = "",
    source_prefix: str | None = None,
    progress: Progress | None = None,
) -> Path:
    """Import ``folder`` with its family's importer (``family``) into the checkpoint folder ``out``, its weights
    saved in ``dtype`` (None: the folder's own, ``hf_folder.folder_dtype``). progress: told
    ``(fraction, text)`` at each real step (each tensor read and checked, the weights' digest, writing), with
    fractions that only grow, ending at 1.0 when the checkpoint is written."""
    folder = snapshot(folder)
    kind = family(folder)
    convert_family = OPENED[kind][1]
    how = {"dtype": dtype, "languages": languages, "command": command, "progress": progress}
    if kind in PREFIXED:
        return convert_family(folder, out, source_prefix=source_prefix, **how)
    if source_prefix is not None:
        raise InputError(f"--source-prefix is for T5-family folders; {folder} is {OPENED[kind][0]}")
    return convert_family(folder, out, **how)
