"""transformers' MarianConfig -> core's ModelConfig: what each config.json field means for core, the tensor names
both sides share, and every refusal by file and field (``hf_marian`` converts the weights with it; the exporter
reads the same names the other way)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Literal

import torch

from ..config import ModelConfig
from ..errors import CheckpointError
from ..positional import sinusoidal_table
from .hf_folder import CONFIG, GENERATION_CONFIG, TOKENIZER_CONFIG, VOCAB, WEIGHTS, HFFolder, HFMarianFolder

# transformers 5.23's MarianConfig defaults: what a field absent from config.json means.
MARIAN_DEFAULTS: dict[str, Any] = {
    "vocab_size": 58101,
    "decoder_vocab_size": None,
    "max_position_embeddings": 1024,
    "encoder_layers": 12,
    "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16,
    "decoder_layers": 12,
    "decoder_ffn_dim": 4096,
    "decoder_attention_heads": 16,
    "is_encoder_decoder": True,
    "activation_function": "gelu",
    "d_model": 1024,
    "dropout": 0.1,
    "decoder_start_token_id": 58100,
    "scale_embedding": False,
    "pad_token_id": 58100,
    "eos_token_id": 0,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
}
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
SHARED, ENC_EMB, DEC_EMB, HEAD = (
    "model.shared.weight",
    "model.encoder.embed_tokens.weight",
    "model.decoder.embed_tokens.weight",
    "lm_head.weight",
)
BIAS = "final_logits_bias"
POSITIONS = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")
NORM_EPS = 1e-5  # transformers' Marian LayerNorms use nn.LayerNorm's default
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
    """Every layer parameter: core name -> transformers' MarianMTModel name (the importer and the exporter's map)."""
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


# --------------------------------------------------------------------------- configuration
def field(
    config: dict[str, Any], name: str, kind: type, where: Path, defaults: dict[str, Any] = MARIAN_DEFAULTS
) -> Any:
    """config.json's ``name`` (``defaults``: transformers' when absent), checked to be a ``kind``."""
    value = config.get(name, defaults.get(name))
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CheckpointError(
            f"{where}: field {name} must be {'true or false' if kind is bool else kind.__name__}, got {value!r}"
        )
    return value


def one_id(value: Any, name: str, where: Path) -> int:
    """One token id of a config field (transformers writes some as one-element lists); CheckpointError otherwise."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CheckpointError(f"{where}: field {name} must be one token id, got {value!r}")
    return value


def _piece(tokenizer_config: dict[str, Any], name: str, default: str, where: Path) -> str:
    value = tokenizer_config.get(name, default)
    if isinstance(value, dict):  # a serialised AddedToken
        value = value.get("content")
    if not isinstance(value, str) or not value:
        raise CheckpointError(f"{where}: field {name} must be a piece such as {default!r}, got {value!r}")
    return value


def special_pieces(f: HFMarianFolder) -> dict[str, str]:
    """unk / eos / pad pieces as tokenizer_config.json names them (MarianTokenizer's defaults otherwise)."""
    where = f.path(TOKENIZER_CONFIG)
    return {
        f"{key}_piece": _piece(f.tokenizer_config, f"{key}_token", default, where)
        for key, default in (("unk", "<unk>"), ("eos", "</s>"), ("pad", "<pad>"))
    }


def beam_settings(f: HFFolder) -> dict[str, Any]:
    """``ModelConfig``'s beam fields for an imported folder: beam search as ``generate`` runs it ("transformers",
    ``core.beam_finish``), with ``length_penalty`` and ``early_stopping`` as generate reads them:
    generation_config.json's when the folder has one, else config.json's, else ``GenerationConfig``'s defaults
    (1.0, False)."""
    source, where = (
        (f.generation_config, f.path(GENERATION_CONFIG)) if f.generation_config else (f.config, f.path(CONFIG))
    )
    penalty = source.get("length_penalty", 1.0)
    if not isinstance(penalty, (int, float)) or isinstance(penalty, bool) or not math.isfinite(penalty):
        raise CheckpointError(f"{where}: field length_penalty must be a number, got {penalty!r}")
    stopping = source.get("early_stopping", False)
    if not isinstance(stopping, bool) and stopping != "never":
        raise CheckpointError(f'{where}: field early_stopping must be true, false or "never", got {stopping!r}')
    return {"beam": "transformers", "length_penalty": float(penalty), "early_stopping": stopping}


