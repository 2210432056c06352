"""Import a local Hugging Face Marian folder (Opus-MT and the like) as a core checkpoint.

    python -m core import-hf FOLDER --out checkpoints/NAME

The folder is read and checked by ``hf_folder`` (safetensors only, never a pickle). transformers' ``MarianMTModel``
is the same network as core's ``Transformer`` once its variants are set as configuration: concatenated sinusoids at
the paper's frequencies starting at position 0 (``pe_layout='concatenated_hf'``; Marian C++'s frequencies,
``'concatenated'``, when the file's position tables hold those), embeddings scaled by sqrt(d_model)
only when ``scale_embedding``, post-norm layers with LayerNorm eps 1e-5, scores scaled by 1/sqrt(d_head), the FFN
activation ``activation_function``, ``final_logits_bias`` as the output bias, the decoder starting from the
``decoder_start_token_id`` embedding (Marian's <pad>), shared / tied embeddings as the weights are, and the ids
generation_config.json bans (``bad_words_ids``) as ``suppress_ids``. Anything else is refused by name.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..config import ModelConfig
from ..model import Transformer
from ..progress import ImportSteps, Progress
from ..tokenizer import MarianVocabTokenizer
from ..weights import assign_weights, empty_model
from .hf_card import card_text
from .hf_common import imported_meta, mapped_state, provenance
from .hf_config import (
    BIAS,
    DEC_EMB,
    ENC_EMB,
    HEAD,
    POSITIONS,
    SHARED,
    config_from_hf,
    embeddings,
    field,
    layer_names,
    special_pieces,
)
from .hf_folder import CONFIG, SOURCE_SPM, TARGET_SPM, VOCAB, WEIGHTS, HFMarianFolder, folder_dtype, read_folder
from .staging import save_with_files

FORMAT = "huggingface-marian"


# --------------------------------------------------------------------------- weights
def state_from_hf(f: HFMarianFolder, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Core parameter name -> tensor (aliases included); CheckpointError for missing, unknown or misshapen tensors."""
    share = field(f.config, "share_encoder_decoder_embeddings", bool, f.path(CONFIG))
    tie = field(f.config, "tie_word_embeddings", bool, f.path(CONFIG))
    enc, dec, head = embeddings(f, share=share, tie=tie)
    state = {"src_embed.weight": enc, "tgt_embed.weight": dec, "output.weight": head}
    if cfg.output_bias:
        state["output.bias"] = f.tensors[BIAS].reshape(-1)
    used = {SHARED, ENC_EMB, DEC_EMB, HEAD, BIAS}  # model.shared.weight is unused by transformers when untied
    used |= {name for name in POSITIONS if name in f.tensors}  # checked by position_layout
    what = f"MarianMTModel of {cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers"
    return mapped_state(f, cfg, layer_names(cfg), state, used, what)


def build_model(f: HFMarianFolder) -> Transformer:
    """The core Transformer (eval mode) holding the folder's weights."""
    cfg = config_from_hf(f)
    return assign_weights(empty_model(cfg), state_from_hf(f, cfg), f.path(WEIGHTS)).eval()  # no copy


def convert(
    folder: str | Path,
    out: str | Path,
    *,
    dtype: torch.dtype | None = None,
    languages: tuple[str | None, str | None] = (None, None),
    command: str = "",
    progress: Progress | None = None,
) -> Path:
    """Read ``folder``, convert it and write the checkpoint folder ``out``. Returns ``out``. progress: told at each
    step (``core.progress.ImportSteps``), ending at 1.0 when the checkpoint is written."""
    steps = ImportSteps(progress)
    f = read_folder(folder, steps.reading)
    dtype = dtype or folder_dtype(f.tensors)  # the folder's own unless asked
    model = build_model(f)
    cfg = model.config
    tokenizer = MarianVocabTokenizer(f.path(SOURCE_SPM), f.path(TARGET_SPM), f.vocab, **special_pieces(f))
    src = languages[0] or f.tokenizer_config.get("source_lang") or "src"
    tgt = languages[1] or f.tokenizer_config.get("target_lang") or "tgt"
    out = Path(out)
    origin = provenance(f, FORMAT, command, steps.digest)
    card = card_text(
        name=out.name,
        f=f,
        cfg=cfg,
        tokenizer=tokenizer,
        languages=(str(src), str(tgt)),
        n_params=model.n_parameters(),
        dtype=dtype,
        command=command,
    )
    meta = imported_meta(
        out, (str(src), str(tgt)), dtype, tokenizer.spec(source=SOURCE_SPM, target=TARGET_SPM, vocab=VOCAB), origin
    )
    files = {SOURCE_SPM: f.path(SOURCE_SPM), TARGET_SPM: f.path(TARGET_SPM), VOCAB: f.path(VOCAB)}
    steps.writing(out)
    return steps.done(save_with_files(model, files, out, card=card, meta=meta, dtype=dtype))
