"""A thin wrapper around one SentencePiece model shared by source and target."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm


class Tokenizer:
    """Text <-> SentencePiece ids and pieces."""

    def __init__(self, model_path: str | Path) -> None:
        self.path = Path(model_path)
        self.sp = spm.SentencePieceProcessor(model_file=str(self.path))

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def special_ids(self) -> dict[str, int]:
        """pad/bos/eos/unk ids as the model file defines them (-1 when absent)."""
        return {
            "pad_id": self.sp.pad_id(),
            "bos_id": self.sp.bos_id(),
            "eos_id": self.sp.eos_id(),
            "unk_id": self.sp.unk_id(),
        }

    def encode(self, text: str) -> list[int]:
        return list(self.sp.encode(text, out_type=int))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [list(x) for x in self.sp.encode(texts, out_type=int)]

    def decode(self, ids: Iterable[int]) -> str:
        return self.sp.decode([int(i) for i in ids])

    def piece(self, token_id: int) -> str:
        return self.sp.id_to_piece(int(token_id))

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self.sp.id_to_piece(int(i)) for i in ids]

    def is_unknown(self, token_id: int) -> bool:
        return int(token_id) == self.sp.unk_id()

    @staticmethod
    def train(
        sentences: Iterable[str],
        model_prefix: str | Path,
        vocab_size: int = 8000,
        character_coverage: float = 1.0,
        model_type: str = "unigram",
        seed_sentencepiece_size: int = 200000,
    ) -> Path:
        """Train a SentencePiece model on ``sentences``; ids: pad 0, bos 1, eos 2, unk 3. Returns the .model path."""
        prefix = Path(model_prefix)
        prefix.parent.mkdir(parents=True, exist_ok=True)
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(list(sentences)),
            model_prefix=str(prefix),
            vocab_size=vocab_size,
            character_coverage=character_coverage,
            model_type=model_type,
            pad_id=0,
            bos_id=1,
            eos_id=2,
            unk_id=3,
            input_sentence_size=2_000_000,
            shuffle_input_sentence=True,
            seed_sentencepiece_size=seed_sentencepiece_size,
            num_threads=2,
            minloglevel=2,
            hard_vocab_limit=False,
        )
        return prefix.with_suffix(".model")
