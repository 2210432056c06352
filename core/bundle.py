"""The public entry point: ``core.load(path)`` -> ``Bundle`` with ``translate`` and ``trace``."""

from __future__ import annotations

import functools
import hashlib
import json
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from .call import Call
from .checkpoint import load_checkpoint
from .config import InferenceOptions, ModelConfig, Record
from .decoding import (
    BeamStep,
    apply_bans,
    beam_search,
    greedy,
    max_steps,
    output_text,
    padded,
    suppress,
    vocab_ids,
)
from .errors import CheckpointError, InputError
from .fast import FastWeights
from .generation_rules import bans_on, columns_of, penalise, rules_in_force
from .model import Transformer
from .recorder import Recorder
from .shortlist import Shortlist, as_vocab, load_beside
from .sites import AttentionKind
from .tokenizer import Tokenizer
from .trace import ModelShape, Trace

MAX_CHARS = 5000
MAX_BEAM = 16  # beams; more only multiplies the time
MAX_OUTPUT_TOKENS = 1024


@dataclass(frozen=True)
class Step:
    """One decoding step: the token chosen at position ``index`` and what the model weighed (a view on the Trace)."""

    index: int
    token: str
    token_id: int
    prob: float
    top_k: list[tuple[str, float]]
    trace: Trace = field(repr=False)

    def attention(self, kind: AttentionKind, layer: int) -> np.ndarray:
        """This step's attention rows: (heads, n_key) over the keys visible at this step.

        With the causal mask on these are rows of the trace; with it off (each step recomputed the
        prefix) they are the rows this step itself computed (the trace's ``step_rows``)."""
        rows = self.trace.step_rows(kind, layer)
        if rows is None:
            rows = self.trace.attention(kind, layer)[:, self.index]
        else:
            rows = rows[:, self.index]
        return rows[:, : self.index + 1] if kind == "decoder" else rows


@dataclass(frozen=True)
class Translation:
    """Result of ``Bundle.translate`` / ``Bundle.trace``: a view on its Trace, which holds everything
    (``Translation(core.Trace.load(path))`` gives it back from a saved trace, without the model)."""

    trace: Trace

    @property
    def text(self) -> str:
        return str(self.trace.meta.get("text", ""))

    @property
    def source_text(self) -> str:
        return str(self.trace.meta.get("source_text", ""))

    @property
    def options(self) -> InferenceOptions:
        return self.trace.options

    @property
    def beam_size(self) -> int:
        return int(self.trace.meta.get("beam_size", 1))

    @property
    def notices(self) -> tuple[str, ...]:
        return tuple(self.trace.meta.get("notices", ()))

    @property
    def src_tokens(self) -> list[str]:
        """Source pieces, eos included."""
        return self.trace.src_tokens

    @property
    def tgt_tokens(self) -> list[str]:
        """Decoder inputs: start token, then the output pieces before the last."""
        return self.trace.tgt_tokens

    @property
    def output_tokens(self) -> list[str]:
        """What the decoder predicted at each position (eos included)."""
        return self.trace.output_tokens

    @property
    def output_ids(self) -> tuple[int, ...]:
        """The output ids the run produced (eos included if produced): what ``Bundle.teacher_forced(...,
        target_ids=...)`` feeds to re-run this output exactly (its text need not re-tokenize to them)."""
        return tuple(int(i) for i in self.trace["output.ids"]) if "output.ids" in self.trace else ()

    @functools.cached_property
    def steps(self) -> list[Step]:
        """One ``Step`` per output position, made once per Translation (pages index it per step: the Steps page's
        slider labels every step, which rebuilt them all for each label, quadratic in the output's length)."""
        t = self.trace
        if "output.ids" not in t:
            return []
        ids, probs, top_ids, top_probs = t["output.ids"], t["output.probs"], t["output.top_ids"], t["output.top_probs"]
        return [
            Step(
                i,
                t.piece(ids[i]),
                int(ids[i]),
                float(probs[i]),
                [(t.piece(j), float(q)) for j, q in zip(top_ids[i], top_probs[i], strict=True)],
                t,
            )
            for i in range(len(ids))
        ]

    @property
    def truncated(self) -> bool:
        return any(n.startswith("Truncated") for n in self.notices)

    @property
    def forced_prefix(self) -> int:
        """How many first output pieces were forced (``Bundle.translate_from``); 0 for a free translation."""
        return int(self.trace.meta.get("forced_prefix", 0))

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "src_tokens": self.src_tokens,
            "tgt_tokens": self.tgt_tokens,
            "output_tokens": self.output_tokens,
            "options": self.options.to_dict(),
            "beam_size": self.beam_size,
            "notices": list(self.notices),
            "steps": [{"index": s.index, "token": s.token, "prob": s.prob, "top_k": s.top_k} for s in self.steps],
        }


