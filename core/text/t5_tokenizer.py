"""T5's tokenizer (T5 / Flan-T5 / mT5): one SentencePiece model (``spiece.model``: ``<pad>`` 0, ``</s>`` 1,
``<unk>`` 2) whose ids are the model's, then ``extra_ids`` sentinel pieces ``<extra_id_N>`` above them, counting
down from the top (``<extra_id_0>`` is the last), as transformers' ``T5Tokenizer`` lays them out. A model may have
more embedding rows than the tokenizer has ids (t5-small: 32128 rows, 32100 ids); those rows have no piece.

A checkpoint may name a task prefix (``source_prefix``, e.g. "translate English to German: ", from the folder's
``task_specific_params``): T5 checkpoints translate when the source starts with it, so ``encode`` puts it before the
text the person typed (their text stays what they typed; the prefix's pieces are source tokens like any other).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from .tokenizer import Tokenizer

T5_SENTENCEPIECE = "t5-sentencepiece"  # config.json's {"tokenizer": {"type": ...}} for a T5Tokenizer
_SENTINEL = re.compile(r"<extra_id_(\d+)>")


class T5Tokenizer(Tokenizer):
    """``spiece.model`` plus ``extra_ids`` sentinels; ``source_prefix`` put before every source text."""

    def __init__(self, model_path: str | Path, *, extra_ids: int = 0, source_prefix: str = "") -> None:
        super().__init__(model_path)
        if not isinstance(extra_ids, int) or isinstance(extra_ids, bool) or not 0 <= extra_ids <= 10_000:
            raise ValueError(f"extra_ids must be a whole number from 0 to 10,000, got {extra_ids!r}")
        if not isinstance(source_prefix, str):
            raise ValueError(f"source_prefix must be text, got {source_prefix!r}")
        self.extra_ids, self.source_prefix = extra_ids, source_prefix
        self.n_pieces = self.sp.get_piece_size()

    @property
    def vocab_size(self) -> int:
        """The ids the tokenizer has: the SentencePiece pieces and the sentinels."""
        return self.n_pieces + self.extra_ids

    @property
    def text_rows(self) -> int:
        """The SentencePiece pieces: a sentinel is a special token, needing a row only where the model has one (a
        typed one without a row is refused by the bundle), as transformers' generate reads a folder."""
        return self.n_pieces

    def sentinel_id(self, n: int) -> int:
        """The id of ``<extra_id_n>``."""
        if not 0 <= n < self.extra_ids:
            raise ValueError(f"<extra_id_{n}> is not a piece of this tokenizer ({self.extra_ids} sentinels)")
        return self.vocab_size - 1 - n

    def _ids(self, text: str) -> list[int]:
        """Text -> ids; a sentinel written in the text (``<extra_id_3>``) is its own id, as transformers reads it."""
        ids: list[int] = []
        start = 0
        for match in _SENTINEL.finditer(text):
            n = int(match[1])
            if n >= self.extra_ids:
                continue  # not one of ours: SentencePiece reads it as text
            ids += self.sp.encode(text[start : match.start()], out_type=int)
            ids.append(self.sentinel_id(n))
            start = match.end()
        return ids + list(self.sp.encode(text[start:], out_type=int))

    def encode(self, text: str) -> list[int]:
        """A source text's ids, the task prefix first (no eos: ``frame_source`` appends it)."""
        return self._ids(self.source_prefix + text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(text) for text in texts]

    def encode_target(self, text: str) -> list[int]:
        return self._ids(text)

    def piece(self, token_id: int) -> str:
        token_id = int(token_id)
        if token_id < self.n_pieces:
            return self.sp.id_to_piece(token_id)
        if token_id < self.vocab_size:
            return f"<extra_id_{self.vocab_size - 1 - token_id}>"
        return f"<row {token_id}>"  # an embedding row beyond the tokenizer (no piece)

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self.piece(i) for i in ids]

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text without pad / eos / unk (as ``decode(skip_special_tokens=True)``); a sentinel or a row beyond
        the tokenizer shows as its piece."""
        parts: list[str] = []
        run: list[int] = []
        for i in (int(i) for i in ids):
            if i < self.n_pieces:
                if not (self.sp.is_control(i) or self.sp.is_unknown(i)):
                    run.append(i)
                continue
            parts += [self.sp.decode(run), self.piece(i)]
            run = []
        parts.append(self.sp.decode(run))
        return " ".join(p for p in parts if p)

    def spec(self, *, model: str) -> dict[str, str | int]:
        """What a checkpoint's config.json says about this tokenizer, given the model file's name in the folder."""
        return {
            "type": T5_SENTENCEPIECE,
            "model": model,
            "extra_ids": self.extra_ids,
            "source_prefix": self.source_prefix,
        }

    @classmethod
    def from_spec(cls, model_path: Path, spec: dict[str, object]) -> T5Tokenizer:
        """The tokenizer ``spec`` (what ``spec`` wrote) describes, its model file at ``model_path``; ValueError
        naming a bad field."""
        extra_ids, prefix = spec.get("extra_ids", 0), spec.get("source_prefix", "")
        if not isinstance(extra_ids, int) or isinstance(extra_ids, bool):
            raise ValueError(f"extra_ids must be a whole number, got {extra_ids!r}")
        if not isinstance(prefix, str):
            raise ValueError(f"source_prefix must be text, got {prefix!r}")
        return cls(model_path, extra_ids=extra_ids, source_prefix=prefix)
