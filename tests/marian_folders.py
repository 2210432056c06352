"""Hugging Face Marian folders built locally, laid out the way Opus-MT folders are (no hub needed): random
``MarianMTModel`` weights saved as safetensors, source and target SentencePiece models trained on the fixture
corpus, a joint ``vocab.json`` (``</s>`` 0, ``<unk>`` 1, the pieces of both models, ``<pad>`` last = the decoder's
start token), ``tokenizer_config.json`` and ``generation_config.json`` (``bad_words_ids`` bans ``<pad>``).

transformers is imported inside the functions: it is a test extra, and the tests that use it skip without it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece as spm
import torch
from conftest import FIXTURES, tiny_config

from core.decoding.shortlist import MAGIC

LINES = (FIXTURES / "tiny_corpus.txt").read_text(encoding="utf-8").splitlines()
ENGLISH, GERMAN = LINES[0::2], LINES[1::2]
LANGUAGE_CODES = (">>deu<<", ">>nld<<")  # multilingual Opus-MT targets: the source text starts with one


def train_spm(lines: list[str], prefix: Path, vocab_size: int) -> Path:
    """A SentencePiece model with sentencepiece's default ids (unk 0, bos 1, eos 2): not vocab.json's, on purpose."""
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines * 4),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


def joint_vocab(source: Path, target: Path) -> dict[str, int]:
    """Opus-MT's vocab.json layout: '</s>' 0, '<unk>' 1, language codes, every other piece of both models, '<pad>'."""
    vocab = {"</s>": 0, "<unk>": 1}
    for code in LANGUAGE_CODES:
        vocab[code] = len(vocab)
    for path in (source, target):
        sp = spm.SentencePieceProcessor(model_file=str(path))
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if piece not in vocab and not sp.is_control(i) and not sp.is_unknown(i):
                vocab[piece] = len(vocab)
    vocab["<pad>"] = len(vocab)
    return vocab


def write_tokenizer(folder: Path, spm_sizes: tuple[int, int] = (70, 60)) -> dict[str, int]:
    """source.spm (English), target.spm (German), vocab.json, tokenizer_config.json; returns the vocabulary."""
    folder.mkdir(parents=True, exist_ok=True)
    work = folder.parent / f"{folder.name}-spm"
    work.mkdir(exist_ok=True)
    source = train_spm(ENGLISH, work / "en", spm_sizes[0])
    target = train_spm(GERMAN, work / "de", spm_sizes[1])
    shutil.copyfile(source, folder / "source.spm")
    shutil.copyfile(target, folder / "target.spm")
    vocab = joint_vocab(source, target)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=2), encoding="utf-8")
    tokenizer_config = {
        "source_lang": "en",
        "target_lang": "de",
        "unk_token": "<unk>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "model_max_length": 512,
        "separate_vocabs": False,
        "sp_model_kwargs": {},
        "tokenizer_class": "MarianTokenizer",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    return vocab


def marian_model(vocab: dict[str, int], *, seed: int = 0, pad_bias: float = 0.0, **config: Any) -> Any:
    """A random MarianMTModel for ``vocab`` (eval mode, eager attention) with Opus-MT's special ids. LayerNorms and
    final_logits_bias are random too (transformers initialises them to 1 / 0, which would hide a mapping mistake);
    ``pad_bias`` is added to <pad>'s logit (so a decoder that forgot to ban it would pick it)."""
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    pad = vocab["<pad>"]
    tiny = tiny_config()  # the tests' one tiny shape, in Marian's names
    settings: dict[str, Any] = dict(
        vocab_size=len(vocab),
        d_model=tiny.d_model,
        encoder_layers=tiny.n_encoder_layers,
        decoder_layers=tiny.n_decoder_layers,
        encoder_attention_heads=tiny.n_heads,
        decoder_attention_heads=tiny.n_heads,
        encoder_ffn_dim=tiny.d_ff,
        decoder_ffn_dim=tiny.d_ff,
        activation_function="swish",
        max_position_embeddings=64,
        scale_embedding=True,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        bos_token_id=None,
        init_std=0.3,
        attn_implementation="eager",
    )
    settings.update(config)
    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(**settings)).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.normal_(1.0, 0.3)
                module.bias.normal_(0.0, 0.3)
        model.final_logits_bias.normal_(0.0, 0.5)
        model.final_logits_bias[0, pad] += pad_bias
    model.generation_config = GenerationConfig(
        bad_words_ids=[[pad]],
        decoder_start_token_id=pad,
        eos_token_id=0,
        pad_token_id=pad,
        forced_eos_token_id=0,
        max_length=512,
        num_beams=4,
    )
    return model


