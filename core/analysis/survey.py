"""Head statistics over the built-in sentences and alignment scores on gold data, for a loaded checkpoint.

The set statistics take a while (a few hundred translations), so they are computed once per checkpoint and
kept on disk in a user cache (``$LAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/attention-lab``, else
``~/.cache/attention-lab``) under a digest of the weights: changed weights never reuse old figures.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..config import Record
from ..errors import LabError
from ..recording.call import Call
from ..recording.recorder import Recorder
from ..results import Translation
from ..sites import attention_array, ids_site
from .alignment import AlignmentScores, GoldPair, read_gold, score_heads
from .contributions import Contributions, batch_contributions
from .head_spread import HeadSpread, alti_agreement, sentence_means, spread
from .heads import HeadStatistics, sentence_statistics, total
from .sentences import builtin_sentences

if TYPE_CHECKING:
    from ..bundle import Bundle

STATS_VERSION = 1  # bump when the statistics change meaning: old cache entries are then ignored
# hand-aligned pairs (align_<src>_<tgt>.tsv), shipped inside the package (package data; installed unzipped)
GOLD_DIR = Path(str(resources.files("core") / "data"))


def cache_dir() -> Path:
    base = os.environ.get("LAB_CACHE_DIR") or (
        str(Path(os.environ["XDG_CACHE_HOME"]) / "attention-lab")
        if os.environ.get("XDG_CACHE_HOME")
        else str(Path.home() / ".cache" / "attention-lab")
    )
    return Path(base)


def set_statistics(bundle: Bundle, sentences: list[str]) -> HeadStatistics:
    """Statistics summed over the greedy translations of ``sentences`` (as trained), one translation at a time."""
    return total(sentence_statistics(_translated(bundle, s).trace) for s in sentences)


def _translated(bundle: Bundle, sentence: str) -> Translation:
    """A sentence's greedy translation as the survey measures it (as trained, without q/k/v)."""
    return bundle.translate(sentence, truncate=True, record=Record(qkv=False))


SPREAD_BATCH = 16  # sentences per batched ALTI+ pass of ``survey_sentences``


def survey_sentences(bundle: Bundle, sentences: list[str]) -> tuple[HeadStatistics, HeadSpread]:
    """``set_statistics`` and each sentence's own means (``HeadSpread``) from one greedy translation each, with
    every cross head's agreement with ALTI+ on each sentence (batched ``batch_contributions`` of the same
    translations; left out, NaN, for a model or sentence ALTI+ cannot score here)."""
    outs = [_translated(bundle, s) for s in sentences]
    stats = [sentence_statistics(out.trace) for out in outs]
    means = [sentence_means(x) for x in stats]
    if all("cross" in out.trace.kinds for out in outs):
        # the ids each translation read and wrote (its source as truncated), scored a batch at a time: a batch
        # ALTI+ cannot score leaves its own sentences out, not the others
        rows = [([int(i) for i in out.trace[ids_site("src")]], list(out.output_ids)) for out in outs]
        found: list[Contributions | None] = []
        for i in range(0, len(rows), SPREAD_BATCH):
            chunk = rows[i : i + SPREAD_BATCH]
            try:
                found += batch_contributions(bundle, chunk, forced=[False] * len(chunk))
            except LabError:
                found += [None] * len(chunk)
        for mean, out, result in zip(means, outs, found, strict=True):
            if result is not None:
                maps = [out.trace.attention("cross", layer) for layer in range(out.trace.n_layers["cross"])]
                mean["cross"]["alti"] = alti_agreement(maps, result.source_matrix)
    return total(stats), spread(means)


def _cache_file(bundle: Bundle, n: int) -> Path:
    return cache_dir() / f"head-stats-v{STATS_VERSION}-{bundle.digest}-{n}.json"


def _spread_file(bundle: Bundle, n: int) -> Path:
    return cache_dir() / f"head-spread-v{STATS_VERSION}-{bundle.digest}-{n}.npz"


