"""The tokenizers of the BART family's checkpoints: what transformers runs for BART, mBART, NLLB and M2M100 folders.

``FastTokenizer``: a ``tokenizer.json`` read by the ``tokenizers`` library — the file transformers 5 itself runs
for BART (byte-level BPE), mBART (SentencePiece pieces with fairseq's ids: <s> 0, <pad> 1, </s> 2, <unk> 3, the
model's pieces from 4, the language codes after them, then <mask>) and NLLB; a BART folder that has only
``vocab.json`` + ``merges.txt`` is built into one with the same library (``byte_level_bpe``).
``M2M100VocabTokenizer``: M2M100's ``sentencepiece.bpe.model`` (segmentation) + ``vocab.json`` (ids), with the
language tokens ``__en__`` ... numbered after the vocabulary, as transformers' ``M2M100Tokenizer`` does.

Both frame a source the family's way (``frame_source``): BART ``<s> x </s>``; mBART ``x </s> en_XX``; mBART-50
``en_XX x </s>``; NLLB ``eng_Latn x </s>`` (``x </s> eng_Latn`` in its legacy behaviour); M2M100 ``__en__ x </s>``;
T5 ``x </s>`` after its task prefix — the framing ids are chosen at import and kept in config.json.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, decoders, pre_tokenizers
from tokenizers import Tokenizer as FastBackend
from tokenizers.models import BPE

from ..errors import CheckpointError
from .tokenizer import Tokenizer, read_vocab

HF_TOKENIZER_JSON = "hf-tokenizer-json"  # config.json's {"tokenizer": {"type": ...}} for a FastTokenizer
M2M100_VOCAB = "m2m100-vocab"  # ... for an M2M100VocabTokenizer
# transformers' M2M100Tokenizer numbers these language tokens, in this order, after vocab.json's ids
M2M100_LANGUAGES = {
    "m2m100": (
        "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl gu ha he hi hr ht "
        "hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml mn mr ms my ne nl no ns oc or pa pl "
        "ps pt ro ru sd si sk sl so sq sr ss su sv sw ta th tl tn tr uk ur uz vi wo xh yi yo zh zu"
    ).split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}
M2M100_MADEUP_WORDS = 8  # transformers' num_madeup_words: rows after the language tokens


@dataclass(frozen=True)
class Framing:
    """The ids a family puts around a text: source = prefix + pieces + suffix; a reference translation =
    target_prefix + pieces (eos is appended by the caller)."""

    prefix: tuple[int, ...] = ()
    suffix: tuple[int, ...] = ()
    target_prefix: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("prefix", "suffix", "target_prefix"):
            ids = getattr(self, name)
            if not isinstance(ids, (list, tuple)) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in ids
            ):
                raise ValueError(f"source_{name} / target_prefix must be lists of token ids, got {ids!r}")
            object.__setattr__(self, name, tuple(ids))  # JSON gives lists

    def source(self, ids: list[int]) -> list[int]:
        return [*self.prefix, *ids, *self.suffix]

    def target(self, ids: list[int]) -> list[int]:
        return [*self.target_prefix, *ids]

    def ids(self) -> set[int]:
        """Every id the framing puts around a text."""
        return {*self.prefix, *self.suffix, *self.target_prefix}

    def spec(self) -> dict[str, list[int]]:
        return {
            "source_prefix": list(self.prefix),
            "source_suffix": list(self.suffix),
            "target_prefix": list(self.target_prefix),
        }

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Framing:
        return cls(spec.get("source_prefix", ()), spec.get("source_suffix", ()), spec.get("target_prefix", ()))


def _byte_characters() -> dict[str, int]:
    """GPT-2's byte-level alphabet (what ``pre_tokenizers.ByteLevel`` writes each byte as): character -> byte."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in kept]
    return {chr(b): b for b in kept} | {chr(256 + n): b for n, b in enumerate(moved)}


BYTE_OF = _byte_characters()


def byte_level_text(piece: str) -> str:
    """A byte-level BPE piece as the text it stands for ('Ġcat' -> ' cat'); bytes that are not whole UTF-8
    characters as escapes; a piece outside the byte alphabet as it is."""
    if not all(ch in BYTE_OF for ch in piece):
        return piece
    return bytes(BYTE_OF[ch] for ch in piece).decode("utf-8", errors="backslashreplace")


def byte_level_bpe(vocab: Path, merges: Path, specials: Sequence[str]) -> FastBackend:
    """BART's tokenizer from ``vocab.json`` + ``merges.txt``, as transformers builds it: byte-level BPE, no space
    added before the text, ``specials`` whole tokens (those the vocabulary lacks are appended, e.g. <mask>)."""
    try:
        backend = FastBackend(BPE.from_file(str(vocab), str(merges)))
    except Exception as exc:  # tokenizers raises its own Exception types with Rust text
        raise CheckpointError(f"{vocab}, {merges}: not a readable byte-level BPE ({exc})") from None
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(piece, special=True, normalized=False) for piece in specials])
    return backend


