"""``export-hf``: a core checkpoint as the Hugging Face folder of the family its configuration is — T5 for the
relative position bias (``hf_t5``), BART / mBART / M2M100 / NLLB for positions read from row 2 (``hf_bart``), Marian
otherwise (``hf_marian``, which names what does not fit it). Each family
writes its folder; the check against transformers and the move into place are the same for all."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import ModelConfig
from ..importers.staging import staging_folder
from ..storage.checkpoint import read_config
from ..text.tokenizer import Tokenizer
from ..transformer.model import Transformer
from . import hf_bart, hf_marian, hf_t5
from .verify import publish, verify_hf  # transformers is imported inside, when a check runs

# (checkpoint, folder to write) -> (model, tokenizer, the checkpoint's config.json, notes)
Writer = Callable[[Path, Path], tuple[Transformer, Tokenizer, dict[str, Any], list[str]]]
WRITERS: dict[str, Writer] = {"marian": hf_marian.write_folder, "t5": hf_t5.write_folder, "bart": hf_bart.write_folder}


def family_of(cfg: ModelConfig) -> str:
    """The Hugging Face family a checkpoint of ``cfg`` is exported as."""
    if cfg.positional == "relative":
        return "t5"
    return "bart" if cfg.position_offset else "marian"  # BART, mBART, M2M100, NLLB read positions from row 2


def export_hf(
    checkpoint: str | Path, out: str | Path, *, verify: bool = True, text: str | None = None
) -> dict[str, Any]:
    """Export ``checkpoint`` to the Hugging Face folder ``out`` (replaced if there) of its family (``family_of``).
    Returns the check's numbers (``verify_hf``) or {'verified': False, 'reason': ...}."""
    checkpoint, out = Path(checkpoint), Path(out)
    write = WRITERS[family_of(ModelConfig.from_dict(read_config(checkpoint)["model"]))]
    staging = staging_folder(out, "export")
    try:
        model, tokenizer, info, _ = write(checkpoint, staging)
        report = (
            verify_hf(staging, model, tokenizer, info, text=text)
            if verify
            else {"verified": False, "reason": "--no-verify"}
        )
        publish(staging, out, report)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return report
