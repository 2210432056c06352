"""The cached runs: translations and analyses, cached on (checkpoint, text, options, beam) in one cache bounded by
bytes for all sessions (``viz_app/cache.py``, ``LAB_CACHE_MB``). Options travel as ``options_key`` (a tuple of
the options' fields), never as the object or the model.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

import core
from core.analysis import HeadImportance, head_importance, head_importance_estimate
from core.analysis.alignment import AlignmentScores
from core.analysis.attribution import Attribution, ContrastKind, attribute
from core.analysis.contributions import Contributions
from core.analysis.contributions import contributions as alti_contributions
from core.analysis.head_spread import HeadSpread
from core.analysis.heads import HeadStatistics
from core.analysis.lens import LogitLens, lens_of
from core.analysis.patching import PatchingResult, activation_patching
from core.analysis.sentences import builtin_sentences
from core.analysis.survey import (
    builtin_spread,
    builtin_statistics,
    cached_builtin_statistics,
    gold_pairs,
    kept_alignment_scores,
)
from core.analysis.value_norms import ValueNorms, value_norms
from core.decoding.sampling import Sampling
from core.inputs import MAX_CHARS
from core.sites import ids_site, output_site
from viz_app.cache import cached, peek
from viz_app.session.server import load_bundle

OptionsKey = tuple[Any, ...]  # ``options_key``: InferenceOptions' fields in order


OPTION_FIELDS = dataclasses.fields(core.InferenceOptions)
NO_QKV = core.Record(qkv=False)  # what most cached runs record: q/k/v are most of a long trace's bytes


def options_key(options: core.InferenceOptions) -> OptionsKey:
    """A small hashable key for the cache (never hash the model or the options object): the options' fields in
    their order, the ablated heads sorted."""
    return tuple(
        tuple(sorted(value)) if isinstance(value, frozenset) else value
        for value in (getattr(options, f.name) for f in OPTION_FIELDS)
    )


def options_from_key(key: OptionsKey) -> core.InferenceOptions:
    """The options an ``options_key`` was made from (its inverse)."""
    return core.InferenceOptions(**{f.name: value for f, value in zip(OPTION_FIELDS, key, strict=True)})


def analysis_options(key: OptionsKey) -> core.InferenceOptions:
    """The switches an analysis runs with: the translation's, over the whole vocabulary (the analyses score log p
    of the chosen words among every word; the shortlist only narrows what decoding may pick)."""
    return options_from_key(key).with_changes(shortlist=False)


@cached("Translating …")
def translate(path: str, text: str, key: OptionsKey, beam: int, qkv: bool = False) -> core.Translation:
    """Cached ``Bundle.translate`` (long inputs truncated with a notice). q/k/v are recorded only when asked
    (the Learn page): they are most of a long trace's bytes and no other page reads them."""
    return load_bundle(path).translate(
        text, options=options_from_key(key), beam_size=beam, truncate=True, record=core.Record(qkv=qkv)
    )


SamplingKey = tuple[float, int | None, float | None, int]  # ``Sampling``'s fields: temperature, top_k, top_p, seed


@cached("Drawing a translation …")
def sample(path: str, text: str, key: OptionsKey, sampling: SamplingKey) -> core.Translation:
    """Cached ``Bundle.translate`` that draws each greedy step's piece (``core.decoding.sampling``) as ``sampling``
    (``Sampling``'s fields as plain values) says: the same key, the same seed, the same draws."""
    return load_bundle(path).translate(
        text, options=options_from_key(key), truncate=True, record=NO_QKV, sampling=Sampling(*sampling)
    )


@cached("Recording every activation of this translation …")
def recorded_more(path: str, text: str, key: OptionsKey, beam: int) -> core.Translation:
    """The translation with q/k/v, the residual stream and each head's output recorded (the Learn page only): the
    page's translation again as one teacher-forced pass, not decoded a second time."""
    return load_bundle(path).record_more(translate(path, text, key, beam))


@cached("Re-running on the same output …")
def teacher_forced(path: str, text: str, target: str, key: OptionsKey) -> core.Translation:
    """Cached teacher-forced pass on a typed translation ``target`` (a run's own output goes by its ids: ``rerun``)."""
    return load_bundle(path).teacher_forced(text, target, options=options_from_key(key), truncate=True, record=NO_QKV)


@cached("Re-running on the same output …")
def rerun(
    path: str, text: str, out_ids: tuple[int, ...], key: OptionsKey, activations: bool = False
) -> core.Translation:
    """Cached teacher-forced pass on a run's own output ids (``Translation.output_ids``) with these switches: the
    same decoder inputs as that run, whether or not its text tokenizes back to them; ``activations``: with the
    residual stream recorded (the logit lens)."""
    record = core.Record(qkv=False, activations=activations)
    return load_bundle(path).teacher_forced(
        text, target_ids=out_ids, options=options_from_key(key), truncate=True, record=record
    )


