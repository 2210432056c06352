"""Import a local Hugging Face folder (Marian / Opus-MT, T5 / Flan-T5 / mT5, BART / mBART / M2M100 / NLLB) as a
core checkpoint; the family is config.json's model_type (``importers.hf_families``)."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import torch

from ..errors import CheckpointError
from ..importers.hf_families import checkpoint_name, convert
from ..storage.checkpoint import check_output_folder, folder_mb, load_checkpoint

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "folder",
        help="a local Hugging Face folder: Marian (config.json, model.safetensors, source.spm, ...), T5 / Flan-T5 / "
        "mT5 (... spiece.model), BART / mBART / NLLB (... tokenizer.json) or M2M100 (... sentencepiece.bpe.model, "
        "vocab.json)",
    )
    parser.add_argument("--out", default=None, help="checkpoint folder to write (default: checkpoints/<folder name>)")
    parser.add_argument(
        "--dtype",
        choices=("folder", *DTYPES),
        default="folder",
        help="saved weight precision (default: the folder's own, e.g. a float16 folder stays float16)",
    )
    parser.add_argument(
        "--source-language",
        default=None,
        help="source language code (e.g. en_XX, eng_Latn; default: tokenizer_config.json)",
    )
    parser.add_argument(
        "--target-language",
        default=None,
        help="target language code, forced first where the family does that (default: the folder's)",
    )
    parser.add_argument(
        "--source-prefix",
        default=None,
        help="T5 only: the task prefix put before every source text (default: config.json's task_specific_params "
        "for the languages given, else its first translation task)",
    )
    parser.add_argument("--force", action="store_true", help="replace --out when it exists")


def run(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    out = Path(args.out) if args.out else Path("checkpoints") / checkpoint_name(folder)
    check_output_folder(out)  # a path that could never be replaced: said first, not "pass --force"
    if out.exists() and not args.force:
        raise CheckpointError(f"{out}: already exists; pass --force to replace it")
    command = f"python -m core import-hf {folder} --out {out} --dtype {args.dtype}"
    for flag, value in (("--source-language", args.source_language), ("--target-language", args.target_language)):
        if value is not None:
            command += f" {flag} {shlex.quote(value)}"
    if args.source_prefix is not None:
        command += f" --source-prefix {shlex.quote(args.source_prefix)}"
    start = time.perf_counter()
    path = convert(
        folder,
        out,
        dtype=DTYPES.get(args.dtype),
        languages=(args.source_language, args.target_language),
        command=command,
        source_prefix=args.source_prefix,
    )
    load_checkpoint(path, "cpu")  # what was written loads
    print(
        f"import-hf: wrote {path} ({folder_mb(path):.1f} MB) from {folder} in {time.perf_counter() - start:.1f} s",
        file=sys.stderr,
    )
    return 0
