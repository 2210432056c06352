"""Marian's lexical shortlist: the output rows a production Marian engine scores for one source.

Bergamot's models ship a binary ``lex.*.s2t.bin`` next to their weights. Their engine does not score the whole
32,000-piece vocabulary at each step: for a batch it keeps the ``frequent`` most frequent target ids, the ``best``
likeliest translations of every source piece (from word alignments), the source pieces themselves when source and
target share one vocabulary, and pads that set with the next unused ids to a multiple of 8 (its int8 kernel's
width). The output layer then has those rows only, and the softmax is over them (Marian's
``BinaryShortlistGenerator::generate``; slimt's ``ShortlistGenerator::generate`` reads the same file the same way).

``Shortlist.rows(src_ids)`` gives that set; decoding with ``InferenceOptions(shortlist=True)`` scores only it
(``Bundle`` passes the rows down as ``vocab``), which is what the production engine computes. The importer stores
the shortlist as ``shortlist.safetensors`` in the checkpoint folder.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from ..errors import CheckpointError

MAGIC = 0xF11A48D5013417F5  # the first 8 bytes of a binary shortlist (Marian's BINARY_SHORTLIST_MAGIC)
HEADER = 6  # uint64 fields: magic, checksum, frequent, best, offsets' length, targets' length
ALIGN = 8  # the kept rows are padded to a multiple of this
FILE_NAME = "shortlist.safetensors"


@dataclass(frozen=True, eq=False)  # arrays inside: compared by identity
class Shortlist:
    """Source piece w's candidate translations are ``targets[offsets[w]:offsets[w + 1]]``.

    frequent: target ids 0 .. frequent-1 are always kept (the vocabulary is sorted by frequency).
    best: how many candidates per source piece the file was built with (recorded, not used).
    offsets: (n_source + 1,) int64, non-decreasing, from 0 to len(targets).
    targets: (N,) int64 target ids, each below ``vocab_size``.
    shared: source and target share one vocabulary: a source piece's own id is kept too.
    vocab_size: the target vocabulary (the output layer's rows).
    """

    frequent: int
    best: int
    offsets: np.ndarray
    targets: np.ndarray
    shared: bool
    vocab_size: int

    def __post_init__(self) -> None:
        off, tgt = self.offsets, self.targets
        problem = None
        if off.ndim != 1 or tgt.ndim != 1 or off.size < 1:
            problem = "offsets and targets must be 1-D and offsets not empty"
        elif off[0] != 0 or off[-1] != tgt.size or bool((np.diff(off) < 0).any()):
            problem = f"offsets must rise from 0 to the number of targets ({tgt.size})"
        elif tgt.size and (int(tgt.min()) < 0 or int(tgt.max()) >= self.vocab_size):
            problem = f"target ids must lie in 0 .. {self.vocab_size - 1}"
        elif not 0 <= self.frequent <= self.vocab_size:
            problem = f"frequent={self.frequent} is outside 0 .. {self.vocab_size}"
        if problem:
            raise CheckpointError(f"lexical shortlist: {problem}")

    @classmethod
    def from_marian(cls, path: str | Path, vocab_size: int, *, shared: bool) -> Shortlist:
        """Read Marian's binary shortlist (``lex.*.bin``); CheckpointError naming what is wrong with the file. Its
        layout is checked (header, sizes, offsets, ids); its checksum is not verified."""
        path = Path(path)
        raw = path.read_bytes()
        if len(raw) < 8 * HEADER:
            raise CheckpointError(f"{path}: {len(raw)} bytes, too short for a Marian binary shortlist")
        magic, _checksum, frequent, best, n_offsets, n_targets = (int(v) for v in np.frombuffer(raw[:48], "<u8"))
        if magic != MAGIC:
            raise CheckpointError(f"{path}: not a Marian binary shortlist (its first 8 bytes are not the magic number)")
        expected = 8 * HEADER + 8 * n_offsets + 4 * n_targets
        if expected != len(raw):
            raise CheckpointError(f"{path}: the header says {expected:,} bytes, the file has {len(raw):,}")
        offsets = np.frombuffer(raw, "<u8", n_offsets, 48).astype(np.int64)
        targets = np.frombuffer(raw, "<u4", n_targets, 48 + 8 * n_offsets).astype(np.int64)
        return cls(frequent, best, offsets, targets, shared, vocab_size)

    def save(self, path: str | Path) -> None:
        save_file(
            {
                "offsets": self.offsets,
                "targets": self.targets,
                "sizes": np.array([self.frequent, self.best, int(self.shared), self.vocab_size], dtype=np.int64),
            },
            str(path),
            metadata={"format": "marian-lexical-shortlist/1", "sizes": "frequent, best, shared, vocab_size"},
        )

    @classmethod
    def load(cls, path: str | Path) -> Shortlist:
        try:
            data = load_file(str(path))
            frequent, best, shared, vocab_size = (int(v) for v in data["sizes"])
            return cls(frequent, best, data["offsets"], data["targets"], bool(shared), vocab_size)
        except (SafetensorError, OSError, KeyError, ValueError) as exc:
            raise CheckpointError(f"{path}: not a readable shortlist ({exc})") from None

    def rows(self, src_ids: Iterable[int]) -> list[int]:
        """The sorted target ids the engine scores for a batch whose source pieces are ``src_ids`` (eos included,
        every sentence of the batch), padded to a multiple of 8. Any other id has probability 0 for the engine."""
        keep = np.zeros(self.vocab_size, dtype=bool)
        keep[: self.frequent] = True
        n_source = self.offsets.size - 1
        for w in {int(i) for i in src_ids}:
            if self.shared and 0 <= w < self.vocab_size:
                keep[w] = True
            if 0 <= w < n_source:
                keep[self.targets[self.offsets[w] : self.offsets[w + 1]]] = True
        missing = -int(keep.sum()) % ALIGN
        if missing:
            unused = np.flatnonzero(~keep[self.frequent :])[:missing] + self.frequent
            keep[unused] = True
        return np.flatnonzero(keep).tolist()


def load_beside(folder: Path) -> Shortlist | None:
    """The shortlist stored in a checkpoint folder, or None when it has none."""
    path = folder / FILE_NAME
    return Shortlist.load(path) if path.is_file() else None


def as_vocab(rows: list[int] | None, device: torch.device) -> torch.Tensor | None:
    """Rows as the ``vocab`` tensor decoding takes ((S,) int64 on ``device``), or None for every id."""
    return None if rows is None else torch.tensor(rows, dtype=torch.long, device=device)
