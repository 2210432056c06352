"""The public entry point: ``core.load(path)`` -> ``Bundle`` with ``translate`` and ``trace``."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .config import InferenceOptions, ModelConfig, Record
from .decoding.generation_rules import rules_in_force
from .decoding.sampling import Sampling
from .decoding.search import BeamStep, beam_search, greedy, max_steps, output_text, padded
from .decoding.shortlist import Shortlist, as_vocab, load_beside
from .errors import CheckpointError, InputError
from .fast.weights import FastWeights
from .forcing import forced_pass
from .inputs import (
    MAX_BEAM,
    MAX_CHARS,
    MAX_OUTPUT_TOKENS,
    Source,
    check_prefix,
    check_rows,
    check_target,
    check_whole,
    clean_text,
    pick_device,
)
from .recording.call import Call
from .recording.recorder import Recorder
from .recording.trace import ModelShape
from .results import BeamTree, Translation
from .sites import ids_site, output_site
from .storage.checkpoint import load_checkpoint
from .text.tokenizer import Tokenizer
from .transformer.model import Transformer


class Bundle:
    """A loaded checkpoint: model, tokenizer, config. Thread-safe: calls never mutate the model."""

    def __init__(
        self,
        model: Transformer,
        tokenizer: Tokenizer,
        info: dict[str, Any],
        path: Path | None = None,
        max_source_tokens: int = 256,
        shortlist: Shortlist | None = None,
    ) -> None:
        self.model, self.tokenizer, self.info, self.path = model, tokenizer, info, path
        self.max_source_tokens = max_source_tokens
        if shortlist is not None and shortlist.vocab_size != model.config.tgt_vocab_size:
            raise CheckpointError(
                f"the shortlist is for {shortlist.vocab_size:,} target ids; "
                f"the model has {model.config.tgt_vocab_size:,}"
            )
        self.shortlist = shortlist  # the lexical shortlist the model's production engine scores (None: none ships)
        self.fast = FastWeights(model)  # the fast path's copies of the weights, made once: the model never changes

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    @functools.cached_property
    def digest(self) -> str:
        """``weights_digest`` of the model, computed once: a Bundle's model never changes (like ``fast``)."""
        return weights_digest(self.model)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def name(self) -> str:
        return str(self.info.get("name") or (self.path.name if self.path else "model"))

    @property
    def languages(self) -> tuple[str, str]:
        return str(self.info.get("source_language", "src")), str(self.info.get("target_language", "tgt"))

    @property
    def position_limit(self) -> int:
        """The most positions a source or an output may have: a learned table's rows (BART, mBART); else a bound
        above the other limits (sinusoids have no end)."""
        rows = self.config.position_rows
        return MAX_OUTPUT_TOKENS + self.max_source_tokens if rows is None else rows

    # ----------------------------------------------------------------- pieces
    def encode_source(self, text: str, *, truncate: bool = False) -> tuple[list[int], list[str]]:
        """Source ids (eos appended) and notices for the person. Raises InputError on unusable text."""
        source = self._source(text, truncate)
        return source.ids, list(source.notices)

    def encode_target(self, text: str) -> list[int]:
        """A given translation's ids as a teacher-forced pass feeds them: cleaned, cut to ``max_source_tokens``
        pieces, eos appended (the decoder's inputs are the start token, then these but the last)."""
        limit = min(self.max_source_tokens, self.position_limit - 1)  # a learned table holds eos's position too
        ids = self.tokenizer.encode_target(clean_text(text))[:limit]
        check_rows(ids, self.config.tgt_vocab_size, self.tokenizer.piece)
        return ids + [self.config.eos_id]

    def padded(self, rows: Sequence[Sequence[int]]) -> tuple[Tensor, Tensor]:
        """Id rows as ONE batch on this bundle's device: ids (B, T) padded on the right with ``pad_id``, and keep
        flags (B, T), True = a real token (pass them on: Marian models' pad id is also eos, ids cannot tell)."""
        return padded(rows, self.config.pad_id, self.device)

    def _source(self, text: str, truncate: bool) -> Source:
        """``encode_source`` plus the cleaned text it encoded."""
        notices = []
        if truncate and isinstance(text, str) and len(text) > MAX_CHARS:
            notices.append(
                f"Truncated: the text was {len(text):,} characters long; only the first {MAX_CHARS:,} were read."
            )
            text = text[:MAX_CHARS]
        text = clean_text(text)
        ids = self.tokenizer.encode(text)
        framing = len(self.tokenizer.frame_source([], self.config.eos_id))  # eos, and <s> or language codes
        limit = min(self.max_source_tokens, self.position_limit) - framing
        if len(ids) > limit:
            if not truncate:
                raise InputError(
                    f"The text is {len(ids)} tokens long; the limit is {limit}. "
                    "Shorten it (in Python, truncate=True cuts a source text instead)."
                )
            notices.append(f"Truncated: the text was {len(ids)} tokens long; only the first {limit} were translated.")
            ids = ids[:limit]
        check_rows(ids, self.config.src_vocab_size, self.tokenizer.piece)
        unknown = sum(1 for i in ids if self.tokenizer.is_unknown(i))
        if unknown:
            notices.append(
                f"{unknown} piece{'s' if unknown != 1 else ''} of the text "
                f"{'are' if unknown != 1 else 'is'} unknown to this model's vocabulary (shown as <unk>)."
            )
        if not ids:
            raise InputError("Nothing translatable is left in the text after tokenisation.")
        trained = self.info.get("trained_source_pieces")  # the longest inputs it learned from, where the card knows
        if isinstance(trained, int) and not isinstance(trained, bool) and len(ids) > trained:
            notices.append(
                f"The text is {len(ids)} pieces long; this model learned from inputs of at most {trained} pieces, "
                "and beyond that its translation can loop or stop early. Shorter sentences translate better."
            )
        return Source(self.tokenizer.frame_source(ids, self.config.eos_id), tuple(notices), text)

    def check_options(
        self,
        options: InferenceOptions | None,
        *,
        beam_size: int = 1,
        max_len: int | None = None,
        record: Record = Record(),
        sampling: Sampling | None = None,
    ) -> InferenceOptions:
        """The options for a call, checked against this model; InputError naming what is wrong (``record`` and
        ``sampling`` check their own fields: this checks that they are ones, and that sampling has no beam)."""
        check_whole("beam_size", beam_size, 1, MAX_BEAM)
        if sampling is not None and (not isinstance(sampling, Sampling) or beam_size != 1):
            raise InputError("sampling is a core.decoding.sampling.Sampling, and draws one piece a step: beam size 1")
        if not isinstance(record, Record):
            raise InputError(f"record must be core.Record, got {type(record).__name__}")
        if max_len is not None:
            check_whole("max_len", max_len, 1, min(MAX_OUTPUT_TOKENS, self.position_limit))
        options = InferenceOptions() if options is None else options
        if not isinstance(options, InferenceOptions):
            raise InputError(f"options must be core.InferenceOptions, got {type(options).__name__}")
        try:
            ModelShape.of(self.config).check_ablation(options.ablate)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        if options.shortlist and self.shortlist is None:
            raise InputError(
                f"{self.name} has no lexical shortlist (imported Marian models such as bergamot-* ship one): "
                "switch the shortlist off"
            )
        return options

    def shortlist_vocab(self, options: InferenceOptions, src_ids: Sequence[int]) -> Tensor | None:
        """The ids a call scores: the shortlist's rows for these source ids (every sentence of a batch), as the
        production engine chooses them; None = every id."""
        if not options.shortlist or self.shortlist is None:
            return None
        return as_vocab(self.shortlist.rows(src_ids), self.device)

    def _rows(self, vocab: Tensor | None) -> dict[str, int]:
        """The trace's note of how many ids a call scored, of how many, when it scored a shortlist."""
        if vocab is None:
            return {}
        return {"shortlist_rows": int(vocab.shape[0]), "shortlist_of": self.config.tgt_vocab_size}

    def _rules(self) -> dict[str, Any]:
        """The trace's note of the generation rules the decoding ran with (``core.decoding.generation_rules``), when
        any is on: ``meta['generation_rules']``, e.g. {'min_length': 56, 'eos_banned_steps': 55, ...}."""
        rules = rules_in_force(self.config)
        return {"generation_rules": rules} if rules else {}

    def _limit(self, call: Call) -> dict[str, Any]:
        """The trace's note of the output steps the call allowed (``meta['max_len']``), when it decoded: the step
        a forced eos falls on (``core.decoding.generation_rules.forced_id``)."""
        return {} if call.max_len is None else {"max_len": call.max_len}

    # ----------------------------------------------------------------- the run path
    def _call(self, options: InferenceOptions, sources: Sequence[Source], record: Record | None, **how: Any) -> Call:
        """The per-call context of a call on ``sources``, built once: options, a recorder for what ``record`` asks
        (None: nothing recorded) and its top-k, fast weights, the shortlist's rows for every source id (one
        shortlist per batch, as Marian's), decoding settings ``how``."""
        vocab = self.shortlist_vocab(options, [i for source in sources for i in source.ids])
        if record is None:
            return Call(options, None, self.fast, vocab, **how)
        recorder = Recorder(self.model, qkv=record.qkv, activations=record.activations)
        return Call(options, recorder, self.fast, vocab, top_k=record.top_k, **how)

    def _run(
        self,
        sources: Sequence[Source],
        call: Call,
        given: Sequence[Sequence[int]] | None = None,
        history: list[BeamStep] | None = None,
    ) -> list[list[int]]:
        """The one run path behind every call (``beam_tree``, and through ``_translations`` ``translate``,
        ``translate_from``, ``teacher_forced``, ``record_more`` and ``translate_batch``): the sources as one padded
        batch, and each one's output ids (eos included if produced): ``given`` (a row per source), else beam
        search's (``call.beam_size`` > 1, or a ``history`` to fill with its ``BeamStep``s: each source searched
        alone, as ``translate`` searches it), else greedy decoding's. The call's recorder (if any) records greedy
        decoding as decoded, given or searched ids by one teacher-forced pass."""
        if history is not None and len(sources) != 1:
            raise ValueError("a beam search history is of one source")
        src, keep = self.padded([source.ids for source in sources])  # (B, Ts) each
        if given is None and (call.beam_size > 1 or history is not None):
            given = [beam_search(self.model, *self.padded([source.ids]), call, history) for source in sources]
        if given is None:
            result = greedy(self.model, src, keep, call)
            return [result.tokens[b, 1 : 1 + n].tolist() for b, n in enumerate(result.lengths)]
        rows = [list(ids) for ids in given]
        if call.recorder is not None:
            forced_pass(self.model, src, keep, rows, call)
        return rows

    def _translations(
        self, sources: Sequence[Source], call: Call, given: Sequence[Sequence[int]] | None = None, **meta: Any
    ) -> list[Translation]:
        """``_run`` recorded: one Translation per source, its item of the frozen trace, with its text (eos
        stripped), source text and notices, and ``meta``."""
        assert call.recorder is not None
        rows = self._run(sources, call, given)
        texts = [self._text(ids) for ids in rows]
        batch = {"texts": [s.text for s in sources], "outputs": texts} if len(sources) > 1 else {}
        if call.sampling is not None:  # how the pieces were drawn (``translate``, ``translate_batch``)
            meta = {**meta, "sampling": asdict(call.sampling)}
        trace = call.recorder.freeze(
            self.tokenizer.piece,
            meta={"model": self.name, **batch, **self._rows(call.vocab), **self._rules(), **self._limit(call), **meta},
        )
        return [
            Translation(
                replace(
                    trace.select(i),
                    meta={
                        **trace.meta,
                        "source_text": source.text,
                        "text": texts[i],
                        "beam_size": call.beam_size,
                        "notices": source.notices,
                    },
                )
            )
            for i, source in enumerate(sources)
        ]

    def _text(self, out_ids: Sequence[int]) -> str:
        return output_text(self.tokenizer, out_ids, self.config.eos_id)

    # ----------------------------------------------------------------- API
    @torch.inference_mode()
    def translate(
        self,
        text: str,
        options: InferenceOptions | None = None,
        *,
        beam_size: int = 1,
        max_len: int | None = None,
        truncate: bool = False,
        record: Record = Record(),
        sampling: Sampling | None = None,
    ) -> Translation:
        """Translate ``text`` and record every head (and what ``record`` asks for besides). Greedy with
        beam_size=1, else beam search (the beam's best output is then traced teacher-forced, which gives the same
        arrays); with ``sampling``, each greedy step draws its piece (``core.decoding.sampling``: temperature, top-k,
        top-p, a seed; the run's ``meta['sampling']`` says how)."""
        options = self.check_options(options, beam_size=beam_size, max_len=max_len, record=record, sampling=sampling)
        source = self._source(text, truncate)
        return self._decode(source, options, record, beam_size=beam_size, max_len=max_len, sampling=sampling)

    @torch.inference_mode()
    def translate_from(
        self,
        text: str,
        prefix: Sequence[int],
        options: InferenceOptions | None = None,
        *,
        max_len: int | None = None,
        truncate: bool = False,
        record: Record = Record(),
    ) -> Translation:
        """Translate ``text`` with the output ids ``prefix`` forced at the first steps ("what if the model had
        picked ..."), greedy after them; recorded like any translation (a forced step records the forced id, its
        probability and the model's own top-k), ``meta['forced_prefix']`` = how many were forced."""
        options = self.check_options(options, max_len=max_len, record=record)
        return self._decode(self._source(text, truncate), options, record, max_len=max_len, prefix=prefix)

    def _decode(
        self,
        source: Source,
        options: InferenceOptions,
        record: Record,
        *,
        beam_size: int = 1,
        max_len: int | None = None,
        prefix: Sequence[int] | None = None,
        sampling: Sampling | None = None,
    ) -> Translation:
        """``translate`` and ``translate_from`` on one checked source: its output decoded and recorded."""
        max_len = max_steps(self.config, max_len, len(source.ids))  # within a learned position table
        forced = [] if prefix is None else check_prefix(prefix, self.config, max_len, self.tokenizer.piece)
        how = {"max_len": max_len, "beam_size": beam_size, "prefix": tuple(forced), "sampling": sampling}
        call = self._call(options, [source], record, **how)
        return self._translations([source], call, None, **({"forced_prefix": len(forced)} if forced else {}))[0]

    @torch.inference_mode()
    def beam_tree(
        self,
        text: str,
        options: InferenceOptions | None = None,
        *,
        beam_size: int = 4,
        alpha: float | None = None,
        max_len: int | None = None,
        truncate: bool = False,
    ) -> BeamTree:
        """Beam search on ``text`` with its whole history: every hypothesis per step with its score, the pruned
        next best, each live beam's cross-attention; its winner is ``translate(text, beam_size=...)``'s output.
        The greedy translation's ids come along, to show where the two diverge. alpha: the length penalty (None: the
        model's own, ``ModelConfig.length_penalty``); how hypotheses finish is the model's (``ModelConfig.beam``)."""
        options = self.check_options(options, beam_size=beam_size, max_len=max_len)
        source = self._source(text, truncate)
        how = {"max_len": max_steps(self.config, max_len, len(source.ids)), "beam_size": beam_size, "alpha": alpha}
        call = self._call(options, [source], None, **how)  # nothing recorded: the history holds what the page shows
        history: list[BeamStep] = []
        (out_ids,) = self._run([source], call, history=history)
        (greedy_ids,) = self._run([source], replace(call, beam_size=1))  # the same call, decoded greedily
        used = set(source.ids) | set(out_ids) | set(greedy_ids)
        for step in history:
            used |= {int(i) for i in step.candidate_ids} | {int(i) for i in step.tokens.ravel()}
        return BeamTree(
            steps=tuple(history),
            output_ids=tuple(out_ids),
            greedy_ids=tuple(greedy_ids),
            src_tokens=tuple(self.tokenizer.piece(i) for i in source.ids),
            vocab={i: self.tokenizer.piece(i) for i in sorted(used)},
            beam_size=beam_size,
            alpha=self.config.length_penalty if alpha is None else alpha,
            options=options,
            eos_id=self.config.eos_id,
            meta={
                "model": self.name,
                "beam": self.config.beam,  # how hypotheses finish (core.decoding.beam_finish), for the page's words
                **self._rules(),
                **self._limit(call),
                "source_text": source.text,
                "text": self._text(out_ids),
                "greedy_text": self._text(greedy_ids),
            },
        )

    @torch.inference_mode()
    def record_more(self, out: Translation, *, record: Record = Record(activations=True)) -> Translation:
        """``out`` (a translation by this bundle) recorded again with what ``record`` asks for (by default q/k/v
        and the activations), as ONE teacher-forced pass on its own source and output ids: the arrays its decoding
        recorded (each position computed as its step did; the beam's winner is traced this way already; ``out``'s
        own top-k, whatever ``record.top_k`` says) plus these, at a fraction of decoding's cost on long sentences.
        The decoder's raw (pre-mask) scores then also hold the later keys decoding had not computed yet (-inf
        there). With the causal mask off each step saw only the prefix so far, which one pass cannot reproduce:
        such a translation is decoded again instead."""
        if out.trace.meta.get("model") != self.name:
            raise InputError(
                f"record_more: this translation was made by {out.trace.meta.get('model')!r}, not {self.name!r}"
            )
        src_ids = [int(i) for i in out.trace[ids_site("src")]]
        out_ids = [int(i) for i in out.trace[output_site("ids")]]
        self.check_options(out.options, record=record)
        record = replace(record, top_k=int(out.trace[output_site("top_ids")].shape[-1]))
        if not out.options.causal_mask:
            return self._decode(
                self._source(out.source_text, True),
                out.options,
                record,
                beam_size=out.beam_size,
                max_len=max(len(out_ids), 1),
                prefix=out_ids[: out.forced_prefix] or None,
            )
        source = Source(src_ids, out.notices, out.source_text)
        call = self._call(out.options, [source], record, beam_size=out.beam_size)
        extra = {"forced_prefix": out.forced_prefix} if out.forced_prefix else {}
        if "max_len" in out.trace.meta:  # the decoding's limit, not this pass's
            extra["max_len"] = out.trace.meta["max_len"]
        return self._translations([source], call, [out_ids], **extra)[0]

    @torch.inference_mode()
    def teacher_forced(
        self,
        src_text: str,
        tgt_text: str | None = None,
        options: InferenceOptions | None = None,
        *,
        target_ids: Sequence[int] | None = None,
        truncate: bool = False,
        record: Record = Record(),
    ) -> Translation:
        """Teacher-forced pass on a given translation: ``tgt_text`` (tokenized, eos appended), or ``target_ids``,
        output ids as given (a run's own, ``Translation.output_ids``: eos included if it produced one). Re-running
        a model's own output goes by its ids: its text need not tokenize back to them (byte-level BPE output of an
        untrained model may be invalid UTF-8, and comes back as other, more pieces)."""
        options = self.check_options(options, record=record)
        out_ids = self._target(tgt_text, target_ids)
        source = self._source(src_text, truncate)
        call = self._call(options, [source], record)
        return self._translations([source], call, [out_ids], forced=True)[0]

    def _target(self, tgt_text: str | None, target_ids: Sequence[int] | None) -> list[int]:
        """The output ids a teacher-forced pass feeds: exactly one of ``tgt_text`` / ``target_ids``, checked;
        InputError naming what is wrong."""
        if (tgt_text is None) == (target_ids is None):
            raise InputError("teacher_forced needs a target: either tgt_text or target_ids (not both)")
        if target_ids is None:
            assert tgt_text is not None
            return self.encode_target(tgt_text)
        return check_target(target_ids, self.config.tgt_vocab_size, min(MAX_OUTPUT_TOKENS, self.position_limit))

    @torch.inference_mode()
    def translate_batch(
        self,
        texts: Sequence[str],
        options: InferenceOptions | None = None,
        *,
        beam_size: int = 1,
        max_len: int | None = None,
        truncate: bool = False,
        record: Record = Record(),
        sampling: Sampling | None = None,
    ) -> list[Translation]:
        """Translate several texts as ONE padded batch (so padding masks are real): one ``Translation`` per text,
        in order, as ``translate`` gives it (text, source text, notices of that text), with the same keywords.
        Greedy with beam_size=1; else each text is beam-searched alone (its output is ``translate``'s) and the
        outputs are traced by one teacher-forced pass over the batch.

        Each one's trace is the batch's trace viewed at its item (``trace.select(i)`` views item i, and
        ``trace.batch_size`` is the batch's): its token lists include ``<pad>`` where that item was padded, and
        the batch may run steps after its eos (until every item has produced one). With ``sampling`` one generator
        draws for the whole batch: a text's draws depend on its batch."""
        options = self.check_options(options, beam_size=beam_size, max_len=max_len, record=record, sampling=sampling)
        if isinstance(texts, str) or not texts:
            raise InputError("translate_batch needs a list of at least one text")
        sources = [self._source(t, truncate) for t in texts]  # each cut and cleaned as translate cuts it
        how = {"max_len": max_len, "beam_size": beam_size, "sampling": sampling}
        return self._translations(sources, self._call(options, sources, record, **how))

    @torch.inference_mode()
    def encode(
        self, text: str, options: InferenceOptions | None = None, *, truncate: bool = False
    ) -> tuple[list[int], Tensor]:
        """The encoder's output for ``text``: its source ids (eos appended, as ``encode_source``) and the memory the
        decoder reads, (Ts, D) on this bundle's device. On the reference path (plain ``F.linear``): the fast path
        picks its kernel by the number of rows, and outputs compared across texts should share one arithmetic."""
        options = self.check_options(options)
        source = self._source(text, truncate)
        src, keep = self.padded([source.ids])  # (1, Ts) each
        return source.ids, self.model.encode(src, keep, Call(options))[0]


def weights_digest(model: Transformer) -> str:
    """A digest of every weight's bytes and the model's shape (16 hex digits): what disk caches key on."""
    h = hashlib.sha256(json.dumps(model.config.to_dict(), sort_keys=True).encode())
    with torch.no_grad():
        for name, tensor in sorted(model.state_dict().items()):
            h.update(name.encode())
            h.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def load(path: str | Path, device: str | torch.device | None = None) -> Bundle:
    """Load a checkpoint folder. CUDA if available, else CPU; ``device`` overrides."""
    path = Path(path)
    model, tokenizer, info = load_checkpoint(path, pick_device(device))
    return Bundle(model, tokenizer, info, path, shortlist=load_beside(path))
