"""transformers' T5Config / MT5Config -> core's ModelConfig: what each config.json field means for core, the tensor
names both sides share (``t5_names``: the importer reads them, the exporter writes them), and every refusal by file
and field.

T5 in core's terms: pre-norm layers with RMSNorm (``norm_kind='rms'``, eps ``layer_norm_epsilon``) and a final norm
per stack, no absolute positions but a relative position bias per stack (``positional='relative'``; stored in the
first layer of each stack, ``relative_attention_bias``), scores not scaled by 1/sqrt(d_kv), heads of ``d_kv``
features, no biases anywhere, unscaled embeddings shared by both sides, the FFN ``feed_forward_proj`` names (relu,
or gated-gelu = gelu_new with a linear branch), and the output head: ``lm_head.weight`` when the file has its own,
else the shared embedding; T5 (not mT5) rescales the decoder's output by d_model**-0.5 when its config ties.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from ..config import ModelConfig
from ..errors import CheckpointError
from .hf_common import field, imported_config, one_id
from .hf_entry import HFFolder, Setup
from .hf_folder import CONFIG, WEIGHTS

# transformers 5.23's T5Config defaults (MT5Config's differ in feed_forward_proj, vocab_size and tie_word_embeddings)
T5_DEFAULTS: dict[str, Any] = {
    "vocab_size": 32128,
    "d_model": 512,
    "d_kv": 64,
    "d_ff": 2048,
    "num_layers": 6,
    "num_decoder_layers": None,
    "num_heads": 8,
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
    "dropout_rate": 0.1,
    "layer_norm_epsilon": 1e-6,
    "feed_forward_proj": "relu",
    "is_encoder_decoder": True,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "decoder_start_token_id": 0,
    "tie_word_embeddings": True,
}
MT5_DEFAULTS = dict(T5_DEFAULTS, vocab_size=250112, feed_forward_proj="gated-gelu", tie_word_embeddings=False)
ARCHITECTURES = {"t5": "T5ForConditionalGeneration", "mt5": "MT5ForConditionalGeneration"}
# feed_forward_proj's activation -> core's (transformers: 'gated-gelu' runs gelu_new, the tanh approximation)
ACTIVATIONS: dict[str, Literal["relu", "gelu", "gelu_new", "silu"]] = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_new",
    "silu": "silu",
    "swish": "silu",
}
SHARED, ENC_EMB, DEC_EMB, HEAD = (
    "shared.weight",
    "encoder.embed_tokens.weight",
    "decoder.embed_tokens.weight",
    "lm_head.weight",
)
# old checkpoints store an unused bias table in the first cross-attention (transformers ignores it too)
IGNORED = ("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",)


def feed_forward(f: HFFolder) -> tuple[Literal["relu", "gelu", "gelu_new", "silu"], bool]:
    """(activation, gated) of ``feed_forward_proj``: 'relu' -> (relu, plain), 'gated-gelu' -> (gelu_new, gated)."""
    proj = field(f, "feed_forward_proj", str)
    parts = proj.split("-")
    gated = len(parts) == 2 and parts[0] == "gated"
    name = "gelu_new" if proj == "gated-gelu" else parts[-1]
    if len(parts) > 2 or (len(parts) == 2 and not gated) or name not in ACTIVATIONS:
        raise CheckpointError(
            f"{f.path(CONFIG)}: field feed_forward_proj is {proj!r}; supported: "
            f"{', '.join(sorted(ACTIVATIONS))}, each optionally 'gated-' (e.g. 'relu', 'gated-gelu')"
        )
    return ACTIVATIONS[name], gated


def head(f: HFFolder) -> tuple[torch.Tensor, bool]:
    """(the output projection, whether the decoder's output is rescaled by d_model**-0.5 before it).

    As transformers 5.23 loads the folder: ``lm_head.weight`` when the file holds one that differs from the shared
    embedding, else the shared embedding; T5 rescales when config.json says ``scale_decoder_outputs`` (written by
    transformers >= 5) or, before that field, unless ``tie_word_embeddings`` is false; mT5 never rescales."""
    shared = f.tensors.get(SHARED)
    if shared is None:
        raise CheckpointError(f"{f.path(WEIGHTS)}: tensor {SHARED} (the embedding both sides share) is missing")
    projection = f.tensors.get(HEAD, shared)
    if f.model_type == "mt5":
        return projection, False
    scale = f.config.get("scale_decoder_outputs")
    if scale is None:
        scale = f.config.get("tie_word_embeddings", True) is not False
    if not isinstance(scale, bool):
        raise CheckpointError(f"{f.path(CONFIG)}: field scale_decoder_outputs must be true or false, got {scale!r}")
    return projection, scale


def t5_names(cfg: ModelConfig) -> dict[str, str]:
    """Every parameter but the embeddings and the head: core name -> transformers' T5ForConditionalGeneration name."""
    names = {
        "encoder_norm.weight": "encoder.final_layer_norm.weight",
        "decoder_norm.weight": "decoder.final_layer_norm.weight",
    }
    names["encoder_bias.embedding.weight"] = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    names["decoder_bias.embedding.weight"] = "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    projections = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "out_proj": "o"}
    ffn = (
        {"linear1": "wi_0", "linear_up": "wi_1", "linear2": "wo"}
        if cfg.gated_ffn
        else {"linear1": "wi", "linear2": "wo"}
    )
    for stack, count in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        blocks = [("self_attn", "SelfAttention")] + ([("cross_attn", "EncDecAttention")] if stack == "decoder" else [])
        for i in range(count):
            ours, theirs = f"{stack}_layers.{i}", f"{stack}.block.{i}.layer"
            for sub, (part, their_part) in enumerate(blocks):
                names[f"{ours}.{part}_norm.weight"] = f"{theirs}.{sub}.layer_norm.weight"
                for proj, their_proj in projections.items():
                    names[f"{ours}.{part}.{proj}.weight"] = f"{theirs}.{sub}.{their_part}.{their_proj}.weight"
            sub = len(blocks)
            names[f"{ours}.ffn_norm.weight"] = f"{theirs}.{sub}.layer_norm.weight"
            for lin, their_lin in ffn.items():
                names[f"{ours}.ffn.{lin}.weight"] = f"{theirs}.{sub}.DenseReluDense.{their_lin}.weight"
    return names


def config_from_t5(f: HFFolder, setup: Setup) -> ModelConfig:
    """The core ModelConfig of a T5 / mT5 folder (its unk id: the tokenizer's, ``setup``); CheckpointError naming
    the file and field for what core cannot run."""
    where = f.path(CONFIG)
    if not field(f, "is_encoder_decoder", bool):
        raise CheckpointError(f"{where}: field is_encoder_decoder is false; only encoder-decoder T5 models open here")
    activation, gated = feed_forward(f)
    projection, rescale = head(f)
    shared = f.tensors[SHARED]
    vocab, d_model = field(f, "vocab_size", int), field(f, "d_model", int)
    for name, tensor in ((SHARED, shared), (HEAD, projection)):
        if tuple(tensor.shape) != (vocab, d_model):
            raise CheckpointError(
                f"{f.path(WEIGHTS)}: tensor {name} has shape {tuple(tensor.shape)}, {CONFIG} implies "
                f"({vocab}, {d_model}) (vocab_size, d_model)"
            )
    ids = {}
    for name in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
        ids[name] = one_id(f.generation_config.get(name, f.config.get(name, f.defaults[name])), name, where)
    decoder_layers = f.config.get("num_decoder_layers")
    return imported_config(
        f,
        lambda generation: ModelConfig(
            src_vocab_size=vocab,
            tgt_vocab_size=vocab,
            d_model=d_model,
            n_heads=field(f, "num_heads", int),
            n_encoder_layers=field(f, "num_layers", int),
            n_decoder_layers=field(f, "num_decoder_layers" if decoder_layers is not None else "num_layers", int),
            d_ff=field(f, "d_ff", int),
            dropout=float(field(f, "dropout_rate", (int, float))),
            activation=activation,
            norm="pre",
            norm_eps=float(field(f, "layer_norm_epsilon", (int, float))),
            positional="relative",
            max_positions=512,  # unused: relative positions have no table
            scale_embedding=False,
            share_embeddings=True,
            tie_output=projection is shared or torch.equal(projection, shared),
            output_bias=False,
            start="bos",
            pad_id=ids["pad_token_id"],
            bos_id=ids["decoder_start_token_id"],
            eos_id=ids["eos_token_id"],
            unk_id=setup.tokenizer.special_ids()["unk_id"],
            d_kv=field(f, "d_kv", int),
            attention_scale=False,
            norm_kind="rms",
            gated_ffn=gated,
            linear_bias=False,
            relative_buckets=field(f, "relative_attention_num_buckets", int),
            relative_max_distance=field(f, "relative_attention_max_distance", int),
            scale_decoder_output=rescale,
            **generation,
        ),
    )
