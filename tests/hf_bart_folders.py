"""Hugging Face BART / mBART / M2M100 / NLLB folders built locally (no hub): random weights saved by transformers
itself, tokenizers trained here on the fixture corpus and written by transformers' own tokenizer classes.

    build_bart_folder(path)                  byte-level BPE (tokenizers' ByteLevelBPETokenizer): vocab.json + merges.txt
    build_mbart_folder(path)                 mBART-50 style: sentencepiece.bpe.model -> MBartTokenizer's tokenizer.json,
                                             decoder starts from </s>, the target language forced first
    build_m2m100_folder(path)                vocab.json + sentencepiece.bpe.model (M2M100Tokenizer), __en__ ... tokens
    build_m2m100_folder(path, nllb=True)     NllbTokenizer's tokenizer.json, eng_Latn ... codes

Weights are random but large enough that outputs depend on the input (init_std 0.3, ``randomise``); LayerNorms
and final_logits_bias are random too (1 and 0 would hide a mapping mistake). transformers is imported inside the
functions: it is a test extra.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch
from conftest import FIXTURES

LINES = (FIXTURES / "tiny_corpus.txt").read_text(encoding="utf-8").splitlines()
ENGLISH, GERMAN = LINES[0::2], LINES[1::2]
TINY: dict[str, Any] = dict(  # every family's shape here
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=64,
    dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
    init_std=0.3,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
    forced_eos_token_id=None,
)


def train_bpe_spm(prefix: Path, vocab_size: int = 120) -> Path:
    """A SentencePiece BPE model (sentencepiece's default ids: unk 0, bos 1, eos 2), as fairseq's models are."""
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(LINES * 4),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        model_type="bpe",
        hard_vocab_limit=False,
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


def randomise(model: Any, *, seed: int) -> Any:
    """LayerNorms and final_logits_bias random, embeddings and projections scaled so that greedy outputs vary
    (tied embeddings otherwise make a random decoder repeat its input token); in place, eval mode."""
    torch.manual_seed(seed + 100)
    pre_norm = model.config.model_type != "bart"  # mBART, M2M100: the residual stream is never normalised
    with torch.no_grad():
        model.model.shared.weight.normal_(0.0, 0.1 if pre_norm else 0.3)
        for name, p in model.named_parameters():
            if name.endswith(("fc2.weight", "out_proj.weight")):
                p.mul_(3.0 if pre_norm else 0.3)
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                p.mul_(2.0)  # sharper attention
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.normal_(1.0, 0.3)
                module.bias.normal_(0.0, 0.3)
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.normal_(0.0, 0.5)
    return model.eval()


def save(model: Any, folder: Path, generation: dict[str, Any]) -> Path:
    model.save_pretrained(folder, safe_serialization=True)
    config = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**config, **generation}, indent=2))
    return folder


def build_bart_folder(path: Path, *, seed: int = 0) -> Path:
    """A BART folder: vocab.json + merges.txt (byte-level BPE trained here), random BartForConditionalGeneration."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import BartConfig, BartForConditionalGeneration, BartTokenizer

    path.mkdir(parents=True, exist_ok=True)
    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(
        LINES * 4, vocab_size=300, min_frequency=1, special_tokens=["<s>", "<pad>", "</s>", "<unk>"]
    )
    trainer.save_model(str(path))
    tokenizer = BartTokenizer.from_pretrained(path)  # transformers' reading of the files (<mask> appended)
    (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BartTokenizer"}))
    torch.manual_seed(seed)
    model = BartForConditionalGeneration(BartConfig(vocab_size=len(tokenizer), attn_implementation="eager", **TINY))
    return save(randomise(model, seed=seed), path, {"forced_bos_token_id": 0})  # as bart-large forces <s>


def build_mbart_folder(
    path: Path, *, seed: int = 0, src: str = "en_XX", tgt: str = "de_DE", start_from_language: bool = False
) -> Path:
    """An mBART-50-style folder: sentencepiece.bpe.model and the tokenizer.json MBartTokenizer makes of it, random
    MBartForConditionalGeneration; the decoder starts from </s> and the target language is forced first
    (``start_from_language``: mbart-large-cc25 / en-ro style, the decoder starts from the target language's code)."""
    from transformers import MBartConfig, MBartForConditionalGeneration, MBartTokenizer

    path.mkdir(parents=True, exist_ok=True)
    work = path.parent / f"{path.name}-spm"
    work.mkdir(exist_ok=True)
    shutil.copyfile(train_bpe_spm(work / "bpe"), work / "sentencepiece.bpe.model")
    tokenizer = MBartTokenizer.from_pretrained(work, src_lang=src, tgt_lang=tgt)
    tokenizer.save_pretrained(path)
    shutil.copyfile(work / "sentencepiece.bpe.model", path / "sentencepiece.bpe.model")
    torch.manual_seed(seed)
    code = tokenizer.convert_tokens_to_ids(tgt)
    settings = dict(TINY, decoder_start_token_id=code) if start_from_language else TINY
    model = MBartForConditionalGeneration(
        MBartConfig(vocab_size=len(tokenizer), scale_embedding=True, attn_implementation="eager", **settings)
    )
    generation = {"decoder_start_token_id": code} if start_from_language else {"forced_bos_token_id": code}
    return save(randomise(model, seed=seed), path, generation)


def m2m100_vocab(model: Path) -> dict[str, int]:
    """fairseq's dictionary as M2M100's vocab.json holds it: <s> 0, <pad> 1, </s> 2, <unk> 3, then the pieces."""
    sp = spm.SentencePieceProcessor(model_file=str(model))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(sp.get_piece_size()):
        if not (sp.is_control(i) or sp.is_unknown(i)):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    return vocab


def build_m2m100_folder(path: Path, *, nllb: bool = False, seed: int = 0, legacy: bool = False) -> Path:
    """An M2M100 folder (vocab.json + sentencepiece.bpe.model, M2M100Tokenizer, en -> de) or, with ``nllb``, an NLLB
    one (NllbTokenizer's tokenizer.json, eng_Latn -> deu_Latn; ``legacy``: its legacy_behaviour, the language code
    after </s>); random M2M100ForConditionalGeneration."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer, NllbTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    path.mkdir(parents=True, exist_ok=True)
    work = path.parent / f"{path.name}-spm"
    work.mkdir(exist_ok=True)
    model_file = train_bpe_spm(work / "bpe")
    if nllb:
        shutil.copyfile(model_file, work / "sentencepiece.bpe.model")
        tokenizer: Any = NllbTokenizer.from_pretrained(
            work,
            src_lang="eng_Latn",
            tgt_lang="deu_Latn",
            extra_special_tokens=FAIRSEQ_LANGUAGE_CODES,
            legacy_behaviour=legacy,
        )
        tgt_id = tokenizer.convert_tokens_to_ids("deu_Latn")
    else:
        (work / "vocab.json").write_text(json.dumps(m2m100_vocab(model_file), ensure_ascii=False))
        tokenizer = M2M100Tokenizer(
            vocab_file=str(work / "vocab.json"), spm_file=str(model_file), src_lang="en", tgt_lang="de"
        )
        tgt_id = tokenizer.get_lang_id("de")
    tokenizer.save_pretrained(path)
    shutil.copyfile(model_file, path / "sentencepiece.bpe.model")
    rows = len(tokenizer) if nllb else len(tokenizer.encoder) + 100 + 8  # M2M100: the language tokens, 8 madeup
    torch.manual_seed(seed)
    model = M2M100ForConditionalGeneration(M2M100Config(vocab_size=rows, attn_implementation="eager", **TINY))
    return save(randomise(model, seed=seed), path, {"forced_bos_token_id": tgt_id})
