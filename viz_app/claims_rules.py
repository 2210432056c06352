"""Sentences about the generation rules an imported model's folder sets (``core.decoding.generation_rules``: min_length,
no_repeat_ngram_size, encoder_no_repeat_ngram_size, repetition_penalty, forced_eos_token_id), each computed from
what the trace says: which rules held (``meta['generation_rules']``), the step limit of the call (``meta['max_len']``)
and the ids it wrote.

One function per claim, a test for each branch (tests/viz_app/test_claims_rules.py). Pure: no Streamlit, no
model. Pieces are quoted through ``claims.quote`` (Markdown-literal), after the caller's ``name`` (id -> shown
piece). A model with no rules (every checkpoint trained here) gets no sentence at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import core
from core.decoding.generation_rules import is_penalty, repeating_ids
from core.sites import ids_site, output_site
from viz_app.claims import first_upper, quote

Name = Callable[[int], str]  # a target id as the page shows its piece
LISTED = 5  # at most this many banned pieces are named in one sentence


@dataclass(frozen=True)
class Rules:
    """The rules a run decoded with (off: 0 / None), as ``core.decoding.generation_rules.rules_in_force`` wrote them."""

    min_length: int = 0
    eos_banned_steps: int = 0  # eos was banned at output steps 0 .. eos_banned_steps - 1
    no_repeat_ngram_size: int = 0
    forced_eos_id: int | None = None
    encoder_no_repeat_ngram_size: int = 0
    repetition_penalty: float = 1.0

    @property
    def on(self) -> bool:
        return bool(
            self.eos_banned_steps
            or self.no_repeat_ngram_size
            or self.forced_eos_id is not None
            or self.encoder_no_repeat_ngram_size
            or self.repetition_penalty != 1.0
        )


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def rules_of(meta: Mapping[str, Any]) -> Rules:
    """The rules a trace's (or beam tree's) meta says held; each one off where the meta does not name it as a
    whole number (no rules, or an edited file)."""
    held = meta.get("generation_rules")
    if not isinstance(held, Mapping):
        return Rules()
    return Rules(
        min_length=_whole(held.get("min_length")) or 0,
        eos_banned_steps=_whole(held.get("eos_banned_steps")) or 0,
        no_repeat_ngram_size=_whole(held.get("no_repeat_ngram_size")) or 0,
        forced_eos_id=_whole(held.get("forced_eos_id")),
        encoder_no_repeat_ngram_size=_whole(held.get("encoder_no_repeat_ngram_size")) or 0,
        repetition_penalty=_penalty(held.get("repetition_penalty")),
    )


def _penalty(value: Any) -> float:
    return float(value) if is_penalty(value) else 1.0


def step_limit(meta: Mapping[str, Any]) -> int | None:
    """How many output steps the call allowed (``meta['max_len']``), when the trace says (it decoded)."""
    limit = _whole(meta.get("max_len"))
    return limit or None


# ---- the rules in force, said once above the steps ----


def min_length_rule(rules: Rules) -> str | None:
    if not rules.eos_banned_steps:
        return None
    return (
        f"the end of sentence was not allowed before step {rules.eos_banned_steps + 1} (min_length {rules.min_length})"
    )


def ngram_rule(rules: Rules, *, of_source: bool = False) -> str | None:
    """no_repeat_ngram_size's sentence, or encoder_no_repeat_ngram_size's (``of_source``: n-grams of the source)."""
    n = rules.encoder_no_repeat_ngram_size if of_source else rules.no_repeat_ngram_size
    if not n:
        return None
    if of_source:
        what = "no piece of the source is written" if n == 1 else f"no {n} pieces in a row of the source are written"
        return f"{what} (encoder_no_repeat_ngram_size {n})"
    what = "no piece is written twice" if n == 1 else f"no sequence of {n} pieces is written twice"
    return f"{what} (no_repeat_ngram_size {n})"


def repetition_rule(rules: Rules) -> str | None:
    p = rules.repetition_penalty
    if p == 1.0:
        return None
    how = f"divided by {p:g} where positive, multiplied where negative"
    what = "less" if p > 1 else "more"
    return (
        f"a piece already among the decoder's inputs (the start token and the pieces written) is made {what} "
        f"likely (repetition_penalty {p:g}: its score {how}; the probabilities shown are those after it)"
    )


def forced_eos_rule(rules: Rules, max_len: int | None) -> str | None:
    if rules.forced_eos_id is None:
        return None
    where = "" if max_len is None else f", step {max_len} here"
    return f"the last step a call allows ends the sentence (forced_eos_token_id{where})"


def rules_in_force(rules: Rules, max_len: int | None) -> str | None:
    """'Generation rules from the model's folder: ...; ...; ....' naming each rule that held; None when none did."""
    said = (
        min_length_rule(rules),
        ngram_rule(rules),
        ngram_rule(rules, of_source=True),
        repetition_rule(rules),
        forced_eos_rule(rules, max_len),
    )
    parts = [part for part in said if part]
    if not parts:
        return None
    return "Generation rules from the model's folder (applied as transformers' generate applies them): " + (
        "; ".join(parts) + "."
    )


