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
    "fsmt": "a FairSeq machine-translation model (FSMT)",
    "prophetnet": "ProphetNet (n-stream self-attention)",
}


def family(folder: str | Path) -> str:
    """The folder's model_type, when the lab opens it; CheckpointError naming what it is and what opens."""
    folder = Path(folder)
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
    dtype: torch.dtype = torch.float32,
    languages: tuple[str | None, str | None] = (None, None),
    command: str = "",
    source_prefix: str | None = None,
    progress: Progress | None = None,
) -> Path:
    """Import ``folder`` with its family's importer (``family``) into the checkpoint folder ``out``. progress: told
    ``(fraction, text)`` at each real step (each tensor read and checked, the weights' digest, writing), with
    fractions that only grow, ending at 1.0 when the checkpoint is written."""
    kind = family(folder)
    convert_family = OPENED[kind][1]
    how = {"dtype": dtype, "languages": languages, "command": command, "progress": progress}
    if kind in PREFIXED:
        return convert_family(folder, out, source_prefix=source_prefix, **how)
    if source_prefix is not None:
        raise InputError(f"--source-prefix is for T5-family folders; {folder} is {OPENED[kind][0]}")
    return convert_family(folder, out, **how)
