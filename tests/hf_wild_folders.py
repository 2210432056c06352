"""Hugging Face folders as the outside world writes them: every file by transformers 5's own classes and
``save_pretrained`` (model and tokenizer), the tokenizers built from the fixture files of transformers' own test suite
(``tests/data/transformers_fixtures``: its ``test_sentencepiece.model``, ``vocab.json`` + ``merges.txt``) the way its
tokenizer tests build them. Nothing here writes a tokenizer file by hand.

    WILD[name](path) -> path    for every name in WILD:
        t5-v1.0, t5-v1.1, mt5   T5Tokenizer(.from_pretrained of the fixture as spiece.model).save_pretrained: only
                                tokenizer.json (what transformers 5 writes); the fixture has no <pad>, so T5's pad is
                                appended (id 1100) and eos is 2: not the 0 / 1 of published T5s
        bart                    BartTokenizer of the fixture vocab.json + merges.txt (byte-level BPE)
        mbart-cc25              MBartTokenizer; the target language only in decoder_start_token_id (as
                                mbart-large-en-ro: its tokenizer_config.json names no tgt_lang)
        mbart-50                MBart50Tokenizer (en_XX x </s>); the target language in forced_bos_token_id
        m2m100                  M2M100Tokenizer of vocab.json + the fixture (as its test builds it), an embedding
                                without the rows of the tokenizer's unnamed "madeup" ids
        nllb, nllb-legacy       NllbTokenizer in its current and legacy_behaviour framing
        marian, marian-multi    MarianTokenizer of vocab.json + the fixture as source.spm and target.spm (as its test
                                builds it); multi: '>>pt<<' / '>>es<<' target tokens at the start of the source

transformers is imported inside the functions: it is a test extra.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import sentencepiece as spm
import torch
from hf_bart_folders import TINY, randomise
from hf_folders import t5_model

import core

FIXTURES = Path(__file__).parent / "data" / "transformers_fixtures"
SAMPLE_SP = FIXTURES / "test_sentencepiece.model"  # transformers' SAMPLE_VOCAB / SAMPLE_SP
# hard strings every folder's tokenizer is compared on (a sentence each: the tiny models read it)
HARD = (
    "The cat sleeps on the warm chair.",
    "Ça a été très élégant, naïve café.",
    "Cafe\u0301 with a combining accent",
    "東京は雨です。北京也下雨。",
    "Привет, как дела?",
    "Emoji 🐈‍⬛ and 👍🏽 here",
    "Numbers 92000, 3.14159 and 1,000,000",
    "Repeated   spaces\tand a tab",
    "  leading and trailing spaces  ",
    "Unknown ☃ ⅷ 𝔘 characters",
    "I was born in 92000, and this is falsé.",
)


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _spm_dir(path: Path, name: str) -> Path:
    """A folder holding the fixture under the file name a tokenizer class looks for."""
    work = _folder(path.parent / f"{path.name}-{name}")
    shutil.copyfile(SAMPLE_SP, work / name)
    return work


def _save(model: Any, tokenizer: Any, folder: Path, generation: dict[str, Any]) -> Path:
    """save_pretrained of both, then the generation settings a published folder carries."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    path = folder / "generation_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **generation}, indent=2))
    return folder


def build_t5(path: Path, *, version: str = "1.1", model_type: str = "t5", seed: int = 0) -> Path:
    from transformers import T5Tokenizer

    tokenizer = T5Tokenizer.from_pretrained(_spm_dir(path, "spiece.model"), extra_ids=8)
    ids = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    model = t5_model(
        len(tokenizer), version, seed=seed, model_type=model_type, decoder_start_token_id=ids["pad_token_id"], **ids
    )  # type: ignore[arg-type]
    return _save(model, tokenizer, _folder(path), {})


def build_bart(path: Path, *, seed: int = 0) -> Path:
    from transformers import BartConfig, BartForConditionalGeneration, BartTokenizer

    work = _folder(path.parent / f"{path.name}-bpe")
    for name in ("vocab.json", "merges.txt"):
        shutil.copyfile(FIXTURES / name, work / name)
    tokenizer = BartTokenizer.from_pretrained(work)  # the fixture has no special tokens: appended after its 21
    ids = {f"{name}_token_id": getattr(tokenizer, f"{name}_token_id") for name in ("pad", "bos", "eos")}
    settings = {**TINY, **ids, "decoder_start_token_id": tokenizer.eos_token_id}
    torch.manual_seed(seed)
    model = BartForConditionalGeneration(BartConfig(vocab_size=len(tokenizer), attn_implementation="eager", **settings))
    return _save(randomise(model, seed=seed), tokenizer, _folder(path), {"forced_bos_token_id": tokenizer.bos_token_id})


def build_mbart(path: Path, *, fifty: bool = False, seed: int = 0, missing_rows: int = 0) -> Path:
    """missing_rows: an embedding that many rows short of the tokenizer (its last ids have no row)."""
    from transformers import MBart50Tokenizer, MBartConfig, MBartForConditionalGeneration, MBartTokenizer

    cls: Any = MBart50Tokenizer if fifty else MBartTokenizer
    tokenizer = cls.from_pretrained(_spm_dir(path, "sentencepiece.bpe.model"), src_lang="en_XX", tgt_lang="ro_RO")
    code = tokenizer.convert_tokens_to_ids("ro_RO")
    settings = dict(TINY, decoder_start_token_id=2 if fifty else code)
    torch.manual_seed(seed)
    model = MBartForConditionalGeneration(
        MBartConfig(
            vocab_size=len(tokenizer) - missing_rows, scale_embedding=True, attn_implementation="eager", **settings
        )
    )
    generation = {"forced_bos_token_id": code} if fifty else {"decoder_start_token_id": code}
    folder = _save(randomise(model, seed=seed), tokenizer, _folder(path), generation)
    if not fifty:  # as facebook/mbart-large-en-ro: the folder names its target language only by the decoder's start
        config = json.loads((folder / "tokenizer_config.json").read_text())
        config.pop("tgt_lang", None)
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return folder


