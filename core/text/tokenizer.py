"""Text <-> ids: one SentencePiece model shared by source and target (``Tokenizer``), or a Marian vocabulary as
Hugging Face's Marian folders hold it — a SentencePiece model per side and one piece -> id map
(``MarianVocabTokenizer``). A checkpoint's config.json says which (``core.storage.checkpoint``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import sentencepiece as spm

from ..errors import CheckpointError, InputError

SPACE = "\u2581"  # SentencePiece's word-start mark
LANGUAGE_CODE = re.compile(r">>[^<>\s]+<<")  # a multilingual Opus-MT model's target-language token: '>>pt<<'


def _processor(path: Path) -> spm.SentencePieceProcessor:
    """The SentencePiece model at ``path``; CheckpointError naming it when the file is not one."""
    try:
        return spm.SentencePieceProcessor(model_file=str(path))
    except Exception as exc:  # sentencepiece raises RuntimeError/OSError with C++ text
        raise CheckpointError(f"{path}: not a readable SentencePiece model ({exc})") from None


class Tokenizer:
    """Text <-> SentencePiece ids and pieces."""

    source_prefix = ""  # text put before every source text (a T5 task prefix); none here
    target_codes: tuple[str, ...] = ()  # a multilingual model's target-language tokens ('>>pt<<'), written first

    def __init__(self, model_path: str | Path) -> None:
        self.path = Path(model_path)
        self.sp = _processor(self.path)

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    @property
    def text_rows(self) -> int:
        """One more than the largest id a text can be read as (besides ``ids_in_use``): the embedding rows a model
        needs for this tokenizer. Ids a tokenizer has but no text produces (unused language codes, padding rows)
        need none, as in transformers."""
        return self.vocab_size

    def ids_in_use(self) -> set[int]:
        """The special ids (and, for a family's tokenizer, the language codes of its framing) a run feeds or
        forces."""
        return {i for i in self.special_ids().values() if i >= 0}

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

    def frame_source(self, ids: list[int], eos_id: int) -> list[int]:
        """A source text's ids as the encoder reads them: eos appended here (other families add language codes or
        <s>: ``core.text.hf_tokenizers``)."""
        return ids + [eos_id]

    def encode_target(self, text: str) -> list[int]:
        """Target-language text (a reference translation) -> ids; the same model as the source here."""
        return self.encode(text)

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
        """Train a SentencePiece model on ``sentences``; ids: pad 0, bos 1, eos 2, unk 3. Returns the .model path.
        InputError when ``vocab_size`` is too small for the characters of ``sentences``."""
        prefix = Path(model_prefix)
        prefix.parent.mkdir(parents=True, exist_ok=True)
        try:
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
        except RuntimeError as exc:  # C++ text; the one a person causes often is said plainly
            few = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", str(exc))
            if few is None:
                raise
            raise InputError(
                f"too few pieces for this text: its characters and the 4 special pieces need at least {few[2]}"
            ) from None
        return prefix.with_suffix(".model")


def first_id_beyond(tokenizer: Tokenizer, rows: int) -> int | None:
    """The smallest id ``tokenizer`` can give a text, or uses in its framing, that a model of ``rows`` embedding rows
    has no row for; None when every one fits."""
    if tokenizer.text_rows > rows:
        return rows
    beyond = sorted(i for i in tokenizer.ids_in_use() if i >= rows)
    return beyond[0] if beyond else None


def read_vocab(path: str | Path) -> dict[str, int]:
    """A Marian ``vocab.json``: piece -> id. Raises ValueError saying what is wrong with it."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"not a readable JSON file ({exc})") from None
    if not isinstance(data, dict) or not data:
        raise ValueError("must be a non-empty JSON object mapping pieces to ids")
    for piece, index in data.items():
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise ValueError(f"piece {piece!r} has id {index!r}; ids are whole numbers >= 0")
    return data


