"""transformers' BartConfig / MBartConfig / M2M100Config -> core's ModelConfig, and the tensor names both sides
share (``hf_bart`` converts the weights with them; ``core.exporters.hf_bart`` reads the same names the other way).
transformers' Marian is BART's code with other defaults: its layers and embeddings have these names too
(``layer_names``; ``hf_marian_config``).

The three families are core's ``Transformer`` with these variants (transformers 5.23's modelling code):

    BART     learned positions from row 2, one table per side; layernorm_embedding; post-norm; final_logits_bias
    mBART    the same, pre-norm, with encoder.layer_norm / decoder.layer_norm after the last layer
    M2M100   fairseq's sinusoids (sines then cosines, exp(-i ln 10000 / (d/2 - 1))) from row 2, none for <pad>;
             pre-norm, final norms; no embedding norm; NLLB's dense models are this architecture
"""

from __future__ import annotations

from typing import Any

import torch

from ..config import ModelConfig
from ..errors import CheckpointError
from .hf_common import check_rows, field, imported_config, one_id, setting
from .hf_entry import HFFolder, Setup
from .hf_folder import CONFIG, WEIGHTS

# transformers 5.23's defaults for the shape of every BART-derived config (BART, mBART, M2M100, Marian)
SHAPE_DEFAULTS: dict[str, Any] = {
    "max_position_embeddings": 1024,
    "encoder_layers": 12,
    "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16,
    "decoder_layers": 12,
    "decoder_ffn_dim": 4096,
    "decoder_attention_heads": 16,
    "d_model": 1024,
    "dropout": 0.1,
    "is_encoder_decoder": True,
    "tie_word_embeddings": True,
}
_COMMON: dict[str, Any] = {**SHAPE_DEFAULTS, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}
# what a field absent from config.json means; the families differ only here
DEFAULTS: dict[str, dict[str, Any]] = {
    "bart": {**_COMMON, "vocab_size": 50265, "activation_function": "gelu", "scale_embedding": False},
    "mbart": {**_COMMON, "vocab_size": 50265, "activation_function": "gelu", "scale_embedding": False},
    "m2m_100": {**_COMMON, "vocab_size": 128112, "activation_function": "relu", "scale_embedding": True},
}
ARCHITECTURES = {
    "bart": "BartForConditionalGeneration",
    "mbart": "MBartForConditionalGeneration",
    "m2m_100": "M2M100ForConditionalGeneration",
}
ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "silu": "silu", "swish": "swish", "gelu_new": "gelu_new"}
POSITION_OFFSET = 2  # BartLearnedPositionalEmbedding's offset; M2M100's sinusoids start at padding_idx + 1 = 2
NORM_EPS = 1e-5  # nn.LayerNorm's default, which all of them use (Marian too)
SHARED, ENC_EMB, DEC_EMB, HEAD, BIAS = (
    "model.shared.weight",
    "model.encoder.embed_tokens.weight",
    "model.decoder.embed_tokens.weight",
    "lm_head.weight",
    "final_logits_bias",
)
IGNORED = ("model.encoder.embed_positions.weights", "model.decoder.embed_positions.weights")  # M2M100's sinusoids
_SUBLAYERS = {  # ours -> theirs, inside one layer
    "encoder": {"self_attn": "self_attn", "self_attn_norm": "self_attn_layer_norm"},
    "decoder": {
        "self_attn": "self_attn",
        "self_attn_norm": "self_attn_layer_norm",
        "cross_attn": "encoder_attn",
        "cross_attn_norm": "encoder_attn_layer_norm",
    },
}


def layer_names(cfg: ModelConfig) -> dict[str, str]:
    """Every layer parameter: core name -> the name transformers' BART-derived models (BART, mBART, M2M100,
    MarianMTModel) give it (the importers' and the exporters' map)."""
    names: dict[str, str] = {}
    for stack, count in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        for i in range(count):
            ours, theirs = f"{stack}_layers.{i}", f"model.{stack}.layers.{i}"
            pairs = dict(
                _SUBLAYERS[stack], **{"ffn.linear1": "fc1", "ffn.linear2": "fc2", "ffn_norm": "final_layer_norm"}
            )
            for part, their_part in pairs.items():
                projections = ("q_proj", "k_proj", "v_proj", "out_proj") if part.endswith("attn") else ("",)
                for proj in projections:
                    for kind in ("weight", "bias"):
                        suffix = f"{proj}.{kind}" if proj else kind
                        names[f"{ours}.{part}.{suffix}"] = f"{theirs}.{their_part}.{suffix}"
    return names


def bart_names(cfg: ModelConfig) -> dict[str, str]:
    """Every parameter but the embeddings and the output: core name -> transformers' name."""
    names = dict(layer_names(cfg))
    for side, stack in (("src", "encoder"), ("tgt", "decoder")):
        if cfg.embed_norm:
            for kind in ("weight", "bias"):
                names[f"{side}_embed_norm.{kind}"] = f"model.{stack}.layernorm_embedding.{kind}"
        if cfg.norm == "pre":
            for kind in ("weight", "bias"):
                names[f"{stack}_norm.{kind}"] = f"model.{stack}.layer_norm.{kind}"
    if cfg.positional == "learned":
        names["positions.embedding.weight"] = "model.encoder.embed_positions.weight"
        names["tgt_positions.embedding.weight"] = "model.decoder.embed_positions.weight"
    return names