class FramedTokenizer(Tokenizer):
    """What the family tokenizers share: a source framed by ``framing`` (language codes, <s>, </s>), a reference
    translation by its target prefix, and the framing's ids in use."""

    framing: Framing
    unk_id: int
    _special: set[int]  # the ids ``is_special`` names: added special tokens, language codes

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self.piece(i) for i in ids]

    def is_unknown(self, token_id: int) -> bool:
        return int(token_id) == self.unk_id

    def is_special(self, token_id: int) -> bool:
        return int(token_id) in self._special

    def _ids(self, text: str) -> list[int]:
        """Text -> ids, nothing added."""
        return self.encode(text)

    def frame_source(self, ids: list[int], eos_id: int) -> list[int]:
        return self.framing.source(ids)

    def encode_target(self, text: str) -> list[int]:
        return self.framing.target(self._ids(text))

    def ids_in_use(self) -> set[int]:
        return super().ids_in_use() | self.framing.ids()


class FastTokenizer(FramedTokenizer):
    """A ``tokenizers`` tokenizer (a ``tokenizer.json``) with the family's framing. ``decode`` drops special
    tokens (language codes included), as transformers' ``decode(ids, skip_special_tokens=True)``. source_prefix:
    text put before every source text (a T5 task prefix, e.g. "translate English to German: "), encoded with it as
    transformers' callers do; reference translations get none."""

    def __init__(
        self,
        backend: FastBackend,
        path: Path,
        framing: Framing,
        specials: Mapping[str, str],
        *,
        source_prefix: str = "",
    ) -> None:
        if not isinstance(source_prefix, str):
            raise ValueError(f"text_prefix (the task prefix put before a source) must be text, got {source_prefix!r}")
        self.backend, self.path, self.framing, self.source_prefix = backend, Path(path), framing, source_prefix
        self.pieces_of = dict(specials)  # 'pad' / 'bos' / 'eos' / 'unk' -> piece
        ids = {name: backend.token_to_id(piece) for name, piece in self.pieces_of.items()}
        missing = [self.pieces_of[name] for name, i in ids.items() if i is None and name in ("eos", "unk")]
        if missing:
            raise CheckpointError(f"{self.path}: has no {missing[0]!r} token")
        self.ids = {name: -1 if i is None else int(i) for name, i in ids.items()}
        self.unk_id, self.eos_id = self.ids["unk"], self.ids["eos"]
        added = backend.get_added_tokens_decoder()
        self._special = {int(i) for i, token in added.items() if token.special}
        self._added = {int(i) for i in added}
        self.byte_level = isinstance(backend.decoder, decoders.ByteLevel)  # BART's pieces: bytes as characters

    @classmethod
    def from_file(
        cls, path: Path, framing: Framing, specials: Mapping[str, str], *, source_prefix: str = ""
    ) -> FastTokenizer:
        try:
            backend = FastBackend.from_file(str(path))
        except Exception as exc:  # tokenizers raises its own Exception types with Rust text
            raise CheckpointError(f"{path}: not a readable tokenizer.json ({exc})") from None
        return cls(backend, path, framing, specials, source_prefix=source_prefix)

    @property
    def vocab_size(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    @functools.cached_property
    def text_rows(self) -> int:
        """One more than the largest id of a piece that is not a special token (language codes, <mask>: those in
        use are ``ids_in_use``; one typed in a text is refused by the bundle when the model has no row for it).
        Counted once, when first asked (the whole vocabulary is read: 256k pieces for NLLB)."""
        plain = [int(i) for i in self.backend.get_vocab(with_added_tokens=True).values() if int(i) not in self._special]
        return max(plain, default=-1) + 1

    def special_ids(self) -> dict[str, int]:
        return {f"{name}_id": self.ids.get(name, -1) for name in ("pad", "bos", "eos", "unk")}

    def token_id(self, piece: str) -> int | None:
        """The id of ``piece`` (a language code, a special token), None when the tokenizer has none."""
        found = self.backend.token_to_id(piece)
        return None if found is None else int(found)

    def _ids(self, text: str) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def encode(self, text: str) -> list[int]:
        """A source text's ids, the task prefix (if any) first; no framing (``frame_source`` adds it)."""
        return self._ids(self.source_prefix + text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        prefixed = [self.source_prefix + text for text in texts]
        return [list(e.ids) for e in self.backend.encode_batch(prefixed, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return str(self.backend.decode([int(i) for i in ids], skip_special_tokens=True)).strip()

    def piece(self, token_id: int) -> str:
        """The piece of ``token_id`` as every tokenizer here shows it: a byte-level BPE piece (BART's 'Ġcat') read
        back into its text with ``▁`` for the space that starts a word ('▁cat'), as SentencePiece pieces are; a
        piece that is part of a character shows its bytes ('\\xe2')."""
        found = self.backend.id_to_token(int(token_id))
        if found is None:
            return self.pieces_of["unk"]
        if not self.byte_level or int(token_id) in self._added:
            return str(found)
        return byte_level_text(str(found)).replace(" ", "\u2581")

    def spec(self, *, file: str) -> dict[str, Any]:
        """What a checkpoint's config.json says about this tokenizer, given its file name in the folder."""
        prefix = {"text_prefix": self.source_prefix} if self.source_prefix else {}
        return {
            "type": HF_TOKENIZER_JSON,
            "file": file,
            "specials": dict(self.pieces_of),
            **self.framing.spec(),
            **prefix,
        }


class M2M100VocabTokenizer(FramedTokenizer):
    """M2M100's tokenizer: SentencePiece pieces, ids from ``vocab.json`` (a piece it lacks is <unk>), then one token
    per language (``__en__``) and ``M2M100_MADEUP_WORDS`` unnamed rows after the vocabulary."""

    def __init__(self, model: Path, vocab: Mapping[str, int], languages: str, framing: Framing) -> None:
        super().__init__(model)  # self.sp, self.path
        if languages not in M2M100_LANGUAGES:
            raise ValueError(f"language_codes must be one of {sorted(M2M100_LANGUAGES)}, got {languages!r}")
        for piece in ("<unk>", "</s>", "<pad>", "<s>"):
            if piece not in vocab:
                raise ValueError(f"the vocabulary has no {piece!r}")
        self.vocab, self.languages, self.framing = dict(vocab), languages, framing
        size = len(self.vocab)
        self.language_ids = {f"__{code}__": size + i for i, code in enumerate(M2M100_LANGUAGES[languages])}
        self.piece_of = {i: piece for piece, i in {**self.vocab, **self.language_ids}.items()}
        self.unk_id, self.eos_id = self.vocab["<unk>"], self.vocab["</s>"]
        self._special = {self.vocab[p] for p in ("<unk>", "</s>", "<pad>", "<s>")} | set(self.language_ids.values())

    @property
    def vocab_size(self) -> int:
        return len(self.vocab) + len(self.language_ids) + M2M100_MADEUP_WORDS

    @property
    def text_rows(self) -> int:
        """vocab.json's ids (the language tokens in use are counted by ``ids_in_use``; the made-up rows never)."""
        return max(self.vocab.values()) + 1

    def special_ids(self) -> dict[str, int]:
        v = self.vocab
        return {"pad_id": v["<pad>"], "bos_id": v["<s>"], "eos_id": self.eos_id, "unk_id": self.unk_id}

    def token_id(self, piece: str) -> int | None:
        found = self.language_ids.get(piece, self.vocab.get(piece))
        return None if found is None else int(found)

    def encode(self, text: str) -> list[int]:
        return [self.vocab.get(piece, self.unk_id) for piece in self.sp.encode(text, out_type=str)]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(text) for text in texts]

    def decode(self, ids: Iterable[int]) -> str:
        pieces = [self.piece(i) for i in ids if int(i) not in self._special]
        return str(self.sp.decode_pieces(pieces)).strip()

    def piece(self, token_id: int) -> str:
        return self.piece_of.get(int(token_id), "<unk>")

    def spec(self, *, model: str, vocab: str) -> dict[str, Any]:
        return {
            "type": M2M100_VOCAB,
            "model": model,
            "vocab": vocab,
            "languages": self.languages,
            **self.framing.spec(),
        }


def open_family_tokenizer(spec: Mapping[str, Any], file: Any) -> Tokenizer:
    """The tokenizer a config.json ``tokenizer`` entry of type ``hf-tokenizer-json`` or ``m2m100-vocab`` names;
    ``file(key)`` gives the checked path of the file the entry's ``key`` names. ValueError saying what is wrong."""
    framing = Framing.from_spec(spec)
    if spec.get("type") == HF_TOKENIZER_JSON:
        specials = spec.get("specials")
        if not isinstance(specials, dict) or not all(isinstance(v, str) for v in specials.values()):
            raise ValueError(f"specials must map 'eos', 'unk', ... to pieces, got {specials!r}")
        return FastTokenizer.from_file(file("file"), framing, specials, source_prefix=spec.get("text_prefix", ""))
    vocab = read_vocab(file("vocab"))
    return M2M100VocabTokenizer(file("model"), vocab, str(spec.get("languages")), framing)


FAMILY_TOKENIZERS = (HF_TOKENIZER_JSON, M2M100_VOCAB)  # the config.json tokenizer types this module opens