class MarianVocabTokenizer(Tokenizer):
    """A Marian vocabulary the way Hugging Face's ``MarianTokenizer`` reads a folder: source text through one
    SentencePiece model, target text through another, and the pieces of both through ONE piece -> id map
    (``vocab.json``). The ids are the map's (the SentencePiece models' own ids are never used); a piece the map
    lacks is ``unk``. A leading language code such as ``>>fra<<`` (multilingual Opus-MT models) is a token of its
    own. ``decode`` drops eos, pad and unk, as ``MarianTokenizer.decode(ids, skip_special_tokens=True)`` does.
    """

    def __init__(
        self,
        source_model: str | Path,
        target_model: str | Path,
        vocab: Mapping[str, int],
        *,
        unk_piece: str = "<unk>",
        eos_piece: str = "</s>",
        pad_piece: str = "<pad>",
    ) -> None:
        super().__init__(source_model)  # self.sp: the source side's model
        self.target_path = Path(target_model)
        self.target_sp = _processor(self.target_path)
        for what, piece in (("unk", unk_piece), ("eos", eos_piece)):
            if piece not in vocab:
                raise ValueError(f"the vocabulary has no {what} piece {piece!r}")
        self.vocab = dict(vocab)
        self.piece_of = {index: piece for piece, index in self.vocab.items()}  # a shared id keeps its last piece
        self.unk_piece, self.eos_piece, self.pad_piece = unk_piece, eos_piece, pad_piece
        self.unk_id, self.eos_id = self.vocab[unk_piece], self.vocab[eos_piece]
        self.pad_id = self.vocab.get(pad_piece, -1)
        self._not_text = {self.eos_id, self.pad_id, self.unk_id}
        codes = sorted((i, piece) for piece, i in self.vocab.items() if LANGUAGE_CODE.fullmatch(piece))
        self.target_codes = tuple(piece for _, piece in codes)  # multilingual Opus-MT: '>>pt<< text'

    @property
    def vocab_size(self) -> int:
        """One more than the largest id (the ids a model needs rows for)."""
        return max(self.vocab.values()) + 1

    def special_ids(self) -> dict[str, int]:
        return {"pad_id": self.pad_id, "bos_id": -1, "eos_id": self.eos_id, "unk_id": self.unk_id}

    def _ids(self, sp: spm.SentencePieceProcessor, text: str) -> list[int]:
        code: list[str] = []
        end = text.find("<<") if text.startswith(">>") else -1
        if end != -1:  # '>>fra<< text': the code is one token (transformers' MarianTokenizer.remove_language_code)
            code, text = [text[: end + 2]], text[end + 2 :]
        return [self.vocab.get(piece, self.unk_id) for piece in code + sp.encode(text, out_type=str)]

    def encode(self, text: str) -> list[int]:
        return self._ids(self.sp, text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(text) for text in texts]

    def encode_target(self, text: str) -> list[int]:
        return self._ids(self.target_sp, text)

    def decode(self, ids: Iterable[int]) -> str:
        """Target ids -> text through the target model's pieces (special ids dropped)."""
        pieces = [self.piece(i) for i in ids if int(i) not in self._not_text]
        return self.target_sp.decode_pieces(pieces).replace(SPACE, " ").strip()

    def piece(self, token_id: int) -> str:
        return self.piece_of.get(int(token_id), self.unk_piece)

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self.piece(i) for i in ids]

    def is_unknown(self, token_id: int) -> bool:
        return int(token_id) == self.unk_id

    def spec(self, *, source: str, target: str, vocab: str) -> dict[str, str]:
        """What a checkpoint's config.json says about this tokenizer, given the file names in the folder."""
        return {
            "type": MARIAN_VOCAB,
            "source": source,
            "target": target,
            "vocab": vocab,
            "unk_piece": self.unk_piece,
            "eos_piece": self.eos_piece,
            "pad_piece": self.pad_piece,
        }


MARIAN_VOCAB = "marian-vocab"  # config.json's {"tokenizer": {"type": ...}} for a MarianVocabTokenizer