def check_shape(f: HFFolder, activations: dict[str, str]) -> str:
    """The checks every BART-derived config shares (encoder-decoder, equal heads and FFN widths on both sides, an
    activation core runs); returns the activation's core name."""
    where = f.path(CONFIG)
    if not field(f, "is_encoder_decoder", bool):
        raise CheckpointError(f"{where}: field is_encoder_decoder is false; only encoder-decoder models open here")
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if field(f, a, int) != field(f, b, int):
            raise CheckpointError(
                f"{where}: fields {a} ({field(f, a, int)}) and {b} ({field(f, b, int)}) differ; core needs them equal"
            )
    activation = field(f, "activation_function", str)
    if activation not in activations:
        raise CheckpointError(
            f"{where}: field activation_function is {activation!r}; supported: {', '.join(sorted(activations))}"
        )
    return activations[activation]


def shape_fields(f: HFFolder) -> dict[str, Any]:
    """``ModelConfig``'s shape fields of a BART-derived config (one set of names for BART, mBART, M2M100 and
    Marian)."""
    return {
        "n_heads": field(f, "encoder_attention_heads", int),
        "n_encoder_layers": field(f, "encoder_layers", int),
        "n_decoder_layers": field(f, "decoder_layers", int),
        "d_ff": field(f, "encoder_ffn_dim", int),
        "dropout": float(field(f, "dropout", (int, float))),
        "max_positions": field(f, "max_position_embeddings", int),
        "scale_embedding": field(f, "scale_embedding", bool),
    }


def embeddings(f: HFFolder) -> tuple[torch.Tensor, torch.Tensor]:
    """(the shared embedding, the output projection): transformers ties both sides' embeddings to
    ``model.shared.weight``, and the head to it too unless ``tie_word_embeddings`` is false."""
    present = [name for name in (SHARED, ENC_EMB, DEC_EMB) if name in f.tensors]
    if not present:
        raise CheckpointError(f"{f.path(WEIGHTS)}: tensor {SHARED} is missing (and so is every tensor tied to it)")
    shared = f.tensors[present[0]]
    for name in present[1:]:
        if not torch.equal(f.tensors[name], shared):
            raise CheckpointError(f"{f.path(WEIGHTS)}: tensor {name} differs from {present[0]}; they are one matrix")
    if field(f, "tie_word_embeddings", bool) or HEAD not in f.tensors:
        return shared, shared
    return shared, f.tensors[HEAD]


def config_from_bart(f: HFFolder, setup: Setup) -> ModelConfig:
    """The core ModelConfig of the folder; CheckpointError naming the file and field for what core cannot run.
    setup: the tokenizer (framed; the embedding must cover the ids text can give and those in use: ids no text
    produces may lie beyond it, as transformers allows), its unk id, and the decoder's first input and forced first
    output (chosen with the target language, ``hf_bart``)."""
    tokenizer, start_id, forced_bos_id = setup.tokenizer, setup.start_id, setup.forced_bos_id
    assert start_id is not None  # the BART family's setup always chooses it
    where = f.path(CONFIG)
    activation = check_shape(f, ACTIVATIONS)
    d_model, vocab_size = field(f, "d_model", int), field(f, "vocab_size", int)
    shared, head = embeddings(f)
    for name, tensor in (("the shared embedding", shared), ("lm_head", head)):
        if tuple(tensor.shape) != (vocab_size, d_model):
            raise CheckpointError(
                f"{f.path(WEIGHTS)}: {name} has shape {tuple(tensor.shape)}, {CONFIG} implies ({vocab_size}, "
                f"{d_model}) (vocab_size, d_model)"
            )
    check_rows(f, setup, vocab_size)  # the start and forced ids too, before ModelConfig would refuse them less plainly
    bias = f.tensors.get(BIAS)
    if bias is not None and tuple(bias.shape) != (1, vocab_size):
        raise CheckpointError(
            f"{f.path(WEIGHTS)}: tensor {BIAS} has shape {tuple(bias.shape)}, wanted (1, {vocab_size})"
        )
    bart_like = f.model_type in ("bart", "mbart")
    return imported_config(
        f,
        lambda generation: ModelConfig(
            src_vocab_size=vocab_size,
            tgt_vocab_size=vocab_size,
            d_model=d_model,
            **shape_fields(f),
            activation=activation,  # type: ignore[arg-type]
            norm="post" if f.model_type == "bart" else "pre",
            norm_eps=NORM_EPS,
            positional="learned" if bart_like else "sinusoidal",
            pe_layout="concatenated",  # M2M100's sinusoids (learned positions do not read it)
            share_embeddings=True,
            tie_output=head is shared,
            output_bias=bias is not None and bool(bias.any()),
            pad_id=one_id(field(f, "pad_token_id", int), "pad_token_id", where),
            bos_id=start_id,
            eos_id=one_id(setting(f, "eos_token_id", f.defaults["eos_token_id"]), "eos_token_id", where),
            unk_id=tokenizer.special_ids()["unk_id"],
            position_offset=POSITION_OFFSET,
            separate_positions=bart_like,
            embed_norm=bart_like,
            forced_bos_id=forced_bos_id,
            pad_position_zero=not bart_like,  # M2M100's positions skip <pad> (its padding row is zeros)
            **generation,
        ),
    )
