"""Export a core checkpoint as a CTranslate2 model, to serve it with CTranslate2.

    python -m core export-ct2 CHECKPOINT OUT [--quantization int8]

The checkpoint is first written as a Hugging Face Marian folder (``core.exporters.hf_marian``), which CTranslate2's
own converter (``ctranslate2.converters.TransformersConverter``) reads. That converter's Marian loader always starts
the decoder from a zero vector and drops the vocabulary's last row (it takes it for Opus-MT's appended ``<pad>``), so
the checkpoint must start decoding from a zero vector (``start: zeros``), or from a start token whose embedding is
zero and is the last row, named ``<pad>`` (imported Opus-MT models). Needs ``ctranslate2`` and ``transformers``
(``pip install -e '.[ct2]'``). The SentencePiece models are copied beside the model: CTranslate2 takes pieces.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..checkpoint import CONFIG, load_checkpoint
from ..errors import CheckpointError, LabError
from ..importers.staging import staging_folder
from ..model import Transformer
from ..tokenizer import Tokenizer
from .hf_marian import PAD_PIECE, write_folder
from .verify import publish, verify_ct2

QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int16", "float16", "bfloat16", "float32")


def check_start(model: Transformer, tokenizer: Tokenizer, where: Path) -> None:
    """CheckpointError unless decoding starts from a zero vector the way CTranslate2's Marian loader assumes."""
    cfg = model.config
    if cfg.start == "zeros":
        return
    last = cfg.tgt_vocab_size - 1
    row = model.tgt_embed.weight[cfg.bos_id]
    if cfg.bos_id == last and tokenizer.piece(last) == PAD_PIECE and not bool(row.any()):
        return
    raise CheckpointError(
        f"{where}: start {cfg.start!r} with bos_id {cfg.bos_id} ({tokenizer.piece(cfg.bos_id)!r}): "
        "CTranslate2's Marian converter always starts the decoder from a zero vector and drops the last "
        f"vocabulary row, so it needs start 'zeros' (or a zero '{PAD_PIECE}' start row that is the last one)"
    )


def export_ct2(
    checkpoint: str | Path,
    out: str | Path,
    *,
    quantization: str | None = None,
    verify: bool = True,
    text: str | None = None,
) -> dict[str, Any]:
    """Write the CTranslate2 model folder ``out`` (replaced if there). Returns the check's numbers."""
    try:
        import ctranslate2.converters  # an optional extra (pip install -e '.[ct2]'), with transformers
    except ImportError:
        raise LabError("export-ct2 needs ctranslate2 and transformers: pip install -e '.[ct2]'") from None

    checkpoint, out = Path(checkpoint), Path(out)
    model, tokenizer, info = load_checkpoint(checkpoint, "cpu")
    check_start(model, tokenizer, checkpoint / CONFIG)
    staging = staging_folder(out, "export")
    with tempfile.TemporaryDirectory() as tmp:
        hf_folder = Path(tmp) / "hf"
        write_folder(checkpoint, hf_folder)
        try:
            converter = ctranslate2.converters.TransformersConverter(
                str(hf_folder), copy_files=["source.spm", "target.spm", "README.md"]
            )
            converter.convert(str(staging), quantization=quantization, force=True)
            report = (
                verify_ct2(staging, model, tokenizer, info, text=text)
                if verify
                else {"verified": False, "reason": "--no-verify"}
            )
            publish(staging, out, report, must_match=quantization in (None, "float32"))  # int8 may flip a close call
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return report