@cached("Reading every decoder layer through the output layer (logit lens) …")
def lens(path: str, text: str, key: OptionsKey, out_ids: tuple[int, ...], shortlisted: bool) -> LogitLens:
    """The logit lens of the page's translation (``out_ids``; ``key``: its switches over the whole vocabulary): its
    translation recorded once more with every layer's stream (``recorded_more``, which the Learn page reads too), or
    a shortlisted one's ids fed again (``rerun``); then one projection of every layer's rows (``lens_of``)."""
    if shortlisted:
        run = rerun(path, text, out_ids, key, activations=True)
    else:
        run = recorded_more(path, text, key, 1)
    return lens_of(load_bundle(path), run)


@cached("Encoding …")
def encoder_output(path: str, text: str, key: OptionsKey) -> tuple[list[str], np.ndarray]:
    """The source pieces (eos included) and the encoder's output (Ts, D) for ``text`` with these switches: what
    the decoder reads (the Positional-encoding page compares it across word orders)."""
    bundle = load_bundle(path)
    ids, memory = bundle.encode(text, options_from_key(key), truncate=True)  # memory (Ts, D)
    return [bundle.tokenizer.piece(i) for i in ids], memory.float().cpu().numpy()


@cached("Translating the batch …")
def translate_batch(path: str, texts: tuple[str, ...], key: OptionsKey) -> list[core.Translation]:
    """Cached padded batch (``Bundle.translate_batch``: one Translation per text, each its item of the batch's
    trace), without q/k/v (the Masks page reads weights and scores).

    Texts are cut to the characters the encoder reads (``truncate`` cuts them there too, and the page says so),
    since the batch's record of its texts refuses longer ones."""
    cut = [text[:MAX_CHARS] for text in texts]
    return load_bundle(path).translate_batch(cut, options=options_from_key(key), truncate=True, record=NO_QKV)


# Beyond this many pieces (source + translation) head importance opens with the one-pass estimate and measures
# each head switched off on request: the measurement costs a teacher-forced pass per head (on the default model,
# one thread, here: 1.1 s for 40 pieces, 5.7 s for 287; the estimate 0.08 s and 0.26 s).
IMPORTANCE_EXACT_PIECES = 64


def _ids(path: str, text: str, key: OptionsKey) -> tuple[list[int], list[int]]:
    """The source ids and greedy output ids (eos included) of the current translation."""
    out = translate(path, text, key, 1)
    return [int(i) for i in out.trace[ids_site("src")]], [int(i) for i in out.trace[output_site("ids")]]


@cached("Switching every head off, one at a time …")
def importance(path: str, text: str, key: OptionsKey) -> HeadImportance:
    """Cached head importance of the current (greedy) translation: each head switched off alone."""
    src_ids, out_ids = _ids(path, text, key)
    bundle = load_bundle(path)
    return head_importance(bundle, src_ids, out_ids, options=analysis_options(key))


@cached("Estimating every head's effect from one gradient pass …")
def importance_estimate(path: str, text: str, key: OptionsKey) -> HeadImportance:
    """Cached first-order estimate of the same (one forward and backward pass)."""
    src_ids, out_ids = _ids(path, text, key)
    return head_importance_estimate(load_bundle(path), src_ids, out_ids, options=analysis_options(key))


@cached("Patching every site from the clean run into the corrupted one …")
def patching(path: str, text: str, corrupt: str, key: OptionsKey, position: int | None) -> PatchingResult:
    """Cached activation patching of the current translation against a corrupted source sentence."""
    src_ids, out_ids = _ids(path, text, key)
    bundle = load_bundle(path)
    corrupt_ids, _ = bundle.encode_source(corrupt, truncate=True)
    return activation_patching(
        bundle,
        src_ids,
        corrupt_ids,
        out_ids,
        position=position,
        options=analysis_options(key),
    )


@cached("Integrating gradients …")
def attribution(
    path: str,
    text: str,
    key: OptionsKey,
    position: int,
    steps: int = 32,
    contrast: int | None = None,
    kind: ContrastKind = "logit_diff",
) -> Attribution:
    """Cached gradient x input and integrated gradients (``steps`` points) for output token ``position``: of its
    log-probability, or with ``contrast`` (a piece id) of log p(y_t) - log p(c) (``kind`` "logit_diff") or p(y_t) -
    p(c) ("prob_diff")."""
    src_ids, out_ids = _ids(path, text, key)
    return attribute(
        load_bundle(path),
        src_ids,
        out_ids,
        position,
        steps=steps,
        contrast=contrast,
        contrast_kind=kind,
        options=analysis_options(key),
    )


