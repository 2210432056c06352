"""Import a local Hugging Face T5 / Flan-T5 / mT5 folder as a core checkpoint.

    python -m core import-hf FOLDER --out checkpoints/NAME [--source-language en --target-language de]
                                                           [--source-prefix "translate English to German: "]

The folder is read and checked by ``hf_t5_folder`` (safetensors only, never a pickle), its config translated by
``hf_t5_config``: transformers' ``T5ForConditionalGeneration`` is core's ``Transformer`` with T5's variants set as
configuration (RMSNorm pre-norm, relative position bias, unscaled attention, d_kv, gated or plain FFN, the head as
the weights have it). T5 checkpoints translate when the source starts with a task prefix: the one config.json's
``task_specific_params`` holds for the languages asked for (the first translation task when none is asked for), or
``--source-prefix``; the checkpoint keeps it in its tokenizer entry and the lab puts it before what the person types.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from ..config import ModelConfig
from ..errors import CheckpointError, InputError
from ..hf_tokenizers import FastTokenizer
from ..model import Transformer
from ..progress import ImportSteps, Progress
from ..t5_tokenizer import T5Tokenizer
from ..weights import assign_weights, empty_model
from .hf_common import imported_meta, mapped_state, provenance
from .hf_folder import folder_dtype
from .hf_t5_card import card_text
from .hf_t5_config import DEC_EMB, ENC_EMB, HEAD, IGNORED, SHARED, config_from_t5, head, t5_names
from .hf_t5_folder import CONFIG, WEIGHTS, HFT5Folder, read_t5_folder
from .staging import save_with_files

FORMAT = "huggingface-t5"
_TASK = re.compile(r"translation_([A-Za-z-]+)_to_([A-Za-z-]+)")


def state_from_t5(f: HFT5Folder, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Core parameter name -> tensor (aliases included); CheckpointError for missing, unknown or misshapen tensors."""
    shared = f.tensors[SHARED]
    for name in (ENC_EMB, DEC_EMB):  # transformers ties both sides' embeddings to `shared`
        if name in f.tensors and not torch.equal(f.tensors[name], shared):
            raise CheckpointError(f"{f.path(WEIGHTS)}: tensor {name} differs from {SHARED}; T5 shares one embedding")
    projection, _ = head(f)
    state = {"src_embed.weight": shared, "tgt_embed.weight": shared, "output.weight": projection}
    ffn = "gated" if cfg.gated_ffn else "plain"
    what = f"{f.model_type} model of {cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers, {ffn} feed-forward"
    return mapped_state(f, cfg, t5_names(cfg), state, {SHARED, HEAD, ENC_EMB, DEC_EMB, *IGNORED}, what)


def build_model(f: HFT5Folder) -> Transformer:
    """The core Transformer (eval mode) holding the folder's weights."""
    cfg = config_from_t5(f, f.tokenizer().special_ids()["unk_id"])
    return assign_weights(empty_model(cfg), state_from_t5(f, cfg), f.path(WEIGHTS)).eval()  # no copy


def translation_tasks(f: HFT5Folder) -> dict[str, str]:
    """config.json's translation tasks: name ('translation_en_to_de') -> prefix."""
    tasks = f.config.get("task_specific_params") or {}
    if not isinstance(tasks, dict):
        raise CheckpointError(f"{f.path(CONFIG)}: field task_specific_params must be an object, got {tasks!r}")
    return {
        name: task["prefix"]
        for name, task in tasks.items()
        if _TASK.fullmatch(name) and isinstance(task, dict) and isinstance(task.get("prefix"), str)
    }


def task_prefix(
    f: HFT5Folder, languages: tuple[str | None, str | None], source_prefix: str | None
) -> tuple[str, str, tuple[str, str]]:
    """(the source prefix, where it came from, the languages): ``source_prefix`` when given; else the translation
    task of config.json that matches ``languages`` (either may be None: any), the first one when none are given;
    else no prefix. InputError when languages are given that no task has, or that several tasks match."""
    src, tgt = languages
    tasks = translation_tasks(f)
    if source_prefix is not None or not tasks:
        how = "--source-prefix" if source_prefix is not None else "none: config.json names no translation task"
        return source_prefix or "", how, (src or "src", tgt or "tgt")
    pairs = {name: _TASK.fullmatch(name) for name in tasks}
    matching = [name for name, m in pairs.items() if m is not None and src in (None, m[1]) and tgt in (None, m[2])]
    if (src or tgt) and len(matching) != 1:
        wanted = f"translation_{src or '*'}_to_{tgt or '*'}"
        found = f"no task matches {wanted}" if not matching else f"{len(matching)} tasks match {wanted}"
        raise InputError(
            f"{f.path(CONFIG)}: in task_specific_params {found} (it has {', '.join(tasks)}); give both languages "
            "of one of them, or the prefix with --source-prefix"
        )
    name = matching[0]
    match = pairs[name]
    assert match is not None
    return tasks[name], f"{CONFIG} task_specific_params.{name}", (match[1], match[2])


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
    """Read ``folder``, convert it and write the checkpoint folder ``out``. Returns ``out``. progress: told at each
    step (``core.progress.ImportSteps``), ending at 1.0 when the checkpoint is written."""
    steps = ImportSteps(progress)
    f = read_t5_folder(folder, steps.reading)
    dtype = dtype or folder_dtype(f.tensors)  # the folder's own unless asked
    prefix, prefix_from, (src, tgt) = task_prefix(f, languages, source_prefix)
    model = build_model(f)
    tokenizer = f.tokenizer(prefix)
    out = Path(out)
    origin = provenance(f, FORMAT, command, steps.digest, family=f.model_type)
    card = card_text(
        name=out.name,
        f=f,
        model=model,
        tokenizer=tokenizer,
        languages=(src, tgt),
        prefix_from=prefix_from,
        dtype=dtype,
        command=command,
    )
    name = f.tokenizer_file
    if isinstance(tokenizer, FastTokenizer):
        spec = tokenizer.spec(file=name)
    else:
        assert isinstance(tokenizer, T5Tokenizer)
        spec = tokenizer.spec(model=name)
    meta = imported_meta(out, (src, tgt), dtype, spec, origin)
    steps.writing(out)
    return steps.done(save_with_files(model, {name: f.path(name)}, out, card=card, meta=meta, dtype=dtype))
