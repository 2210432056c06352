"""Hugging Face T5 / Flan-T5 / mT5 folders built locally, laid out the way the published ones are (no hub needed):
random ``T5ForConditionalGeneration`` (or ``MT5ForConditionalGeneration``) weights saved as safetensors, a
SentencePiece ``spiece.model`` trained here with T5's ids (``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2, no ``<s>``),
``extra_ids`` sentinels above it, and ``config.json``'s ``task_specific_params`` holding a translation prefix.

    build_t5_folder(path, version="1.1")  ->  path   (v1.0: ReLU FFN, tied head rescaled by d_model**-0.5;
                                                      v1.1 / Flan-T5: gated GELU, a head of its own)

The weights are random but large enough that the output depends on the input (T5's initialisation would give
almost flat distributions); norms and the relative position bias are random too (1 and 0 would hide a mapping
mistake). transformers is imported inside the functions: it is a test extra.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import sentencepiece as spm
import torch
from conftest import FIXTURES

LINES = (FIXTURES / "tiny_corpus.txt").read_text(encoding="utf-8").splitlines()
ENGLISH, GERMAN = LINES[0::2], LINES[1::2]
PREFIX = "translate English to German: "
TASKS = {  # config.json's task_specific_params, as t5-small's holds them
    "translation_en_to_de": {"prefix": PREFIX, "max_length": 300, "num_beams": 4, "early_stopping": True},
    "translation_en_to_fr": {"prefix": "translate English to French: ", "max_length": 300, "num_beams": 4},
    "summarization": {"prefix": "summarize: ", "max_length": 200, "min_length": 30},
}
EXTRA_IDS = 8  # sentinels <extra_id_0> .. <extra_id_7> above the SentencePiece pieces
SPARE_ROWS = 3  # embedding rows beyond the tokenizer, as t5-small has 32128 rows for 32100 ids
# T5's arithmetic in core's names at the tests' tiny size, with a head size that is not d_model / n_heads
T5_ARITHMETIC: dict[str, Any] = dict(
    d_kv=5,
    attention_scale=False,
    norm="pre",
    norm_kind="rms",
    norm_eps=1e-6,
    positional="relative",
    relative_buckets=8,
    relative_max_distance=20,
    linear_bias=False,
    scale_embedding=False,
)
T5_V10: dict[str, Any] = dict(T5_ARITHMETIC, activation="relu", scale_decoder_output=True)
T5_V11: dict[str, Any] = dict(T5_ARITHMETIC, activation="gelu_new", gated_ffn=True, tie_output=False)


def corpus() -> list[str]:
    """A few hundred sentences from the fixture corpus (its lines, pairs of them, the task prefixes before them)."""
    pairs = [f"{a} {b}" for a, b in zip(LINES, LINES[2:], strict=False)]
    prefixed = [task["prefix"] + line for task in TASKS.values() for line in ENGLISH]
    return (LINES + pairs + prefixed) * 3


def train_t5_spm(prefix: Path, vocab_size: int = 120) -> Path:
    """A SentencePiece model with T5's ids (pad 0, eos 1, unk 2, no bos); returns the .model file."""
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        hard_vocab_limit=False,
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
    )
    return Path(f"{prefix}.model")


def t5_model(
    n_rows: int,
    version: Literal["1.0", "1.1"] = "1.1",
    *,
    seed: int = 0,
    model_type: Literal["t5", "mt5"] = "t5",
    **config: Any,
) -> Any:
    """A random T5 (or mT5) model of ``n_rows`` vocabulary rows, eval mode, eager attention."""
    from transformers import MT5Config, MT5ForConditionalGeneration, T5Config, T5ForConditionalGeneration

    settings: dict[str, Any] = dict(
        vocab_size=n_rows,
        d_model=32,
        d_kv=12,  # not d_model / num_heads: T5's d_kv is a size of its own
        d_ff=48,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=20,
        dropout_rate=0.0,
        layer_norm_epsilon=1e-6,
        feed_forward_proj="relu" if version == "1.0" else "gated-gelu",
        tie_word_embeddings=version == "1.0",
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        task_specific_params=TASKS,
        attn_implementation="eager",
    )
    settings.update(config)
    torch.manual_seed(seed)
    if model_type == "mt5":
        model = MT5ForConditionalGeneration(MT5Config(**settings)).eval()
    else:
        model = T5ForConditionalGeneration(T5Config(**settings)).eval()
    d = model.config.d_model
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.normal_(1.0, 0.3)
            elif "relative_attention_bias" in name:
                p.normal_(0.0, 1.0)
            elif name == "shared.weight":
                p.normal_(0.0, 1.0)
            elif name.endswith((".o.weight", ".wo.weight")):  # outputs that outweigh the embedding they add to
                p.normal_(0.0, 0.6)
            elif name != "lm_head.weight":
                p.normal_(0.0, 0.15)
        if version == "1.0":  # the tied head reads the output after the d**-0.5 rescale: make its logits spread
            model.decoder.final_layer_norm.weight.mul_(6.0)
        if version != "1.0":  # a head of its own (transformers ties it to `shared` when built; untie it)
            model.lm_head.weight = torch.nn.Parameter(torch.randn(n_rows, d) * 6.0 / d**0.5)
    return model


def save_t5_folder(model: Any, spiece: Path, folder: Path, *, extra_ids: int = EXTRA_IDS) -> Path:
    """save_pretrained (safetensors) + spiece.model + tokenizer_config.json; config.json keeps what a published
    v1.1 folder says (``tie_word_embeddings`` false when the head is untied)."""
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "spiece.model").write_bytes(spiece.read_bytes())
    tokenizer_config = {
        "tokenizer_class": "T5Tokenizer",
        "extra_ids": extra_ids,
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": 512,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2), encoding="utf-8")
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    untied = model.lm_head.weight is not model.shared.weight
    config["tie_word_embeddings"] = not untied
    config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return folder


def build_t5_folder(
    path: Path,
    version: Literal["1.0", "1.1"] = "1.1",
    *,
    seed: int = 0,
    model_type: Literal["t5", "mt5"] = "t5",
    **config: Any,
) -> Path:
    """A complete tiny Hugging Face T5 folder at ``path`` (see the module docstring); ``config`` overrides the
    T5Config settings. Returns ``path``."""
    path = Path(path)
    spiece = train_t5_spm(path.parent / f"{path.name}-spiece")
    n_ids = spm.SentencePieceProcessor(model_file=str(spiece)).get_piece_size() + EXTRA_IDS
    model = t5_model(n_ids + SPARE_ROWS, version, seed=seed, model_type=model_type, **config)
    return save_t5_folder(model, spiece, path)
