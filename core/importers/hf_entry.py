"""One entry of the family table (``hf_families.FAMILIES``): what differs between the Hugging Face families the lab
opens, as data and the module of the family's steps, and what those steps are given and give back.

The one path through an entry (``hf_families.convert``) asks its family's module (``Steps``): ``read_hf_folder``
checks what every folder shares and asks ``read_tokenizer`` to check the tokenizer's files (``HFFolder``); ``setup``
builds the tokenizer and picks the languages (``Setup``); ``model_config`` translates config.json into core's
``ModelConfig``; ``tensors`` names the file's tensors for core's parameters (``Tensors``); ``card`` gives the card's
family facts (``Card``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from ..config import ModelConfig
from ..text.tokenizer import Tokenizer
from ..transformer.model import Transformer

Languages = tuple[str | None, str | None]  # (source, target) as asked for; None: the folder's own


@dataclass(frozen=True)
class ModelType:
    """One config.json model_type an entry opens."""

    what: str  # for people: "mBART / mBART-50"
    architecture: str  # the one class of config.json's architectures that opens: "MBartForConditionalGeneration"
    defaults: Mapping[str, Any]  # transformers 5.23's config defaults: what a field absent from config.json means


@dataclass(frozen=True)
class HFFolder:
    """The checked contents of a Hugging Face folder of one of the table's families (``read_hf_folder``)."""

    folder: Path
    entry: Family  # the family entry its model_type picked
    model_type: str
    config: dict[str, Any]
    tensors: dict[str, torch.Tensor]  # the file's dtypes, names as in the file
    tokenizer_config: dict[str, Any]  # {} when the folder has none
    generation_config: dict[str, Any]  # {} when the folder has none
    licence: str  # what the folder says, or "not stated in the folder"
    tokenizer_files: tuple[str, ...] = ()  # the tokenizer's files in the folder, as the entry's check found them
    vocab: dict[str, int] = field(default_factory=dict)  # vocab.json, where the tokenizer maps pieces by it

    def path(self, name: str) -> Path:
        return self.folder / name

    @property
    def defaults(self) -> Mapping[str, Any]:
        """transformers' config defaults for this folder's model_type."""
        return self.entry.models[self.model_type].defaults


@dataclass(frozen=True)
class Setup:
    """What an entry chose before the weights are converted: the tokenizer the checkpoint keeps, the languages, and
    the facts the config, the record and the card take from them."""

    tokenizer: Tokenizer  # framed as the checkpoint reads sources (prefix, language codes)
    languages: tuple[str, str]
    files: dict[str, Path]  # the tokenizer's files: name in the checkpoint -> the file to copy
    spec: dict[str, Any]  # the checkpoint's tokenizer entry (how to read ``files``)
    origin: dict[str, str] = field(default_factory=dict)  # imported_from's family fields (beside the shared ones)
    languages_from: tuple[str, str] = ("", "")  # where each language came from, where the entry says it
    prefix_from: str = ""  # where the source's task prefix came from (T5)
    start_id: int | None = None  # the decoder's first input, where the framing chooses it (the BART family)
    forced_bos_id: int | None = None  # the forced first output, where the framing chooses it (the BART family)


@dataclass(frozen=True)
class Tensors:
    """How the file's tensors become core's parameters (``hf_common.mapped_state`` checks every one)."""

    given: dict[str, torch.Tensor]  # core name -> tensor the entry resolved itself (embeddings, head, bias)
    names: dict[str, str]  # core name -> the file's name, for every other parameter
    known: set[str]  # the file's names read for ``given`` or known to be unused
    what: str  # the model config.json describes, for messages: "MarianMTModel of 2+2 layers"


@dataclass(frozen=True)
class Card:
    """A family's parts of the checkpoint's card (``hf_card.card_text`` writes the rest)."""

    title: str  # "imported from a Hugging Face {title} folder"
    model: str  # the Model section's lines
    conversion: str  # what the conversion did, after the command
    more: str = ""  # sections between Model and Conversion (T5's task prefix), each ending in a blank line


class Steps(Protocol):
    """The functions a family's module gives the one import path (``hf_marian``, ``hf_t5``, ``hf_bart``)."""

    def read_tokenizer(self, f: HFFolder) -> HFFolder:
        """Check the tokenizer's files; the folder with them named (``HFFolder.tokenizer_files``, ``vocab``)."""
        ...

    def setup(self, f: HFFolder, languages: Languages, source_prefix: str | None, scratch: Path) -> Setup:
        """The tokenizer and languages (a file it builds goes in the folder ``scratch``)."""
        ...

    def model_config(self, f: HFFolder, chosen: Setup) -> ModelConfig:
        """config.json as core's ModelConfig."""
        ...

    def tensors(self, f: HFFolder, cfg: ModelConfig) -> Tensors:
        """How the file's tensors become core's parameters."""
        ...

    def card(self, f: HFFolder, chosen: Setup, model: Transformer, dtype: torch.dtype) -> Card:
        """The card's family facts."""
        ...


@dataclass(frozen=True)
class Family:
    """One entry of the family table: what differs between the families as data, and the module of its steps."""

    format: str  # imported_from's format: "huggingface-marian"
    models: Mapping[str, ModelType]  # config.json model_type -> what it is
    steps: Steps  # the family's module
    prefixed: bool = False  # sources start with a task prefix (--source-prefix): T5