def rules_in_force_of(meta: Mapping[str, Any]) -> str | None:
    """``rules_in_force`` for a trace's (or beam tree's) meta: its rules and its step limit."""
    return rules_in_force(rules_of(meta), step_limit(meta))


# ---- what a rule did at one step ----


def eos_banned(rules: Rules, step: int) -> str | None:
    """Said at a step (0-based) where min_length banned the end of sentence."""
    if step >= rules.eos_banned_steps:
        return None
    kept = "the model's own" if rules.repetition_penalty == 1.0 else "those the repetition penalty left"
    return (
        f"The end of sentence was not allowed at this step (min_length {rules.min_length}: allowed from step "
        f"{rules.eos_banned_steps + 1} on); its probability here is set to 0, the other pieces keep "
        f"{kept} (so the candidates add up to less than 100%)."
    )


def ngram_banned(rules: Rules, inputs: Sequence[int], name: Name) -> str | None:
    """Said at a step where no_repeat_ngram_size banned pieces: which, and the sequence each would repeat.
    inputs: the step's decoder inputs (start token first)."""
    n = rules.no_repeat_ngram_size
    banned = repeating_ids(inputs, n) if n else []
    if not banned:
        return None
    listed = ", ".join(quote(name(i)) for i in banned[:LISTED])
    more = f" and {len(banned) - LISTED} more" if len(banned) > LISTED else ""
    tail = [int(i) for i in inputs[len(inputs) + 1 - n :]] if n > 1 else []
    if len(banned) == 1:
        seq = " ".join(quote(name(i)) for i in [*tail, banned[0]])
        why = f"{seq} is already written" if n > 1 else "it is already written"
        return f"{listed} was not allowed at this step: {why} (no_repeat_ngram_size {n}); its probability is set to 0."
    after = f"after {' '.join(quote(name(i)) for i in tail)} " if tail else ""
    what = f"a sequence of {n} pieces" if n > 1 else "a piece"
    return (
        f"{listed}{more} were not allowed at this step: {after}each would repeat {what} already written "
        f"(no_repeat_ngram_size {n}); their probabilities are set to 0."
    )


def eos_forced(
    rules: Rules, step: int, max_len: int | None, chosen: int, own_first: int | None, name: Name
) -> str | None:
    """Said at the step where forced_eos_token_id ended the sentence: the call's last (0-based ``step`` + 1 ==
    ``max_len``) with eos written; with the model's own first choice there (``own_first``, after the bans) when
    known."""
    if rules.forced_eos_id is None or max_len is None or step + 1 != max_len or chosen != rules.forced_eos_id:
        return None
    said = (
        f"The end of sentence was forced at this step, the last of the {max_len} the call allows (forced_eos_token_id)"
    )
    if own_first is None:
        return said + "."
    if own_first == chosen:
        return said + "; the model's own first choice was the end of sentence too."
    return said + f"; the model's own first choice was {quote(name(own_first))}."


def step_notes(trace: core.Trace, step: int, name: Name) -> list[str]:
    """Every rule's sentence for output step ``step`` (0-based) of a translation's trace; [] where none acted."""
    rules = rules_of(trace.meta)
    chosen, inputs_site, top_site = output_site("ids"), ids_site("tgt"), output_site("top_ids")
    if not rules.on or chosen not in trace or not 0 <= step < len(trace[chosen]):
        return []
    inputs = [int(i) for i in trace[inputs_site][: step + 1]] if inputs_site in trace else []
    top = trace[top_site][step] if top_site in trace else None
    said = (
        eos_banned(rules, step),
        ngram_banned(rules, inputs, name),
        eos_forced(
            rules,
            step,
            step_limit(trace.meta),
            int(trace[chosen][step]),
            int(top[0]) if top is not None and len(top) else None,
            name,
        ),
    )
    return [first_upper(s) for s in said if s]


def tree_notes(rules: Rules, step: int, max_len: int | None, chosen: int) -> list[str]:
    """The rules' sentences at step ``step`` (0-based) of the beam tree, for a candidate that writes ``chosen``:
    those that act on every hypothesis alike (eos banned, eos forced at the last step)."""
    said = (eos_banned(rules, step), eos_forced(rules, step, max_len, chosen, None, str))
    return [s for s in said if s]