def generation_rules(f: HFFolder) -> dict[str, Any]:
    """``ModelConfig``'s generation rules for an imported folder (``core.generation_rules``): ``min_length``,
    ``no_repeat_ngram_size`` and ``forced_eos_token_id`` as generate reads them: generation_config.json's when the
    folder has one, else config.json's; absent or null = off (``GenerationConfig``'s defaults)."""
    source, where = (
        (f.generation_config, f.path(GENERATION_CONFIG)) if f.generation_config else (f.config, f.path(CONFIG))
    )
    rules: dict[str, Any] = {}
    for name in ("min_length", "no_repeat_ngram_size"):
        value = source.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise CheckpointError(f"{where}: field {name} must be a whole number of at least 0, got {value!r}")
        rules[name] = value
    forced = source.get("forced_eos_token_id")
    if forced is not None:
        rules["forced_eos_id"] = one_id(forced, "forced_eos_token_id", where)
    return rules


def suppressed_ids(f: HFFolder) -> tuple[int, ...]:
    """The ids transformers' generate never picks for this folder: generation_config.json's ``bad_words_ids``
    (one-token entries) and ``suppress_tokens``; config.json's when the folder has no generation_config.json."""
    source, where = (
        (f.generation_config, f.path(GENERATION_CONFIG)) if f.generation_config else (f.config, f.path(CONFIG))
    )
    ids: list[int] = []
    bad = source.get("bad_words_ids") or []
    if not isinstance(bad, list) or any(not isinstance(entry, list) for entry in bad):
        raise CheckpointError(f"{where}: field bad_words_ids must be a list of id lists, got {bad!r}")
    for entry in bad:
        if len(entry) != 1:
            raise CheckpointError(
                f"{where}: field bad_words_ids holds {entry!r}; only single-token entries are supported (core "
                "suppresses ids, not sequences)"
            )
        ids.append(one_id(entry, "bad_words_ids", where))
    suppress = source.get("suppress_tokens") or []
    if not isinstance(suppress, list):
        raise CheckpointError(f"{where}: field suppress_tokens must be a list of ids, got {suppress!r}")
    ids += [one_id(i, "suppress_tokens", where) for i in suppress]
    eos = source.get("eos_token_id", f.config.get("eos_token_id", MARIAN_DEFAULTS["eos_token_id"]))
    if eos in ids:
        raise CheckpointError(
            f"{where}: field bad_words_ids / suppress_tokens bans eos ({eos}): decoding could not stop"
        )
    if source.get("begin_suppress_tokens"):
        raise CheckpointError(f"{where}: field begin_suppress_tokens is not supported")
    return tuple(sorted(set(ids)))


