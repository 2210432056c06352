"""What a call accepts, checked in one place: the limits, text (``clean_text``), whole-number settings
(``check_whole``), token ids (``check_ids``, the one id validator, behind ``check_prefix`` for a forced prefix
and ``check_target`` for teacher-forced target ids), and the device a model loads on (``pick_device``).

Every check raises ``InputError`` with a message a person can act on; ``Bundle`` calls these before anything runs.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from .config import ModelConfig
from .errors import InputError

MAX_CHARS = 5000
MAX_BEAM = 16  # beams; more only multiplies the time
MAX_OUTPUT_TOKENS = 1024


class Source(NamedTuple):
    """One source text as a call reads it: its ids (eos appended), the notices for the person, the cleaned text."""

    ids: list[int]
    notices: tuple[str, ...]
    text: str


# the categories of characters nothing is seen of: controls, format characters (zero-width spaces and joiners),
# surrogates, private use, separators, and combining marks (seen only on a letter). A text needs one character
# outside them; unassigned code points (Cn) count as seen: Python's tables lag Unicode (a new emoji is Cn here)
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Zs", "Zl", "Zp", "Mn", "Mc", "Me"})


def clean_text(text: Any) -> str:
    """NFC-normalise, turn control characters into spaces, collapse whitespace. Raises InputError if no visible
    character is left (a letter, digit, punctuation mark or symbol)."""
    if not isinstance(text, str):
        raise InputError(f"Expected text (a str), got {type(text).__name__}.")
    if len(text) > MAX_CHARS:
        raise InputError(
            f"The text is {len(text):,} characters long; the limit is {MAX_CHARS:,}. "
            "Shorten it (in Python, truncate=True cuts a source text instead)."
        )
    text = unicodedata.normalize("NFC", text)
    text = "".join(" " if unicodedata.category(ch) in ("Cc", "Cs", "Co") else ch for ch in text)
    # invisible format characters (zero-width spaces, a byte-order mark, ...) carry no words: a text of only
    # those is empty; the joiners that shape a script (ZWJ, ZWNJ) stay inside words
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf" or ch in "\u200c\u200d")
    text = " ".join(text.split())
    if not any(unicodedata.category(ch) not in _INVISIBLE for ch in text):
        raise InputError(
            "The text is empty: it has no visible character (only spaces, control or invisible format characters, "
            "or combining marks with no letter to sit on). Type a sentence to translate."
        )
    return text


def check_whole(name: str, value: Any, low: int, high: int) -> None:
    """InputError unless ``value`` is a whole number from ``low`` to ``high`` (a bool is not one)."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InputError(f"{name} must be a whole number from {low} to {high}, got {value!r}")


def check_ids(value: Any, vocab_size: int, *, name: str, noun: str) -> list[int]:
    """``value`` as a list of target ids, each a whole number from 0 to ``vocab_size - 1`` (numpy integers count,
    bools do not). InputError naming the argument (``name``, e.g. 'prefix') or its ids (``noun``, 'prefix ids')."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InputError(f"{name} must be a list of target token ids, got {type(value).__name__}")
    for i in value:
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool) or not 0 <= int(i) < vocab_size:
            raise InputError(f"{noun} must be whole numbers from 0 to {vocab_size - 1}, got {i!r}")
    return [int(i) for i in value]


def check_prefix(prefix: Any, config: ModelConfig, max_len: int, piece: Callable[[int], str]) -> list[int]:
    """The output ids ``Bundle.translate_from`` forces at the first steps, checked against the model: ids it can
    produce, eos only last, the model's forced first id first, at most ``max_len``."""
    ids = check_ids(prefix, config.tgt_vocab_size, name="prefix", noun="prefix ids")
    for i in ids:
        if i in config.suppress_ids:
            raise InputError(f"prefix id {i} is a piece this model never produces")
    if config.eos_id in ids[:-1]:
        raise InputError("the end of the sentence (eos) can only be the last id of a prefix")
    if ids and config.forced_bos_id is not None and ids[0] != config.forced_bos_id:
        raise InputError(
            f"this model's first output is always id {config.forced_bos_id} "
            f"({piece(config.forced_bos_id)}, the target language): a prefix starts with it"
        )
    if len(ids) > max_len:
        raise InputError(f"the prefix has {len(ids)} ids, more than max_len={max_len}")
    return ids


def check_target(value: Any, vocab_size: int, limit: int) -> list[int]:
    """The output ids ``Bundle.teacher_forced(target_ids=...)`` feeds, as given: at least one, at most ``limit``
    (the output positions the model reads)."""
    ids = check_ids(value, vocab_size, name="target_ids", noun="target ids")
    if not ids:
        raise InputError("target_ids is empty: give at least one output id (eos for an empty output)")
    if len(ids) > limit:
        raise InputError(f"target_ids has {len(ids)} ids; this model reads at most {limit} output positions")
    return ids


def check_rows(ids: Sequence[int], rows: int, piece: Callable[[int], str]) -> None:
    """InputError when a text gave an id the model has no embedding row for: an added token of the tokenizer
    typed in it (a model may have fewer rows than its tokenizer has ids, as transformers allows)."""
    rowless = [i for i in ids if i >= rows]
    if rowless:
        raise InputError(
            f"The text contains {piece(rowless[0])!r}, a token of this tokenizer (id {rowless[0]}) "
            f"that the model has no embedding for (it has {rows:,} rows); remove it."
        )


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """``device``, checked (InputError naming it when torch does not know it or it is not here); None: CUDA if
    available, else the CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError):
        raise InputError(f"unknown device {device!r}: use 'cpu' or 'cuda' (or 'cuda:N')") from None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"device {device!r} asked for, but no CUDA GPU is available here: use 'cpu'")
    if chosen.type not in ("cpu", "cuda"):
        raise InputError(f"device {device!r} is not supported: use 'cpu' or 'cuda'")
    return chosen