def fixture_vocab() -> dict[str, int]:
    """An M2M100 / Marian vocab.json over the fixture's pieces, laid out as transformers' own tests lay theirs:
    '</s>' 0, '<unk>' 1, the pieces, '<pad>' last."""
    sp = spm.SentencePieceProcessor(model_file=str(SAMPLE_SP))
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(sp.get_piece_size()):
        if not (sp.is_control(i) or sp.is_unknown(i)):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    return vocab


def build_m2m100(path: Path, *, seed: int = 0) -> Path:
    from transformers import M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer

    work = _spm_dir(path, "sentencepiece.bpe.model")
    pieces = ["<s>", "<pad>", "</s>", "<unk>", *list(fixture_vocab())[2:]]  # fairseq's dictionary, as M2M100's
    vocab = {piece: i for i, piece in enumerate(pieces)}
    (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    tokenizer = M2M100Tokenizer.from_pretrained(work, src_lang="en", tgt_lang="pt")
    rows = len(tokenizer.encoder) + len(tokenizer.lang_token_to_id)  # no rows for the 8 made-up ids after them
    torch.manual_seed(seed)
    model = M2M100ForConditionalGeneration(M2M100Config(vocab_size=rows, attn_implementation="eager", **TINY))
    folder = _save(
        randomise(model, seed=seed), tokenizer, _folder(path), {"forced_bos_token_id": tokenizer.get_lang_id("pt")}
    )
    shutil.copyfile(work / "sentencepiece.bpe.model", folder / "sentencepiece.bpe.model")
    return folder


def build_nllb(path: Path, *, legacy: bool = False, seed: int = 0) -> Path:
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    tokenizer = NllbTokenizer.from_pretrained(  # its 202 language codes, as facebook/nllb-200-* have them
        _spm_dir(path, "sentencepiece.bpe.model"),
        src_lang="eng_Latn",
        tgt_lang="por_Latn",
        legacy_behaviour=legacy,
        extra_special_tokens=FAIRSEQ_LANGUAGE_CODES,
    )
    torch.manual_seed(seed)
    model = M2M100ForConditionalGeneration(M2M100Config(vocab_size=len(tokenizer), attn_implementation="eager", **TINY))
    forced = tokenizer.convert_tokens_to_ids("por_Latn")
    return _save(randomise(model, seed=seed), tokenizer, _folder(path), {"forced_bos_token_id": forced})


def build_marian(path: Path, *, multi: bool = False, seed: int = 0) -> Path:
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    work = _folder(path.parent / f"{path.name}-marian")
    codes = [">>pt<<", ">>es<<"] if multi else []
    pieces = ["</s>", "<unk>", *codes, *list(fixture_vocab())[2:], "<pad>"]  # Opus-MT's layout
    vocab = {piece: i for i, piece in enumerate(pieces)}
    (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    for name in ("source.spm", "target.spm"):
        shutil.copyfile(SAMPLE_SP, work / name)
    (work / "tokenizer_config.json").write_text(json.dumps({"source_lang": "en", "target_lang": "pt"}))
    tokenizer = MarianTokenizer.from_pretrained(work)
    pad = vocab["<pad>"]
    settings = {k: v for k, v in TINY.items() if k not in ("bos_token_id",)}
    settings.update(pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, scale_embedding=True)
    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(vocab_size=len(vocab), attn_implementation="eager", **settings))
    return _save(randomise(model, seed=seed), tokenizer, _folder(path), {"bad_words_ids": [[pad]]})


def imported_case(name: str, root: Path, build: Callable[[Path], Path]) -> SimpleNamespace:
    """A folder ``build`` writes under ``root``, imported by the command (import-hf) into ``root/ckpt``: its name,
    root, folder, transformers' eager model and AutoTokenizer of it, the lab's bundle and the bundle's task prefix."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from core.cli import main

    folder = build(root / "hf")
    assert main(["import-hf", str(folder), "--out", str(root / "ckpt")]) == 0
    bundle = core.load(root / "ckpt", device="cpu")
    return SimpleNamespace(
        name=name,
        root=root,
        folder=folder,
        model=AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval(),
        tok=AutoTokenizer.from_pretrained(folder),
        bundle=bundle,
        prefix=bundle.tokenizer.source_prefix,
    )


WILD: dict[str, Callable[[Path], Path]] = {
    "t5-v1.0": lambda p: build_t5(p, version="1.0"),
    "t5-v1.1": build_t5,
    "mt5": lambda p: build_t5(p, model_type="mt5"),
    "bart": build_bart,
    "mbart-cc25": build_mbart,
    "mbart-50": lambda p: build_mbart(p, fifty=True),
    "m2m100": build_m2m100,
    "nllb": build_nllb,
    "nllb-legacy": lambda p: build_nllb(p, legacy=True),
    "marian": build_marian,
    "marian-multi": lambda p: build_marian(p, multi=True),
}
