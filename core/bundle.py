"""The public entry point: ``core.load(path)`` -> ``Bundle`` with ``translate`` and ``trace``."""
from __future__ import annotations

import threading
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .checkpoint import load_checkpoint
from .config import InferenceOptions, ModelConfig
from .decoding import beam_search, default_max_len, greedy
from .errors import InputError
from .model import Transformer
from .tokenizer import Tokenizer
from .trace import Recorder, Trace

MAX_CHARS = 5000
START_PIECE, PAD_PIECE = "<s>", "<pad>"


@dataclass(frozen=True)
class Step:
    """One decoding step: the token chosen at position ``index`` and what the model weighed."""

    index: int
    token: str
    token_id: int
    prob: float
    top_k: list[tuple[str, float]]
    trace: Trace = field(repr=False)
    rows: dict[tuple[str, int], np.ndarray] | None = field(default=None, repr=False)

    def attention(self, kind: str, layer: int) -> np.ndarray:
        """This step's attention rows: (heads, n_key) over the keys visible at this step.

        With the causal mask on these are rows of the trace; with it off (each step recomputed the
        prefix) they are the rows this step itself computed."""
        if self.rows is not None and (kind, layer) in self.rows:
            return self.rows[(kind, layer)]
        rows = self.trace.attention(kind, layer)[:, self.index]
        return rows[:, : self.index + 1] if kind == "decoder" else rows


@dataclass(frozen=True)
class Translation:
    """Result of ``Bundle.translate`` / ``Bundle.trace``."""

    text: str
    src_tokens: list[str]  # source pieces, eos included
    tgt_tokens: list[str]  # decoder inputs: start token, then the output pieces before the last
    output_tokens: list[str]  # what the decoder predicted at each position (eos included)
    trace: Trace
    steps: list[Step]
    options: InferenceOptions
    beam_size: int = 1
    notices: tuple[str, ...] = ()

    @property
    def truncated(self) -> bool:
        return any(n.startswith("Truncated") for n in self.notices)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "src_tokens": self.src_tokens, "tgt_tokens": self.tgt_tokens,
                "output_tokens": self.output_tokens, "options": self.options.to_dict(), "beam_size": self.beam_size,
                "notices": list(self.notices),
                "steps": [{"index": s.index, "token": s.token, "prob": s.prob, "top_k": s.top_k} for s in self.steps]}


def clean_text(text: Any) -> str:
    """NFC-normalise, turn control characters into spaces, collapse whitespace. Raises InputError if nothing is left."""
    if not isinstance(text, str):
        raise InputError(f"Expected text (a str), got {type(text).__name__}.")
    if len(text) > MAX_CHARS:
        raise InputError(f"The text is {len(text):,} characters long; the limit is {MAX_CHARS:,}. "
                         "Shorten it (or pass truncate=True to cut it).")
    text = unicodedata.normalize("NFC", text)
    text = "".join(" " if unicodedata.category(ch) in ("Cc", "Cs", "Co") else ch for ch in text)
    text = " ".join(text.split())
    if not text:
        raise InputError("The text is empty (or only spaces and control characters). Type a sentence to translate.")
    return text


