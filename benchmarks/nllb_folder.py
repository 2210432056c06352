"""A Hugging Face folder of NLLB-200-distilled-600M's shape, built here with random weights (no hub):

    python -m benchmarks.nllb_folder [--out downloads/nllb-600m-shape]

``M2M100ForConditionalGeneration`` from the published config numbers (12 encoder + 12 decoder layers, d_model 1024,
16 heads, FFN 4096, ReLU, pre-LN with final layer norms, 256,206 shared and tied embedding rows, sinusoidal positions
for 1024 tokens, embeddings scaled by sqrt(d_model)), saved in float32 safetensors with ``save_pretrained``, and an
NLLB-style tokenizer: a SentencePiece BPE model trained here on the Debian trans-de-en pairs in data/ding-split
(fairseq's ids: <s> 0, <pad> 1, </s> 2, <unk> 3, the pieces from 4, then <mask> and the 202 language codes), as
``sentencepiece.bpe.model`` + ``NllbTokenizer.save_pretrained``'s files. Its pieces are far fewer than the model's
256,206 rows (the rest are spare rows, as real folders have a few): the output layer still scores every row.

The folder is cached (2.5 GB, outside git); it is rebuilt only when its config.json is missing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import sentencepiece as spm
import torch

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "downloads" / "nllb-600m-shape"
CORPUS = (ROOT / "data" / "ding-split" / "train.en", ROOT / "data" / "ding-split" / "train.de")
SPM_PIECES = 16_000  # what this corpus supports; NLLB's own model has 256,000
# NLLB-200-distilled-600M's config.json, the numbers that set the shape and the arithmetic
NLLB_600M = dict(
    vocab_size=256_206,
    d_model=1024,
    encoder_layers=12,
    decoder_layers=12,
    encoder_attention_heads=16,
    decoder_attention_heads=16,
    encoder_ffn_dim=4096,
    decoder_ffn_dim=4096,
    max_position_embeddings=1024,
    scale_embedding=True,
    activation_function="relu",
    dropout=0.1,
    attention_dropout=0.1,
    activation_dropout=0.0,
    encoder_layerdrop=0.0,
    decoder_layerdrop=0.0,
    init_std=0.02,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
    tie_word_embeddings=True,
    tokenizer_class="NllbTokenizer",
)
SOURCE, TARGET = "eng_Latn", "deu_Latn"


def train_tokenizer(prefix: Path) -> Path:
    """A SentencePiece BPE model on the trans-de-en pairs with NLLB's own pieces' ids (<unk> 0, <s> 1, </s> 2)."""
    missing = [str(p) for p in CORPUS if not p.is_file()]
    if missing:
        raise SystemExit(f"nllb_folder: {missing} missing — make downloads builds data/ding-split")
    spm.SentencePieceTrainer.train(
        input=[str(p) for p in CORPUS],
        model_prefix=str(prefix),
        model_type="bpe",
        vocab_size=SPM_PIECES,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        input_sentence_size=300_000,
        shuffle_input_sentence=True,
        character_coverage=0.9999,
        num_threads=2,
        minloglevel=2,
    )
    return Path(f"{prefix}.model")


def build(out: Path, *, seed: int = 0) -> Path:
    """Write the folder ``out`` (replaced). Returns it."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer  # a bench extra
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    staging = out.with_name(f".{out.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    spm_file = train_tokenizer(staging / "sentencepiece.bpe")
    shutil.move(spm_file, staging / "sentencepiece.bpe.model")
    (staging / "sentencepiece.bpe.vocab").unlink(missing_ok=True)
    # the 202 language codes follow the pieces (as added tokens in tokenizer.json); here <mask> comes before them
    tokenizer = NllbTokenizer.from_pretrained(
        str(staging), src_lang=SOURCE, tgt_lang=TARGET, extra_special_tokens=FAIRSEQ_LANGUAGE_CODES
    )
    tokenizer.save_pretrained(str(staging))
    torch.manual_seed(seed)
    config = M2M100Config(**NLLB_600M)
    model = M2M100ForConditionalGeneration(config).eval()
    model.generation_config.max_length = 200
    model.save_pretrained(str(staging), safe_serialization=True)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out


def ensure(out: Path = DEFAULT_OUT) -> Path:
    """The cached folder, built first when it is not there."""
    if not (out / "config.json").is_file():
        start = time.perf_counter()
        build(out)
        print(f"nllb_folder: built {out} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder to build (default: %(default)s)")
    args = parser.parse_args(argv)
    folder = ensure(args.out)
    config = json.loads((folder / "config.json").read_text())
    weights = (folder / "model.safetensors").stat().st_size
    print(f"{folder}: model_type {config['model_type']}, {weights / 1e9:.2f} GB of weights")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