def builtin_spread(bundle: Bundle) -> tuple[HeadStatistics, HeadSpread, str]:
    """(statistics, each sentence's means, language) over the built-in sentences, from the disk cache when both are
    there; otherwise measured (one translation each) and kept."""
    sentences, language = builtin_sentences(bundle.languages[0])
    path = _spread_file(bundle, len(sentences))
    found = cached_builtin_statistics(bundle)
    if found is not None and path.is_file():
        try:
            return found[0], HeadSpread.load(path), found[1]
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache entry: measured again
    stats, spread_ = survey_sentences(bundle, sentences)
    _write_json(_cache_file(bundle, len(sentences)), {"language": language, "stats": stats.to_dict()})
    _write_atomically(path, spread_.save, suffix=".tmp.npz")
    return stats, spread_, language


def cached_builtin_statistics(bundle: Bundle) -> tuple[HeadStatistics, str] | None:
    """The built-in set's statistics if they are on disk already (never computes); None otherwise."""
    sentences, _ = builtin_sentences(bundle.languages[0])
    path = _cache_file(bundle, len(sentences))
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return HeadStatistics.from_dict(data["stats"]), str(data["language"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a damaged cache entry: recomputed by builtin_statistics


def builtin_statistics(bundle: Bundle, *, use_cache: bool = True) -> tuple[HeadStatistics, str]:
    """(statistics over the built-in sentences, language of those sentences), from the disk cache when there."""
    sentences, language = builtin_sentences(bundle.languages[0])
    path = _cache_file(bundle, len(sentences))
    found = cached_builtin_statistics(bundle) if use_cache else None
    if found is not None:
        return found
    stats = set_statistics(bundle, sentences)
    if use_cache:
        _write_json(path, {"language": language, "stats": stats.to_dict()})
    return stats, language


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write a JSON cache entry atomically (``_write_atomically``)."""
    _write_atomically(path, lambda tmp: tmp.write_text(json.dumps(data), encoding="utf-8"), suffix=".tmp")


def _write_atomically(path: Path, write: Callable[[Path], object], *, suffix: str) -> None:
    """A cache entry written by ``write`` into a file of its own beside ``path`` (sessions measure at once), then
    moved into place; a read-only home only means the figures are not kept, and a half-written file is removed."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=path.parent, suffix=suffix)
        os.close(fd)
    except OSError:
        return
    tmp = Path(name)
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


# ----------------------------------------------------------------------------- gold alignments
def gold_source(source: str, target: str, directory: Path | None = None) -> str | None:
    """Which shipped file ``gold_pairs`` reads for this direction (e.g. 'align_en_pt.tsv, read in reverse')."""
    directory = directory or GOLD_DIR
    if (directory / f"align_{source}_{target}.tsv").is_file():
        return f"align_{source}_{target}.tsv"
    if (directory / f"align_{target}_{source}.tsv").is_file():
        return f"align_{target}_{source}.tsv, read in reverse"
    return None


def gold_pairs(source: str, target: str, directory: Path | None = None) -> list[GoldPair] | None:
    """Hand-aligned pairs for this language direction: ``align_<src>_<tgt>.tsv``, or the reverse file with
    its sides and links swapped; None when there is neither."""
    directory = directory or GOLD_DIR
    direct, reverse = directory / f"align_{source}_{target}.tsv", directory / f"align_{target}_{source}.tsv"
    if direct.is_file():
        return read_gold(direct)
    if reverse.is_file():
        return [
            GoldPair(
                g.target,
                g.source,
                frozenset((j, i) for i, j in g.sure),
                frozenset((j, i) for i, j in g.possible),
            )
            for g in read_gold(reverse)
        ]
    return None


GOLD_BATCH = 16  # gold pairs per padded teacher-forced pass


def alignment_scores(bundle: Bundle, gold: list[GoldPair]) -> AlignmentScores:
    """Every cross head scored on ``gold``: each pair's target is fed through the model (teacher forcing), so
    the links are read off the attention the model has on exactly those words."""
    maps, src_pieces, out_pieces = gold_cross_attention(bundle, [(g.source, g.target) for g in gold])
    return score_heads(maps, src_pieces, out_pieces, gold)


@torch.inference_mode()
def gold_cross_attention(
    bundle: Bundle, pairs: list[tuple[str, str]]
) -> tuple[list[np.ndarray], list[list[str]], list[list[str]]]:
    """Each (source, target) pair's cross-attention (L, H, Tq, Tk) when its target is fed to the decoder (as
    ``Bundle.teacher_forced`` feeds it, eos appended), with its source and output pieces: ``GOLD_BATCH`` pairs per
    padded pass (padding masks on; the real rows are the unpadded pass's), no vocabulary projection."""
    model, tok, cfg = bundle.model, bundle.tokenizer, bundle.config
    maps: list[np.ndarray] = []
    src_pieces: list[list[str]] = []
    out_pieces: list[list[str]] = []
    for start in range(0, len(pairs), GOLD_BATCH):
        chunk = pairs[start : start + GOLD_BATCH]
        srcs = [bundle.encode_source(source)[0] for source, _ in chunk]
        tgts = [bundle.encode_target(target) for _, target in chunk]
        src, src_keep = bundle.padded(srcs)
        tgt, tgt_keep = bundle.padded([[cfg.bos_id] + t[:-1] for t in tgts])
        recorder = Recorder(model, qkv=False)
        memory = model.encode(src, src_keep, call=Call(recorder=recorder, fast=bundle.fast))
        model.decoder_states(tgt, memory, src_keep, call=Call(recorder=recorder, fast=bundle.fast), tgt_keep=tgt_keep)
        trace = recorder.freeze()
        cross = np.stack(
            [trace.arrays[attention_array("cross", layer, "weights")] for layer in range(cfg.n_decoder_layers)], 1
        )
        for i, (s_ids, t_ids) in enumerate(zip(srcs, tgts, strict=True)):
            maps.append(cross[i, :, :, : len(t_ids), : len(s_ids)])  # (L, H, Tq, Tk): the real rows and keys
            src_pieces.append([tok.piece(j) for j in s_ids])
            out_pieces.append([tok.piece(j) for j in t_ids])
    return maps, src_pieces, out_pieces


ALIGN_VERSION = 1  # bump when the scores change meaning


def _alignment_file(bundle: Bundle, gold: list[GoldPair]) -> Path:
    """The cache entry for these weights on exactly these gold pairs (a digest of their text and links)."""
    text = json.dumps([[g.source, g.target, sorted(g.sure), sorted(g.possible)] for g in gold])
    gold_digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    return cache_dir() / f"alignment-v{ALIGN_VERSION}-{bundle.digest}-{gold_digest}.json"


def kept_alignment_scores(bundle: Bundle, gold: list[GoldPair]) -> AlignmentScores:
    """``alignment_scores``, kept on disk like the head statistics (the app's heads page: under a second for the
    71 en→pt pairs on a small machine, the same for the same weights and pairs)."""
    path = _alignment_file(bundle, gold)
    if path.is_file():
        try:
            return AlignmentScores.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged entry: measured again below
    scores = alignment_scores(bundle, gold)
    _write_json(path, scores.to_dict())
    return scores


def alignment_card_section(scores: AlignmentScores, gold_name: str) -> str:
    """The "Alignment heads" section of a checkpoint card (Markdown), from measured scores."""
    layer, head = scores.best_head
    combo = " + ".join(f"L{a + 1} H{b + 1}" for a, b in scores.best_k)
    rows = [
        f"| best head: cross-attention layer {layer + 1} head {head + 1} | {scores.head_aer[layer, head]:.3f} |",
        f"| best combination (greedy, averaged): {combo} | {scores.best_k_aer:.3f} |",
        *[f"| layer {i + 1}, heads averaged | {v:.3f} |" for i, v in enumerate(scores.layer_aer)],
        f"| every cross head averaged | {scores.all_aer:.3f} |",
        *[f"| baseline: {k} | {v:.3f} |" for k, v in scores.baselines.items()],
    ]
    return "\n".join(
        [
            "## Alignment heads (word alignment from cross-attention)",
            "",
            f"Alignment error rate (AER, lower is better) of word links read off each cross-attention head "
            f"({scores.method}, shift {scores.shift}) against {scores.n_pairs} hand-aligned sentence pairs "
            f"(`core/data/{gold_name}`); measured with `python -m core heads --checkpoint <this folder>`.",
            "",
            "| read from | AER |",
            "|---|---|",
            *rows,
            "",
        ]
    )


def measured_alignment_section(bundle: Bundle) -> str:
    """The card's alignment-heads table, measured now on the shipped gold pairs of these languages ('' if none)."""
    gold, name = gold_pairs(*bundle.languages), gold_source(*bundle.languages)
    if not gold or name is None:
        return ""
    return "\n" + alignment_card_section(alignment_scores(bundle, gold), name)
