"""transformers' MarianConfig -> core's ModelConfig: what each config.json field means for core, the pieces the
tokenizer names, and every refusal by file and field (``hf_marian`` converts the weights with it; the exporter reads
the same names the other way). transformers' Marian is BART's code with other defaults: its tensor names are
``hf_bart_config``'s."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import torch

from ..config import ModelConfig
from ..errors import CheckpointError
from ..transformer.positional import sinusoidal_table
from .hf_bart_config import BIAS, DEC_EMB, ENC_EMB, HEAD, NORM_EPS, SHAPE_DEFAULTS, SHARED, check_shape, shape_fields
from .hf_common import field, imported_config, one_id
from .hf_entry import HFFolder
from .hf_folder import CONFIG, TOKENIZER_CONFIG, VOCAB, WEIGHTS

# transformers 5.23's MarianConfig defaults: what a field absent from config.json means.
MARIAN_DEFAULTS: dict[str, Any] = {
    **SHAPE_DEFAULTS,
    "vocab_size": 58101,
    "decoder_vocab_size": None,
    "activation_function": "gelu",
    "decoder_start_token_id": 58100,
    "scale_embedding": False,
    "pad_token_id": 58100,
    "eos_token_id": 0,
    "share_encoder_decoder_embeddings": True,
}
ARCHITECTURES = {"marian": "MarianMTModel"}
ACTIVATIONS = {"swish": "swish", "silu": "swish", "gelu": "gelu", "relu": "relu"}
# BART-family fields older Marian config.json files carry. transformers' Marian ignores them (it is always
# post-norm, no embedding LayerNorm, no final LayerNorm, static sinusoids, no extra logits bias); a value other
# than this says the weights were made for another network, so it is refused rather than ignored.
LEGACY_FIELDS = {
    "normalize_before": False,
    "normalize_embedding": False,
    "add_final_layer_norm": False,
    "static_position_embeddings": True,
    "add_bias_logits": False,
}
POSITIONS = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")
SPECIAL_DEFAULTS = {"unk": "<unk>", "eos": "</s>", "pad": "<pad>"}  # MarianTokenizer's


def token_id(f: HFFolder, name: str) -> int:
    """One token id of config.json (MarianConfig's default when absent)."""
    return one_id(f.config.get(name, f.defaults[name]), name, f.path(CONFIG))


def special_pieces(f: HFFolder) -> dict[str, str]:
    """unk / eos / pad pieces as tokenizer_config.json names them (MarianTokenizer's defaults otherwise), checked
    against vocab.json (each there; eos and pad at config.json's ids)."""
    where = f.path(TOKENIZER_CONFIG)
    pieces = {}
    for key, default in SPECIAL_DEFAULTS.items():
        value = f.tokenizer_config.get(f"{key}_token", default)
        value = value.get("content") if isinstance(value, dict) else value  # a serialised AddedToken
        if not isinstance(value, str) or not value:
            raise CheckpointError(f"{where}: field {key}_token must be a piece such as {default!r}, got {value!r}")
        pieces[f"{key}_piece"] = value
    eos, pad = token_id(f, "eos_token_id"), token_id(f, "pad_token_id")
    said: dict[str, int | None] = {pieces["unk_piece"]: None, pieces["eos_piece"]: eos, pieces["pad_piece"]: pad}
    for piece, wanted in said.items():
        if piece not in f.vocab:
            raise CheckpointError(f"{f.path(VOCAB)}: has no {piece!r}, the piece {TOKENIZER_CONFIG} names")
        if wanted is not None and f.vocab[piece] != wanted:
            which = "eos_token_id" if wanted == eos else "pad_token_id"
            raise CheckpointError(
                f"{f.path(VOCAB)}: {piece!r} has id {f.vocab[piece]} but {CONFIG} says {which} {wanted}; the "
                "tokenizer does not belong to these weights"
            )
    return pieces


def embeddings(f: HFFolder) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(encoder embedding, decoder embedding, output projection) as MarianMTModel computes with them.

    transformers ties only when ``tie_word_embeddings``: then the encoder's, the decoder's and the output's weights
    are ``model.shared.weight`` (``share_encoder_decoder_embeddings``) or the output is the decoder's; a tied name
    the file lacks takes the value of the one it is tied to. Without tying each is its own tensor."""
    if field(f, "tie_word_embeddings", bool):
        share = field(f, "share_encoder_decoder_embeddings", bool)
        groups = [[SHARED, ENC_EMB, DEC_EMB, HEAD]] if share else [[ENC_EMB], [DEC_EMB, HEAD]]
    else:
        groups = [[ENC_EMB], [DEC_EMB], [HEAD]]

    def resolve(name: str) -> torch.Tensor:
        group = next(g for g in groups if name in g)
        present = [n for n in ([name] + group) if n in f.tensors]
        if not present:
            raise CheckpointError(f"{f.path(WEIGHTS)}: tensor {name} is missing (and so is every tensor tied to it)")
        return f.tensors[present[0]]

    return resolve(ENC_EMB), resolve(DEC_EMB), resolve(HEAD)


def position_layout(f: HFFolder, cfg: ModelConfig) -> Literal["concatenated_hf", "concatenated"]:
    """Which sinusoids the folder's stored position tables are: transformers' own ("concatenated_hf"; also when
    none is stored) or Marian C++'s ("concatenated": the frequencies Bergamot models use, which this lab's
    ``export-hf`` stores so that transformers loads them); CheckpointError for anything else (learned positions)."""
    stored = {name: f.tensors[name] for name in POSITIONS if name in f.tensors}
    if not stored:  # nothing to compare: no table is built (max_position_embeddings may be large)
        return "concatenated_hf"
    shape = (cfg.max_positions, cfg.d_model)
    wrong = next((name for name, t in stored.items() if tuple(t.shape) != shape), None)
    if wrong is not None:  # the stored tensor's own size: tables are built only for a tensor that is there
        raise CheckpointError(
            f"{f.path(WEIGHTS)}: tensor {wrong} has shape {tuple(stored[wrong].shape)}, {CONFIG} implies {shape} "
            "(max_position_embeddings x d_model)"
        )
    layouts: tuple[Literal["concatenated_hf", "concatenated"], ...] = ("concatenated_hf", "concatenated")
    for layout in layouts:
        table = sinusoidal_table(cfg.max_positions, cfg.d_model, layout)
        if all(torch.allclose(t.float(), table, atol=1e-3) for t in stored.values()):
            return layout
    raise CheckpointError(
        f"{f.path(WEIGHTS)}: tensor {next(iter(stored))} is neither transformers' sinusoid table nor Marian's "
        "(max_position_embeddings x d_model); learned or other positions are not supported"
    )


def config_from_marian(f: HFFolder) -> ModelConfig:
    """The core ModelConfig of a Marian folder; CheckpointError naming the file and field for what core cannot run."""
    c, where, weights = f.config, f.path(CONFIG), f.path(WEIGHTS)
    for name, expected in LEGACY_FIELDS.items():
        if name in c and c[name] != expected:
            raise CheckpointError(
                f"{where}: field {name} is {c[name]!r}; transformers' MarianMTModel ignores it and runs "
                f"{name}={expected!r}, so these weights were made for another network — not supported"
            )
    activation = check_shape(f, ACTIVATIONS)
    d_model, vocab_size = field(f, "d_model", int), field(f, "vocab_size", int)
    target_vocab = vocab_size
    if not field(f, "share_encoder_decoder_embeddings", bool) and c.get("decoder_vocab_size"):
        target_vocab = field(f, "decoder_vocab_size", int)
    enc, dec, head = embeddings(f)
    for name, tensor, rows in (
        ("encoder embedding", enc, vocab_size),
        ("decoder embedding", dec, target_vocab),
        ("lm_head", head, target_vocab),
    ):
        if tuple(tensor.shape) != (rows, d_model):
            raise CheckpointError(
                f"{weights}: the {name} has shape {tuple(tensor.shape)}, {CONFIG} implies ({rows}, {d_model}) "
                "(vocab_size / decoder_vocab_size, d_model)"
            )
    bias = f.tensors.get(BIAS)
    if bias is not None and tuple(bias.shape) != (1, target_vocab):
        raise CheckpointError(
            f"{weights}: tensor {BIAS} has shape {tuple(bias.shape)}, {CONFIG} implies (1, {target_vocab})"
        )
    unk_piece = special_pieces(f)["unk_piece"]
    if max(f.vocab.values()) >= min(vocab_size, target_vocab):
        raise CheckpointError(
            f"{f.path(VOCAB)}: holds id {max(f.vocab.values())}, beyond the model's "
            f"{min(vocab_size, target_vocab)} rows"
        )
    cfg = imported_config(
        f,
        lambda generation: ModelConfig(
            src_vocab_size=vocab_size,
            tgt_vocab_size=target_vocab,
            d_model=d_model,
            **shape_fields(f),
            activation=activation,  # type: ignore[arg-type]
            norm="post",
            norm_eps=NORM_EPS,
            positional="sinusoidal",
            pe_layout="concatenated_hf",  # until the stored tables are read, below
            share_embeddings=enc.shape == dec.shape and torch.equal(enc, dec),
            tie_output=torch.equal(head, dec),
            output_bias=bias is not None and bool(bias.any()),
            decoder_self="attention",
            start="bos",
            pad_id=token_id(f, "pad_token_id"),
            bos_id=token_id(f, "decoder_start_token_id"),
            eos_id=token_id(f, "eos_token_id"),
            unk_id=f.vocab[unk_piece],
            **generation,
        ),
    )
    return dataclasses.replace(cfg, pe_layout=position_layout(f, cfg))