def embeddings(f: HFMarianFolder, *, share: bool, tie: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(encoder embedding, decoder embedding, output projection) as MarianMTModel computes with them.

    transformers ties only when ``tie_word_embeddings``: then the encoder's, the decoder's and the output's weights
    are ``model.shared.weight`` (``share_encoder_decoder_embeddings``) or the output is the decoder's; a tied name
    the file lacks takes the value of the one it is tied to. Without tying each is its own tensor."""
    if tie:
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


def position_layout(f: HFMarianFolder, cfg: ModelConfig) -> Literal["concatenated_hf", "concatenated"]:
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


def config_from_hf(f: HFMarianFolder) -> ModelConfig:
    """The core ModelConfig of a Marian folder; CheckpointError naming the file and field for what core cannot run."""
    c, where, weights = f.config, f.path(CONFIG), f.path(WEIGHTS)
    for name, expected in LEGACY_FIELDS.items():
        if name in c and c[name] != expected:
            raise CheckpointError(
                f"{where}: field {name} is {c[name]!r}; transformers' MarianMTModel ignores it and runs "
                f"{name}={expected!r}, so these weights were made for another network — not supported"
            )
    if not field(c, "is_encoder_decoder", bool, where):
        raise CheckpointError(
            f"{where}: field is_encoder_decoder is false; only encoder-decoder Marian models are supported"
        )
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if field(c, a, int, where) != field(c, b, int, where):
            raise CheckpointError(
                f"{where}: fields {a} ({c.get(a)}) and {b} ({c.get(b)}) differ; core needs them equal"
            )
    activation = field(c, "activation_function", str, where)
    if activation not in ACTIVATIONS:
        raise CheckpointError(
            f"{where}: field activation_function is {activation!r}; supported: {', '.join(sorted(ACTIVATIONS))}"
        )
    tok_where = f.path(TOKENIZER_CONFIG)
    if f.tokenizer_config.get("separate_vocabs"):
        raise CheckpointError(f"{tok_where}: field separate_vocabs is true; only one joint vocab.json is supported")
    if f.tokenizer_config.get("sp_model_kwargs"):
        raise CheckpointError(
            f"{tok_where}: field sp_model_kwargs {f.tokenizer_config['sp_model_kwargs']!r} is not supported"
        )
    share = field(c, "share_encoder_decoder_embeddings", bool, where)
    tie = field(c, "tie_word_embeddings", bool, where)
    d_model = field(c, "d_model", int, where)
    vocab_size = field(c, "vocab_size", int, where)
    target_vocab = (
        vocab_size
        if share
        else field(c, "decoder_vocab_size", int, where)
        if c.get("decoder_vocab_size")
        else vocab_size
    )
    enc, dec, head = embeddings(f, share=share, tie=tie)
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
    eos = one_id(c.get("eos_token_id", MARIAN_DEFAULTS["eos_token_id"]), "eos_token_id", where)
    pad = one_id(c.get("pad_token_id", MARIAN_DEFAULTS["pad_token_id"]), "pad_token_id", where)
    start = one_id(
        c.get("decoder_start_token_id", MARIAN_DEFAULTS["decoder_start_token_id"]), "decoder_start_token_id", where
    )
    pieces = special_pieces(f)
    unk_piece = pieces["unk_piece"]
    said: dict[str, int | None] = {unk_piece: None, pieces["eos_piece"]: eos, pieces["pad_piece"]: pad}
    for piece, token_id in said.items():
        if piece not in f.vocab:
            raise CheckpointError(f"{f.path(VOCAB)}: has no {piece!r}, the piece {TOKENIZER_CONFIG} names")
        if token_id is not None and f.vocab[piece] != token_id:
            which = "eos_token_id" if token_id == eos else "pad_token_id"
            raise CheckpointError(
                f"{f.path(VOCAB)}: {piece!r} has id {f.vocab[piece]} but {CONFIG} says {which} {token_id}; the "
                "tokenizer does not belong to these weights"
            )
    if max(f.vocab.values()) >= min(vocab_size, target_vocab):
        raise CheckpointError(
            f"{f.path(VOCAB)}: holds id {max(f.vocab.values())}, beyond the model's "
            f"{min(vocab_size, target_vocab)} rows"
        )
    try:
        cfg = ModelConfig(
            src_vocab_size=vocab_size,
            tgt_vocab_size=target_vocab,
            d_model=d_model,
            n_heads=field(c, "encoder_attention_heads", int, where),
            n_encoder_layers=field(c, "encoder_layers", int, where),
            n_decoder_layers=field(c, "decoder_layers", int, where),
            d_ff=field(c, "encoder_ffn_dim", int, where),
            dropout=float(c.get("dropout", MARIAN_DEFAULTS["dropout"])),
            activation=ACTIVATIONS[activation],  # type: ignore[arg-type]
            norm="post",
            norm_eps=NORM_EPS,
            positional="sinusoidal",
            pe_layout="concatenated_hf",  # until the stored tables are read, below
            max_positions=field(c, "max_position_embeddings", int, where),
            scale_embedding=field(c, "scale_embedding", bool, where),
            share_embeddings=enc.shape == dec.shape and torch.equal(enc, dec),
            tie_output=torch.equal(head, dec),
            output_bias=bias is not None and bool(bias.any()),
            decoder_self="attention",
            start="bos",
            pad_id=pad,
            bos_id=start,
            eos_id=eos,
            unk_id=f.vocab[unk_piece],
            suppress_ids=suppressed_ids(f),
            **beam_settings(f),
            **generation_rules(f),
        )
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{where}: cannot be run by core: {exc}") from None
    return dataclasses.replace(cfg, pe_layout=position_layout(f, cfg))
