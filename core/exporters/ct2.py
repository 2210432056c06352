"""Export a core checkpoint as a CTranslate2 model, to serve it with CTranslate2.

    python -m core export-ct2 CHECKPOINT OUT [--quantization int8]

The checkpoint is first written as the Hugging Face folder of its family (``core.exporters.hf_families``: Marian,
T5 / mT5, BART / mBART / M2M100 / NLLB; what a family's folder cannot express is refused there, by name), which
CTranslate2's own converter (``ctranslate2.converters.TransformersConverter``, with a loader for each of these
families) reads. Its Marian loader always starts the decoder from a zero vector and drops the vocabulary's last row
(it takes it for Opus-MT's appended ``<pad>``), so a Marian-family checkpoint must start decoding from a zero vector
(``start: zeros``), or from a start token whose embedding is zero and is the last row, named ``<pad>`` (imported
Opus-MT models). Needs ``ctranslate2`` and ``transformers`` (``pip install -e '.[ct2]'``). The tokenizer's files are
copied beside the model: CTranslate2 takes pieces. A model whose first output is forced (the target language of
mBART-50, M2M100, NLLB) is given that piece as ``target_prefix``; the check at export does so.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..config import ModelConfig
from ..errors import CheckpointError, LabError
from ..importers.staging import staging_folder
from ..storage.checkpoint import CONFIG, load_checkpoint, read_config
from ..text.tokenizer import Tokenizer
from ..transformer.model import Transformer
from .hf_families import WRITERS, family_of
from .hf_marian import PAD_PIECE
from .verify import publish, verify_ct2

QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int16", "float16", "bfloat16", "float32")
# the tokenizer's files each family's folder may hold, copied beside the CTranslate2 model (with the README)
COPIED = ("source.spm", "target.spm", "spiece.model", "sentencepiece.bpe.model", "tokenizer.json", "README.md")


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


def add_norm_fields(config_json: Path, cfg: ModelConfig) -> None:
    """Write the two fields CTranslate2's BART / mBART loader reads from the config (fairseq's names, which the
    folders on the hub carry but transformers 5's BartConfig / MBartConfig no longer define): ``normalize_before``
    (pre-norm layers) and ``normalize_embedding`` (the embedding LayerNorm)."""
    config = json.loads(config_json.read_text(encoding="utf-8"))
    config.update(normalize_before=cfg.norm == "pre", normalize_embedding=cfg.embed_norm)
    config_json.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


class _LanguageCodes:
    """A transformers tokenizer whose ``get_vocab`` includes M2M100's language codes: CTranslate2 4.8's M2M100 loader
    looks for them in ``special_tokens_map['additional_special_tokens']``, which transformers 5 no longer fills, and
    would build a vocabulary without them (100 rows short of the model)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)

    def get_vocab(self) -> dict[str, int]:
        return {**self._tokenizer.get_vocab(), **getattr(self._tokenizer, "lang_token_to_id", {})}


def converter_class(base: type) -> type:
    """CTranslate2's ``TransformersConverter`` reading M2M100 tokenizers with their language codes (``_LanguageCodes``;
    every other tokenizer as it is)."""

    class Converter(base):
        def load_tokenizer(self, tokenizer_class: Any, model_name_or_path: str, **kwargs: Any) -> Any:
            tokenizer = super().load_tokenizer(tokenizer_class, model_name_or_path, **kwargs)
            return _LanguageCodes(tokenizer) if hasattr(tokenizer, "lang_token_to_id") else tokenizer

    return Converter


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
    family = family_of(ModelConfig.from_dict(read_config(checkpoint)["model"]))
    if family == "marian":
        model, tokenizer, _ = load_checkpoint(checkpoint, "cpu")
        check_start(model, tokenizer, checkpoint / CONFIG)
    staging = staging_folder(out, "export")
    with tempfile.TemporaryDirectory() as tmp:
        hf_folder = Path(tmp) / "hf"
        model, tokenizer, info, _ = WRITERS[family](checkpoint, hf_folder)
        if family == "bart":
            add_norm_fields(hf_folder / CONFIG, model.config)
        try:
            converter = converter_class(ctranslate2.converters.TransformersConverter)(
                str(hf_folder), copy_files=[name for name in COPIED if (hf_folder / name).is_file()]
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