@cached("Tracing each output word back to the source and the prefix (ALTI+) …")
def contributions(
    path: str, text: str, key: OptionsKey, translation: str | None = None, output_ids: tuple[int, ...] | None = None
) -> Contributions:
    """Cached ALTI+ contributions of the page's greedy translation (``translation`` None) or of a typed translation,
    teacher-forced, over the whole vocabulary (with the shortlist on, the page's own translation is scored); or of
    the ids ``output_ids`` a run was fed (the Compare page's B reading A's translation: not its text read again)."""
    bundle, options = load_bundle(path), analysis_options(key)
    if output_ids is not None:
        return alti_contributions(bundle, text, output_ids=output_ids, options=options, truncate=True)
    scored = _scored(path, text, key, translation)
    return alti_contributions(bundle, text, translation=scored, options=options, truncate=True)


@cached("Weighing each value by its attention (value-weighted norms) …")
def weighted_norms(path: str, text: str, key: OptionsKey, translation: str | None = None) -> ValueNorms:
    """Cached value-weighted norms (Kobayashi et al., 2020) of the translation ``contributions`` scores."""
    scored = _scored(path, text, key, translation)
    return value_norms(load_bundle(path), text, translation=scored, options=analysis_options(key), truncate=True)


def _scored(path: str, text: str, key: OptionsKey, translation: str | None) -> str | None:
    """The translation an analysis over the whole vocabulary scores: ``translation``, or the page's own (greedy)
    one — given as its text when the shortlist is on, since the analysis decodes without it."""
    if translation is None and options_from_key(key).shortlist:
        return translate(path, text, key, 1).text
    return translation


# The built-in sentences a translation's source share is compared with: the first of the source language's set.
# Each costs a greedy translation and one recorded pass (about 0.3 s on the distilled models, one thread, here).
BUILTIN_SHARE_SENTENCES = 24


@cached("Scoring the built-in sentences' source shares (once per checkpoint and switches) …")
def builtin_source_shares(path: str, key: OptionsKey) -> tuple[np.ndarray, np.ndarray]:
    """The model's own translations of the first ``BUILTIN_SHARE_SENTENCES`` built-in sentences, with these
    switches: each sentence's source share (n,) and every output word's (all words of all sentences)."""
    bundle = load_bundle(path)
    sentences, _ = builtin_sentences(bundle.languages[0])
    found = [alti_contributions(bundle, s, options=analysis_options(key)) for s in sentences[:BUILTIN_SHARE_SENTENCES]]
    return np.array([c.source_share for c in found]), np.concatenate([c.token_source_share for c in found])


@cached("Measuring every head on the built-in sentences (once per checkpoint; kept on disk) …")
def head_survey(path: str) -> tuple[HeadStatistics, str]:
    """Head statistics over the built-in sentences of the checkpoint's source language, and that language."""
    return builtin_statistics(load_bundle(path))


@cached("Measuring every head on each built-in sentence (once per checkpoint; kept on disk) …")
def head_spread(path: str) -> tuple[HeadStatistics, HeadSpread, str]:
    """``head_survey`` with each sentence's own means (``core.analysis.head_spread``)."""
    return builtin_spread(load_bundle(path))


@cached("Scoring every cross-attention head on the hand-aligned sentences …")
def alignment(path: str) -> AlignmentScores | None:
    """Every cross head's AER on the shipped gold pairs of the checkpoint's languages (None: no gold data)."""
    bundle = load_bundle(path)
    gold = gold_pairs(*bundle.languages)
    return kept_alignment_scores(bundle, gold) if gold else None


def known_labels(path: str, kind: str) -> dict[tuple[int, int], list[str]]:
    """(layer, head) -> labels of ``kind``'s heads, from figures already computed (on disk or in the cache);
    empty until "What does each head do?" has measured this checkpoint. Never computes anything."""
    found = peek(head_spread, path) or peek(head_survey, path)  # the heads page's own figures first
    if found is None:
        if cached_builtin_statistics(load_bundle(path)) is None:
            return {}
        found = head_survey(path)  # on disk: read once into the shared cache, not at every rerun

    stats = found[0]
    scores = peek(alignment, path)
    if scores is not None:
        stats = stats.with_alignment(scores.head_aer)
    out: dict[tuple[int, int], list[str]] = {}
    for x in stats.labels():
        if x.kind == kind:
            out.setdefault((x.layer, x.head), []).append(x.label)
    return out