class Bundle:
    """A loaded checkpoint: model, tokenizer, config. Thread-safe: calls never mutate the model."""

    def __init__(self, model: Transformer, tokenizer: Tokenizer, info: dict[str, Any], path: Path | None = None,
                 max_source_tokens: int = 256) -> None:
        self.model, self.tokenizer, self.info, self.path = model, tokenizer, info, path
        self.max_source_tokens = max_source_tokens
        self._lock = threading.Lock()  # only for lazily built caches, never around inference

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def name(self) -> str:
        return str(self.info.get("name") or (self.path.name if self.path else "model"))

    @property
    def languages(self) -> tuple[str, str]:
        return str(self.info.get("source_language", "src")), str(self.info.get("target_language", "tgt"))

    # ----------------------------------------------------------------- pieces
    def _piece(self, token_id: int, position: int | None = None) -> str:
        if position == 0:
            return START_PIECE
        return self.tokenizer.piece(token_id)

    def encode_source(self, text: str, *, truncate: bool = False) -> tuple[list[int], list[str]]:
        """Source ids (eos appended) and notices for the person. Raises InputError on unusable text."""
        notices = []
        if truncate and isinstance(text, str) and len(text) > MAX_CHARS:
            notices.append(f"Truncated: the text was {len(text):,} characters long; only the first {MAX_CHARS:,} were read.")
            text = text[:MAX_CHARS]
        text = clean_text(text)
        ids = self.tokenizer.encode(text)
        limit = self.max_source_tokens - 1
        if len(ids) > limit:
            if not truncate:
                raise InputError(f"The text is {len(ids)} tokens long; the limit is {limit}. "
                                 "Shorten it (or pass truncate=True to cut it).")
            notices.append(f"Truncated: the text was {len(ids)} tokens long; only the first {limit} were translated.")
            ids = ids[:limit]
        unknown = sum(1 for i in ids if self.tokenizer.is_unknown(i))
        if unknown:
            notices.append(f"{unknown} piece{'s' if unknown != 1 else ''} of the text "
                           f"{'are' if unknown != 1 else 'is'} unknown to this model's vocabulary (shown as <unk>).")
        if not ids:
            raise InputError("Nothing translatable is left in the text after tokenisation.")
        return ids + [self.config.eos_id], notices

    def _tensor(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        src = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, Ts)
        return src, torch.ones_like(src, dtype=torch.bool)

    def _freeze(self, recorder: Recorder, options: InferenceOptions, src_ids: list[list[int]],
                tgt_ids: list[list[int]]) -> Trace:
        cfg = self.config
        n_layers = {"encoder": cfg.n_encoder_layers, "cross": cfg.n_decoder_layers}
        if cfg.decoder_self == "attention":
            n_layers["decoder"] = cfg.n_decoder_layers
        src_tokens = [[self._piece(i) for i in row] for row in src_ids]
        tgt_tokens = [[self._piece(i, p) for p, i in enumerate(row)] for row in tgt_ids]
        return recorder.freeze(options, src_tokens, tgt_tokens, cfg.n_heads, n_layers)

    def _steps(self, trace: Trace, ids: list[int], probs: list[float], tops: list[list[tuple[int, float]]],
               rows: list[dict | None] | None = None) -> list[Step]:
        rows = rows or [None] * len(ids)
        return [Step(t, self._piece(i), int(i), float(p), [(self._piece(j), float(q)) for j, q in top], trace, r)
                for t, (i, p, top, r) in enumerate(zip(ids, probs, tops, rows))]

    # ----------------------------------------------------------------- API
    @torch.inference_mode()
    def translate(self, text: str, options: InferenceOptions | None = None, beam_size: int = 1,
                  max_len: int | None = None, *, top_k: int = 10, truncate: bool = False,
                  record_qkv: bool = True) -> Translation:
        """Translate ``text`` and record every head. Greedy with beam_size=1, else beam search
        (the beam's best output is then traced teacher-forced, which gives the same arrays)."""
        options = options or InferenceOptions()
        if not isinstance(beam_size, int) or beam_size < 1:
            raise InputError(f"beam_size must be a positive integer, got {beam_size!r}")
        src_ids, notices = self.encode_source(text, truncate=truncate)
        src, keep = self._tensor(src_ids)
        max_len = max_len or default_max_len(len(src_ids))
        if beam_size > 1:
            out_ids = beam_search(self.model, src, keep, options, max_len, beam_size=beam_size)
            result = self._teacher_forced(src_ids, out_ids, options, top_k, record_qkv)
            return Translation(**{**result.__dict__, "beam_size": beam_size, "notices": tuple(notices)})
        recorder = Recorder(qkv=record_qkv)
        result = greedy(self.model, src, keep, options, max_len, recorder=recorder, top_k=top_k)
        n = result.lengths[0]
        out_ids = result.tokens[0, 1: 1 + n].tolist()
        dec_inputs = result.tokens[0, : n].tolist()
        trace = self._freeze(recorder, options, [src_ids], [result.tokens[0, : len(result.steps)].tolist()])
        tops = [list(zip(s.top_ids[0].tolist(), s.top_probs[0].tolist())) for s in result.steps[:n]]
        probs = [float(s.probs[0]) for s in result.steps[:n]]
        rows = [None if s.rows is None else {k: v[0].to("cpu").numpy() for k, v in s.rows.items()}
                for s in result.steps[:n]]
        text_out = self.tokenizer.decode([i for i in out_ids if i != self.config.eos_id])
        return Translation(text_out, [self._piece(i) for i in src_ids], [self._piece(i, p) for p, i in enumerate(dec_inputs)],
                           [self._piece(i) for i in out_ids], trace, self._steps(trace, out_ids, probs, tops, rows), options,
                           1, tuple(notices))

    @torch.inference_mode()
    def _teacher_forced(self, src_ids: list[int], out_ids: list[int], options: InferenceOptions, top_k: int,
                        record_qkv: bool) -> Translation:
        cfg = self.config
        src, keep = self._tensor(src_ids)
        dec_inputs = [cfg.bos_id] + out_ids[:-1] if out_ids else [cfg.bos_id]
        tgt = torch.tensor([dec_inputs], dtype=torch.long, device=self.device)  # (1, Tt)
        recorder = Recorder(qkv=record_qkv)
        logits = self.model(src, tgt, options, recorder, keep)  # (1, Tt, V)
        probs = torch.softmax(logits[0].float(), dim=-1)  # (Tt, V)
        top_p, top_i = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
        trace = self._freeze(recorder, options, [src_ids], [dec_inputs])
        targets = out_ids if out_ids else [cfg.eos_id]
        chosen = [float(probs[t, i]) for t, i in enumerate(targets)]
        tops = [list(zip(top_i[t].tolist(), top_p[t].tolist())) for t in range(len(targets))]
        text_out = self.tokenizer.decode([i for i in out_ids if i != cfg.eos_id])
        return Translation(text_out, [self._piece(i) for i in src_ids], [self._piece(i, p) for p, i in enumerate(dec_inputs)],
                           [self._piece(i) for i in targets], trace, self._steps(trace, targets, chosen, tops), options)

    @torch.inference_mode()
    def trace(self, src_text: str, tgt_text: str, options: InferenceOptions | None = None, *, top_k: int = 10,
              truncate: bool = False, record_qkv: bool = True) -> Translation:
        """Teacher-forced pass on a given translation ``tgt_text`` (eos appended)."""
        options = options or InferenceOptions()
        src_ids, notices = self.encode_source(src_text, truncate=truncate)
        tgt_ids = self.tokenizer.encode(clean_text(tgt_text))[: self.max_source_tokens] + [self.config.eos_id]
        result = self._teacher_forced(src_ids, tgt_ids, options, top_k, record_qkv)
        return Translation(**{**result.__dict__, "notices": tuple(notices)})

    @torch.inference_mode()
    def translate_batch(self, texts: list[str], options: InferenceOptions | None = None, max_len: int | None = None,
                        *, truncate: bool = False, record_qkv: bool = False) -> tuple[list[str], Trace]:
        """Greedy-translate several texts as ONE padded batch (so padding masks are real).

        Returns the translations and the batched Trace (``trace.select(i)`` views item i; its
        token lists include ``<pad>`` where the item was padded).
        """
        options = options or InferenceOptions()
        if not texts:
            raise InputError("translate_batch needs at least one text")
        encoded = [self.encode_source(t, truncate=truncate)[0] for t in texts]
        width = max(len(e) for e in encoded)
        pad = self.config.pad_id
        src = torch.tensor([e + [pad] * (width - len(e)) for e in encoded], dtype=torch.long, device=self.device)
        keep = torch.tensor([[True] * len(e) + [False] * (width - len(e)) for e in encoded], device=self.device)
        recorder = Recorder(qkv=record_qkv)
        result = greedy(self.model, src, keep, options, max_len or default_max_len(width), recorder=recorder)
        outs = []
        for b, n in enumerate(result.lengths):
            ids = [i for i in result.tokens[b, 1: 1 + n].tolist() if i != self.config.eos_id]
            outs.append(self.tokenizer.decode(ids))
        trace = self._freeze(recorder, options, [e + [pad] * (width - len(e)) for e in encoded],
                             result.tokens[:, : len(result.steps)].tolist())
        src_tokens = [[self._piece(i) for i in e] + [PAD_PIECE] * (width - len(e)) for e in encoded]
        return outs, Trace(**{**trace.__dict__, "src_tokens": src_tokens})


def pick_device(device: str | torch.device | None = None) -> torch.device:
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load(path: str | Path, device: str | torch.device | None = None) -> Bundle:
    """Load a checkpoint folder. CUDA if available, else CPU; ``device`` overrides."""
    path = Path(path)
    model, tokenizer, info = load_checkpoint(path, pick_device(device))
    return Bundle(model, tokenizer, info, path)