@dataclass(frozen=True)
class BeamTree:
    """Every hypothesis beam search weighed for one sentence (``Bundle.beam_tree``), step by step.

    ``steps[t]`` is the ``BeamStep`` of output position t. ``output_ids`` is what ``beam_search`` returned (eos
    included if produced), ``greedy_ids`` the greedy translation's ids, for comparison."""

    steps: tuple[BeamStep, ...]
    output_ids: tuple[int, ...]
    greedy_ids: tuple[int, ...]
    src_tokens: tuple[str, ...]
    vocab: Mapping[int, str] = field(repr=False)
    beam_size: int
    alpha: float
    options: InferenceOptions
    eos_id: int
    meta: Mapping[str, Any] = field(default_factory=dict)  # source_text, text, greedy_text, model

    def piece(self, token_id: int) -> str:
        return self.vocab.get(int(token_id), f"<{int(token_id)}>")

    @property
    def winner_path(self) -> tuple[int, ...]:
        """For each output position, the index of the winner's candidate in that step's candidates."""
        out = list(self.output_ids)
        if not out:
            return ()
        last = self.steps[len(out) - 1]
        matches = [j for j in range(last.n_kept) if last.path(j) == out]
        if not matches:
            raise ValueError("the winner is not among the recorded hypotheses")
        path = [matches[0]]
        for t in range(len(out) - 1, 0, -1):
            row = int(self.steps[t].candidate_parents[path[-1]])
            path.append(self.steps[t - 1].alive[row])
        return tuple(reversed(path))

    @property
    def divergence(self) -> int | None:
        """The first output position where greedy decoding chose another piece than the winning beam (it chose
        the same ones before); None when both give the same output."""
        a, b = self.output_ids, self.greedy_ids
        for t in range(max(len(a), len(b))):
            if t >= len(a) or t >= len(b) or a[t] != b[t]:
                return t
        return None

    def parent_candidate(self, step: int, candidate: int) -> int | None:
        """The candidate of step ``step - 1`` that candidate ``candidate`` of ``step`` extends (None at step 0)."""
        if step == 0:
            return None
        return self.steps[step - 1].alive[int(self.steps[step].candidate_parents[candidate])]


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
        self._check_rows(ids, self.config.tgt_vocab_size)
        return ids + [self.config.eos_id]

    def _check_rows(self, ids: Sequence[int], rows: int) -> None:
        """InputError when a text gave an id the model has no embedding row for: an added token of the tokenizer
        typed in it (a model may have fewer rows than its tokenizer has ids, as transformers allows)."""
        rowless = [i for i in ids if i >= rows]
        if rowless:
            raise InputError(
                f"The text contains {self.tokenizer.piece(rowless[0])!r}, a token of this tokenizer (id {rowless[0]}) "
                f"that the model has no embedding for (it has {rows:,} rows); remove it."
            )

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
        self._check_rows(ids, self.config.src_vocab_size)
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
    ) -> InferenceOptions:
        """The options for a call, checked against this model; InputError naming what is wrong (``record`` checks
        its own fields: this checks that it is one)."""

        def whole(name: str, value: Any, low: int, high: int) -> None:
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise InputError(f"{name} must be a whole number from {low} to {high}, got {value!r}")

        whole("beam_size", beam_size, 1, MAX_BEAM)
        if not isinstance(record, Record):
            raise InputError(f"record must be core.Record, got {type(record).__name__}")
        if max_len is not None:
            whole("max_len", max_len, 1, min(MAX_OUTPUT_TOKENS, self.position_limit))
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
        """The trace's note of the generation rules the decoding ran with (``core.generation_rules``), when any is
        on: ``meta['generation_rules']``, e.g. {'min_length': 56, 'eos_banned_steps': 55, ...}."""
        rules = rules_in_force(self.config)
        return {"generation_rules": rules} if rules else {}

    def _limit(self, call: Call) -> dict[str, Any]:
        """The trace's note of the output steps the call allowed (``meta['max_len']``), when it decoded: the step
        a forced eos falls on (``core.generation_rules.forced_id``)."""
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
        self, sources: Sequence[Source], call: Call, given: Sequence[Sequence[int]] | None = None, **meta: Any
    ) -> list[Translation]:
        """The one run path behind ``translate``, ``translate_from``, ``teacher_forced``, ``record_more`` and
        ``translate_batch``: the sources as one padded batch; the output ids ``given`` (a row per source), else beam
        search's (``call.beam_size`` > 1; each source searched alone, as ``translate`` searches it), recorded by
        one teacher-forced pass, else greedy decoding's, recorded as decoded; one Translation per source, its item
        of the frozen trace, with its text (eos stripped), source text and notices, and ``meta``."""
        assert call.recorder is not None
        src, keep = self.padded([source.ids for source in sources])  # (B, Ts) each
        if given is None and call.beam_size > 1:
            given = [beam_search(self.model, *self.padded([source.ids]), call) for source in sources]
        if given is not None:
            rows = [list(ids) for ids in given]
            self._forced(src, keep, rows, call)
        else:
            result = greedy(self.model, src, keep, call)
            rows = [result.tokens[b, 1 : 1 + n].tolist() for b, n in enumerate(result.lengths)]
        texts = [self._text(ids) for ids in rows]
        batch = {"texts": [s.text for s in sources], "outputs": texts} if len(sources) > 1 else {}
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

    def _forced(self, src: Tensor, keep: Tensor, rows: Sequence[Sequence[int]], call: Call) -> None:
        """A teacher-forced pass over the output ids ``rows`` (one row per source of ``src`` (B, Ts)), recorded by
        ``call``'s recorder, each position's output as a decoding step records it (with the ids the model's
        generation rules ban after that position's inputs, ``apply_bans``). A row shorter than the longest goes on
        with eos, as a greedy batch's finished item does (an empty row is eos)."""
        cfg, recorder, vocab = self.config, call.recorder, call.vocab
        assert recorder is not None
        width = max(1, *(len(row) for row in rows))
        outputs = [[*row, *[cfg.eos_id] * (width - len(row))] for row in rows]
        ids = torch.tensor(outputs, dtype=torch.long, device=self.device)  # (B, Tt)
        tgt = torch.tensor([[cfg.bos_id, *row[:-1]] for row in outputs], dtype=torch.long, device=self.device)
        logits = self.model(src, tgt, call, src_keep=keep).float()  # (B, Tt, V|S)
        if cfg.repetition_penalty == 1.0:
            probs = torch.softmax(logits, dim=-1)
        else:  # each position penalised as its decoding step was: greedy's logits, beam search's log-probabilities
            beam = call.beam_size > 1
            scores = torch.log_softmax(logits, dim=-1) if beam else logits
            for t in range(ids.shape[1]):
                scores[:, t] = penalise(cfg, scores[:, t], tgt[:, : t + 1], vocab)
            probs = scores.exp() if beam else torch.softmax(scores, dim=-1)
        probs = suppress(probs, cfg, 0.0, vocab)  # (B, Tt, V|S)
        if bans_on(cfg):  # each position's bans, as its decoding step had them
            for t in range(ids.shape[1]):
                probs[:, t] = apply_bans(probs[:, t], cfg, tgt[:, : t + 1], 0.0, vocab, src)
        top_p, top_i = probs.topk(min(call.top_k, probs.shape[-1]), dim=-1)  # (B, Tt, k)
        columns, listed = columns_of(ids, vocab)
        chosen = probs.gather(-1, columns[..., None])[..., 0] * listed  # (B, Tt); 0 outside the shortlist
        top_i = vocab_ids(top_i, vocab)
        for t in range(ids.shape[1]):
            recorder.output(ids[:, t], chosen[:, t], top_i[:, t], top_p[:, t])

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
    ) -> Translation:
        """Translate ``text`` and record every head (and what ``record`` asks for besides). Greedy with
        beam_size=1, else beam search (the beam's best output is then traced teacher-forced, which gives the same
        arrays)."""
        options = self.check_options(options, beam_size=beam_size, max_len=max_len, record=record)
        return self._decode(self._source(text, truncate), options, record, beam_size=beam_size, max_len=max_len)

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
    ) -> Translation:
        """``translate`` and ``translate_from`` on one checked source: its output decoded and recorded."""
        max_len = max_steps(self.config, max_len, len(source.ids))  # within a learned position table
        forced = self._check_prefix(prefix, max_len)
        how = {"max_len": max_len, "beam_size": beam_size, "prefix": tuple(forced)}
        call = self._call(options, [source], record, **how)
        return self._run([source], call, None, **({"forced_prefix": len(forced)} if forced else {}))[0]

    def _check_prefix(self, prefix: Sequence[int] | None, max_len: int) -> list[int]:
        """``prefix`` as a list of target ids, checked; InputError naming what is wrong."""
        if prefix is None:
            return []
        if isinstance(prefix, (str, bytes)) or not isinstance(prefix, Sequence):
            raise InputError(f"prefix must be a list of target token ids, got {type(prefix).__name__}")
        cfg = self.config
        ids = list(prefix)
        for i in ids:
            if not isinstance(i, (int, np.integer)) or isinstance(i, bool) or not 0 <= int(i) < cfg.tgt_vocab_size:
                raise InputError(f"prefix ids must be whole numbers from 0 to {cfg.tgt_vocab_size - 1}, got {i!r}")
            if int(i) in cfg.suppress_ids:
                raise InputError(f"prefix id {int(i)} is a piece this model never produces")
        if cfg.eos_id in ids[:-1]:
            raise InputError("the end of the sentence (eos) can only be the last id of a prefix")
        if ids and cfg.forced_bos_id is not None and int(ids[0]) != cfg.forced_bos_id:
            raise InputError(
                f"this model's first output is always id {cfg.forced_bos_id} "
                f"({self.tokenizer.piece(cfg.forced_bos_id)}, the target language): a prefix starts with it"
            )
        if len(ids) > max_len:
            raise InputError(f"the prefix has {len(ids)} ids, more than max_len={max_len}")
        return [int(i) for i in ids]

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
        src, keep = self.padded([source.ids])
        how = {"max_len": max_steps(self.config, max_len, len(source.ids)), "beam_size": beam_size, "alpha": alpha}
        call = self._call(options, [source], None, **how)
        history: list[BeamStep] = []
        out_ids = beam_search(self.model, src, keep, call, history)
        result = greedy(self.model, src, keep, call)
        greedy_ids = result.tokens[0, 1 : 1 + result.lengths[0]].tolist()
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
                "beam": self.config.beam,  # how hypotheses finish (core.beam_finish), for the page's words
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
        src_ids = [int(i) for i in out.trace["ids.src"]]
        out_ids = [int(i) for i in out.trace["output.ids"]]
        self.check_options(out.options, record=record)
        record = replace(record, top_k=int(out.trace["output.top_ids"].shape[-1]))
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
        return self._run([source], call, [out_ids], **extra)[0]

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
        return self._run([source], call, [out_ids], forced=True)[0]

    def _target(self, tgt_text: str | None, target_ids: Sequence[int] | None) -> list[int]:
        """The output ids a teacher-forced pass feeds: exactly one of ``tgt_text`` / ``target_ids``, checked;
        InputError naming what is wrong."""
        if (tgt_text is None) == (target_ids is None):
            raise InputError("teacher_forced needs a target: either tgt_text or target_ids (not both)")
        if target_ids is None:
            assert tgt_text is not None
            return self.encode_target(tgt_text)
        if isinstance(target_ids, (str, bytes)) or not isinstance(target_ids, Sequence):
            raise InputError(f"target_ids must be a list of target token ids, got {type(target_ids).__name__}")
        cfg, ids = self.config, list(target_ids)
        if not ids:
            raise InputError("target_ids is empty: give at least one output id (eos for an empty output)")
        for i in ids:
            if not isinstance(i, (int, np.integer)) or isinstance(i, bool) or not 0 <= int(i) < cfg.tgt_vocab_size:
                raise InputError(f"target ids must be whole numbers from 0 to {cfg.tgt_vocab_size - 1}, got {i!r}")
        limit = min(MAX_OUTPUT_TOKENS, self.position_limit)
        if len(ids) > limit:
            raise InputError(f"target_ids has {len(ids)} ids; this model reads at most {limit} output positions")
        return [int(i) for i in ids]

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
    ) -> list[Translation]:
        """Translate several texts as ONE padded batch (so padding masks are real): one ``Translation`` per text,
        in order, as ``translate`` gives it (text, source text, notices of that text), with the same keywords.
        Greedy with beam_size=1; else each text is beam-searched alone (its output is ``translate``'s) and the
        outputs are traced by one teacher-forced pass over the batch.

        Each one's trace is the batch's trace viewed at its item (``trace.select(i)`` views item i, and
        ``trace.batch_size`` is the batch's): its token lists include ``<pad>`` where that item was padded, and
        the batch may run steps after its eos (until every item has produced one)."""
        options = self.check_options(options, beam_size=beam_size, max_len=max_len, record=record)
        if isinstance(texts, str) or not texts:
            raise InputError("translate_batch needs a list of at least one text")
        sources = [self._source(t, truncate) for t in texts]  # each cut and cleaned as translate cuts it
        how = {"max_len": max_len, "beam_size": beam_size}
        return self._run(sources, self._call(options, sources, record, **how))


class Source(NamedTuple):
    """One source text as a call reads it: its ids (eos appended), the notices for the person, the cleaned text."""

    ids: list[int]
    notices: tuple[str, ...]
    text: str


def weights_digest(model: Transformer) -> str:
    """A digest of every weight's bytes and the model's shape (16 hex digits): what disk caches key on."""
    h = hashlib.sha256(json.dumps(model.config.to_dict(), sort_keys=True).encode())
    with torch.no_grad():
        for name, tensor in sorted(model.state_dict().items()):
            h.update(name.encode())
            h.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


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


def load(path: str | Path, device: str | torch.device | None = None) -> Bundle:
    """Load a checkpoint folder. CUDA if available, else CPU; ``device`` overrides."""
    path = Path(path)
    model, tokenizer, info = load_checkpoint(path, pick_device(device))
    return Bundle(model, tokenizer, info, path, shortlist=load_beside(path))