def generation(vocab: dict[str, int], *, num_beams: int, max_new_tokens: int) -> Any:
    """The settings the parity tests generate with: the folder's ban on <pad>, no eos forced at the length limit,
    length penalty 1 (core's beam search divides by the length too). Assign it to ``model.generation_config``:
    passed to ``generate`` instead, the unset fields would come back from the model's own (forced eos included)."""
    from transformers import GenerationConfig

    pad = vocab["<pad>"]
    return GenerationConfig(
        num_beams=num_beams,
        do_sample=False,
        max_new_tokens=max_new_tokens,
        bad_words_ids=[[pad]],
        forced_eos_token_id=None,
        decoder_start_token_id=pad,
        eos_token_id=0,
        pad_token_id=pad,
        length_penalty=1.0,
        early_stopping=False,
        num_return_sequences=1,
    )


def save_folder(model: Any, folder: Path, *, readme: str | None = None) -> Path:
    """save_pretrained(safe_serialization=True) beside the tokenizer files; a README.md when given."""
    model.save_pretrained(folder, safe_serialization=True)
    if readme is not None:
        (folder / "README.md").write_text(readme, encoding="utf-8")
    return folder


def train_marian_spm(prefix: Path, lines: list[str] = LINES) -> Path:
    """A SentencePiece model with Marian's conventions (``</s>`` 0, ``<unk>`` 1, no ``<s>``/``<pad>``) trained on
    ``lines``; returns the .model file."""
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines * 4),
        model_prefix=str(prefix),
        vocab_size=90,
        eos_id=0,
        unk_id=1,
        bos_id=-1,
        pad_id=-1,
        hard_vocab_limit=False,
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


def marian_like_checkpoint(directory: Path, *, seed: int = 0, **overrides: Any) -> Path:
    """A core checkpoint shaped like the Bergamot-derived ones (distilled-en-pt): Marian's vocabulary conventions
    (``</s>`` 0, ``<unk>`` 1, no ``<s>`` or ``<pad>``), decoding from a zero vector, concatenated sinusoids at Marian
    C++'s frequencies, an output bias; random weights, LayerNorms and bias included."""
    from core import CheckpointMeta, Transformer, save_checkpoint

    spm_model = train_marian_spm(directory.parent / f"{directory.name}-spm")
    vocab = spm.SentencePieceProcessor(model_file=str(spm_model)).get_piece_size()
    settings: dict[str, Any] = dict(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        norm_eps=1e-5,
        pe_layout="concatenated",
        output_bias=True,
        start="zeros",
        pad_id=0,
        bos_id=0,
        eos_id=0,
        unk_id=1,
    )
    settings.update(overrides)
    torch.manual_seed(seed)
    model = Transformer(tiny_config(**settings))  # conftest's tiny shape with Marian's conventions
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.normal_(1.0 if name.endswith("weight") else 0.0, 0.3)
        model.output.bias.normal_(0.0, 0.5)
    meta = CheckpointMeta(
        name=directory.name, source_language="en", target_language="de", extra={"origin": {"licence": "MPL-2.0"}}
    )
    card = "# marian-like test checkpoint\n\nRandom weights, for tests only.\n"
    return save_checkpoint(model, spm_model, directory, card=card, meta=meta)


def write_marian_shortlist(path: Path, frequent: int, best: int, lists: list[list[int]]) -> Path:
    """Marian's binary shortlist layout: six uint64 (magic, checksum, frequent, best, #offsets, #targets), the
    offsets (uint64), the targets (uint32). The checksum is not checked by our reader (written as 0)."""
    offsets = np.cumsum([0] + [len(x) for x in lists]).astype("<u8")
    targets = np.array([t for x in lists for t in x], dtype="<u4")
    header = np.array([MAGIC, 0, frequent, best, offsets.size, targets.size], dtype="<u8")
    path.write_bytes(header.tobytes() + offsets.tobytes() + targets.tobytes())
    return path
