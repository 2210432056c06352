"""Sentences the "Why this word?" page states about an outcome, each computed from the run it describes.

One function per claim, a test for each branch (tests/viz_app/test_claims_explain.py). Pure: no Streamlit, no
model. Pieces are quoted through ``claims.quote`` (Markdown-literal).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from core.analysis.attribution import Attribution
from core.analysis.rollout import Concentration
from viz_app.claims import bare, counted, md, quote

IG_TOLERANCE = 0.05  # attributions that miss f(input) - f(baseline) by more than this share are not to be trusted
TINY_DIFFERENCE = 0.05  # nats: removing the tokens changes log p by less than this — next to nothing to share out
CERTAIN = 0.999  # p at or above this: the model was certain (log p prints as -0.00…)
SAME_SHARE = 1e-9


# ---- attention rollout ----


def sink_note(c: Concentration, src_tokens: Sequence[str]) -> str | None:
    """Said when special tokens hold at least ``SINK_SHARE`` of the average output row (``Concentration``)."""
    if not c.sink_dominated:
        return None
    names = ", ".join(quote(src_tokens[j]) for j in c.special)
    verb = "holds" if len(c.special) == 1 else "hold"
    if c.top_column in c.special:
        largest = "more than any word" if len(c.special) == 1 else f"{quote(src_tokens[c.top_column])} most of all"
        where = f"{c.special_share:.0%} of each output row on average, {largest}"
    else:
        where = f"{c.special_share:.0%} of each output row on average"
    return (
        f"An attention sink dominates this rollout: {names} {verb} {where}. Heads with nothing to do park their "
        "attention on such tokens, so rollout counts them although they carry no word. The switch below sets "
        "them aside, to show how the rest splits over the words."
    )


def rows_note(c: Concentration) -> str:
    """How alike the drawn rows are (mean total-variation distance of a row from the average row)."""
    if c.rows_alike:
        return (
            f"The rows are nearly alike: a row differs from the average row by {c.row_spread:.0%} of its mass on "
            "average, so rollout says almost the same thing for every output word here — it shows the sentence's "
            "routing more than why one word was chosen (compare *Attribution* for one word)."
        )
    return f"The rows differ: a row differs from the average row by {c.row_spread:.0%} of its mass on average."


def source_share_note(shares: np.ndarray) -> str:
    """Each output position's share of content from the source (the rest from the words already written)."""
    lo, hi = float(shares.min()), float(shares.max())
    if hi - lo <= SAME_SHARE:
        return (
            f"Every output position draws the same share, {lo:.2f}, of its content from the source (the rest from "
            "the words already written); the map splits that share over the source tokens."
        )
    return (
        f"Output positions draw {lo:.2f}–{hi:.2f} of their content from the source (the rest from the words "
        "already written); the map splits each position's share over the source tokens."
    )


def colour_note(zmin: float, zmax: float, set_aside: Sequence[str]) -> str:
    """The colour range actually drawn (read from the figure) and what the columns are."""
    columns = (
        f"{', '.join(quote(t) for t in set_aside)} set aside, each row renormalised over the other tokens"
        if set_aside
        else "every source token"
    )
    return (
        f"Colours run from {zmin:.3f} (lightest) to {zmax:.3f} (darkest), the smallest and largest share drawn "
        f"({columns})."
    )


# ---- attribution ----


def logp_text(logprob: float) -> str:
    """log p and p, with enough digits that a near-certain word does not read as 'log p = −0.0000'."""
    p = math.exp(logprob)
    if logprob > -1e-3:
        return f"log p = {logprob:.1e} (p = {p:.6f})"
    return f"log p = {logprob:.4f} (p = {p:.4f})"


def certainty_note(a: Attribution) -> str | None:
    """Said when the model was certain of the word: what integrated gradients then share out."""
    p = math.exp(a.logprob)
    if p < CERTAIN:
        return None
    diff = a.difference
    shared = (
        f"what the bars share out is the change from the baseline, f(input) − f(baseline) = {diff:+.4f}"
        if diff is not None
        else "what the bars share out is the change from the baseline, not log p itself"
    )
    return f"The model was certain of this word (p = {p:.6f}, so log p is almost 0): {shared}."


def ig_sum_line(a: Attribution) -> str:
    """What the delta is, with the numbers of this run."""
    total = float(a.source_ig.sum() + a.target_ig.sum())
    if a.difference is None or a.f_baseline is None:
        return (
            f"The attributions add up to {total:+.4f}; they should add up to f(input) − f(baseline), and the "
            f"convergence delta {a.ig_delta:+.4f} is how far they miss ({a.ig_steps} steps, baseline: {a.baseline})."
        )
    return (
        f"Integrated gradients should add up to f(input) − f(baseline); the convergence delta is how far they miss. "
        f"Here f(input) = {_nats(a.logprob if a.f_input is None else a.f_input)} (log p with the real tokens), "
        f"f(baseline) = {a.f_baseline:.4f} (tokens removed, positions kept), difference {a.difference:+.4f}; "
        f"the attributions add up to {total:+.4f}: delta {a.ig_delta:+.4f} ({a.ig_steps} steps)."
    )


def ig_trust(a: Attribution) -> tuple[bool, str]:
    """(trustworthy, the sentence): whether the attributions add up to the difference they explain."""
    diff, rel = a.difference, a.relative_delta
    if diff is None or rel is None:
        return False, (
            "This saved trace does not hold f(baseline), so the delta cannot be weighed against the difference it "
            "belongs to; close the trace to compute the attribution again."
        )
    if abs(diff) < TINY_DIFFERENCE:
        return False, (
            f"This word's log p hardly differs with and without the tokens (f(input) − f(baseline) = {diff:+.4f}): "
            "there is next to nothing to share "
            "out, so the bars (each measure scaled to its largest value) magnify small numbers, and the delta "
            f"({a.ig_delta:+.4f}) is {_times(abs(a.ig_delta), abs(diff))}."
        )
    if rel > IG_TOLERANCE:
        return False, (
            f"The attributions miss the difference by {rel:.0%} of it (more than {IG_TOLERANCE:.0%}): do not trust "
            "their sizes yet — integrate with more steps."
        )
    return True, f"The attributions add up to the difference within {rel:.1%} of it: they account for it."


def _nats(value: float) -> str:
    """A log-probability with enough digits to tell a near-certain word from exactly 0 (not '-0.0000')."""
    return f"{value:.1e}" if 0 < abs(value) < 1e-3 else f"{value:.4f}"


def _times(part: float, whole: float) -> str:
    if whole == 0:
        return "as large as anything there is to explain"
    ratio = part / whole
    return f"{ratio:.1f}× that" if ratio >= 1 else f"{ratio:.0%} of that"


# ---- source or prefix? (ALTI+) ----

# the three "share from the source" a page shows: what each measures, so that each can say how it differs
SHARE_MEASURES = {
    "rollout": (
        "attention rollout",
        "the attention weights multiplied through the layers (each with its residual as half), per output position",
    ),
    "sentence": (
        "ALTI+ over the translation",
        "how much of each output piece's decoder representation the source contributed (the model's own "
        "arithmetic, not its attention weights), averaged over the pieces",
    ),
    "step": ("ALTI+ at one step", "the same ALTI+ share for the one piece chosen at that step"),
}


def share_measures_note(shown: str) -> str:
    """One line under a "share from the source": which of the three measures it is (``SHARE_MEASURES``), and how the
    other two differ, so that a page's 0.75 and another's 91 % are not read as one number."""
    name, what = SHARE_MEASURES[shown]
    others = "; ".join(f"{n}: {w}" for key, (n, w) in SHARE_MEASURES.items() if key != shown)
    return f"This share is {name}: {what}. The lab's two other source shares measure otherwise — {others}."


LOW_SHARE_PERCENTILE = 5.0  # a word is marked when its source share is below this percentile of the words of the
# model's own translations of the built-in sentences (with the same switches): "lower than 95% of them"
WEAK_AGREEMENT = 0.3  # every ρ below this: no measure ranks the source words as ALTI+ does
SAME_SOURCE_SHARE = 0.005  # two sentences' source shares closer than this (half a percentage point) count as equal


def low_share_threshold(builtin_token_shares: np.ndarray) -> float:
    """The source share below which an output word is marked: the ``LOW_SHARE_PERCENTILE``-th percentile of the
    built-in translations' words."""
    return float(np.percentile(np.asarray(builtin_token_shares, dtype=np.float64), LOW_SHARE_PERCENTILE))


def low_share_note(tokens: Sequence[str], shares: np.ndarray, threshold: float) -> str:
    """Which output words take less from the source than the threshold (they may come from the prefix alone)."""
    rule = (
        f"{threshold:.2f} (only {LOW_SHARE_PERCENTILE:g}% of the words in this model's translations of the built-in "
        "sentences take less)"
    )
    low = [quote(t) for t, s in zip(tokens, shares, strict=True) if s < threshold]
    if not low:
        return f"No output word takes less of its content from the source than {rule}."
    one = len(low) == 1
    return (
        f"{', '.join(low)} {'takes' if one else 'take'} less of {'its' if one else 'their'} content from the source "
        f"than {rule}: {'it' if one else 'they'} may come from the prefix alone (the words already written), not "
        "from the sentence being translated."
    )


def sentence_share_note(share: float, builtin_shares: np.ndarray) -> str:
    """This translation's source share beside the model's own translations of the built-in sentences."""
    b = np.asarray(builtin_shares, dtype=np.float64)
    n, lo, hi, median = len(b), float(b.min()), float(b.max()), float(np.median(b))
    spread = f"{lo:.1%}–{hi:.1%}, median {median:.1%}"
    head = f"This translation takes {share:.1%} of its content from the source (the mean over its words). "
    if share < lo:
        return head + f"That is less than any of this model's translations of {n} built-in sentences ({spread})."
    if share > hi:
        return head + f"That is more than any of this model's translations of {n} built-in sentences ({spread})."
    above = int((b < share).sum())
    return head + f"That is more than {above} of this model's translations of {n} built-in sentences ({spread})."


def typed_share_note(typed: float, own: float) -> str:
    """A typed (teacher-forced) translation's source share against the model's own translation's."""
    gap = typed - own
    both = f"the translation you typed takes {typed:.1%} of its content from the source, the model's own {own:.1%}"
    if abs(gap) < SAME_SOURCE_SHARE:
        return f"About the same: {both}."
    if gap < 0:
        return (
            f"Less source: {both} ({-gap * 100:.1f} points less). Forced to write words the source does not "
            "support, the decoder leans on what it has already written."
        )
    return f"More source: {both} ({gap * 100:.1f} points more)."


def agreement_note(rhos: dict[str, float]) -> str:
    """Rank agreement (Spearman ρ) of other measures with ALTI+'s source map, and which agrees best."""
    finite = {k: v for k, v in rhos.items() if np.isfinite(v)}
    parts = [f"{k} {v:.2f}" if k in finite else f"{k} undefined (a constant row)" for k, v in rhos.items()]
    said = (
        "Rank agreement with ALTI+'s source map (Spearman ρ between each output word's rows, averaged over the "
        "words unless one word is named): " + "; ".join(parts) + "."
    )
    if not finite:
        return said
    best = max(finite, key=lambda k: finite[k])
    if finite[best] < WEAK_AGREEMENT:
        return said + f" None of them ranks the source words as ALTI+ does (every ρ below {WEAK_AGREEMENT:g})."
    return said + f" {best} agrees best."


def step_share_note(share: float, threshold: float | None) -> str:
    """One decoding step's source share (ALTI+), and whether it is below the low-share threshold (None: not known:
    the built-in sentences have not been scored on "Why this word?" yet)."""
    said = (
        f"Source share at this step (ALTI+): {share:.1%} of the decoder's representation comes from the source "
        f"sentence, {max(0.0, 1 - share):.1%} from the pieces written so far."  # (no '-0.0%' at a share of 1)
    )
    if threshold is None:
        return said
    if share < threshold:
        return said + (
            f" That is below {threshold:.2f} (only {LOW_SHARE_PERCENTILE:g}% of the words in this model's "
            "translations of the built-in sentences take less): this piece may come from the prefix alone."
        )
    return said + f" Not below the low-share threshold ({threshold:.2f})."


def lens_note(chosen: Sequence[str], first_top: np.ndarray, n_layers: int) -> str:
    """Where the decoder settles: how many pieces the lens ranks first before the last layer, how many only there,
    how many at no layer (a forced or tied piece)."""
    settled = [int(f) for f in first_top if f >= 0]
    if not settled:
        return "No layer's lens ranks the translation's pieces first: the model would have written others."
    last = sum(f == n_layers - 1 for f in settled)
    early, never = len(settled) - last, len(chosen) - len(settled)
    if early == 0:
        text = (
            f"None of the {len(chosen)} pieces is the top choice before the last layer (of {n_layers}): the output "
            f"layer reads {'each of them' if never == 0 else f'{last} of them'} only from there."
        )
    else:
        text = (
            f"{counted(early, 'piece')} of {len(chosen)} {'is' if early == 1 else 'are'} already the top choice "
            f"before the last layer (of {n_layers}); {last} become{'s' if last == 1 else ''} it only there."
        )
    if never:
        text += (
            f" {counted(never, 'piece')} {'is' if never == 1 else 'are'} the top choice at no layer (forced or tied)."
        )
    return text


def _agreement(rho: float) -> str:
    return "closely" if rho >= 0.7 else "loosely" if rho >= 0.3 else "hardly"


def zeroing_alti_note(rho: float | None) -> str:
    """How closely value zeroing's whole-model rows rank the source words as ALTI+'s do (mean Spearman rho)."""
    if rho is None:
        return "Value zeroing and ALTI+ cannot be compared here: no output row has two source words to rank."
    return (
        f"Over the whole model, value zeroing and ALTI+ rank the source words {_agreement(rho)} alike "
        f"(mean Spearman ρ {rho:.2f} over the output words; 1 = the same order)."
    )


def zeroing_attention_note(kind: str, per_layer: Sequence[float | None]) -> str:
    """Per layer, how closely value zeroing ranks the keys as the heads' mean attention does."""
    found = [(i, r) for i, r in enumerate(per_layer) if r is not None]
    if not found:
        return f"In {kind}, no row has two keys to rank: value zeroing and attention cannot be compared."
    layers = "; ".join(f"layer {i + 1}: {r:.2f}" for i, r in found)
    text = f"In {kind}, value zeroing ranks the keys as the heads' mean attention does by a mean Spearman ρ of {layers}"
    if len(found) == 1:
        return text + "."
    low = min(found, key=lambda x: x[1])
    return text + f" — least alike in layer {low[0] + 1}, where attention is the weakest guide to what the layer uses."


# ---- why this word and not that one? (contrastive attribution) ----


def contrast_explained(a: Attribution, chosen: str, other: str) -> str:
    """What a contrastive attribution explains, with its pieces: 'log p(gato) − log p(cão)' or 'p(gato) − p(cão)'."""
    return a.explained_with(md(bare(chosen)), md(bare(other)))


def contrast_note(a: Attribution, chosen: str, other: str, src: Sequence[str], prefix: Sequence[str]) -> str:
    """The piece (source piece or decoder input) that pushed most towards the chosen word, the one that pushed most
    towards the alternative (integrated gradients of the difference), and the difference f(input)."""
    values = np.concatenate([a.source_ig, a.target_ig])
    where = [f"the source piece {quote(bare(p))}" for p in src] + [
        f"the decoder input {quote(bare(p))}" for p in prefix
    ]
    y, c = quote(bare(chosen)), quote(bare(other))
    n = 2 if a.contrast_kind == "logit_diff" else 3  # digits: nats, or a difference of probabilities
    hi, lo = int(np.argmax(values)), int(np.argmin(values))
    up = (
        f"{where[hi]} pushed most towards {y} ({values[hi]:+.{n}f})"
        if values[hi] > 0
        else f"no piece pushed towards {y}"
    )
    down = f"{where[lo]} most towards {c} ({values[lo]:+.{n}f})" if values[lo] < 0 else f"none towards {c}"
    f = float("nan") if a.f_input is None else a.f_input
    said = f"{y} rather than {c}: {up}, {down}; {contrast_explained(a, chosen, other)} = {f:.{n}f}."
    return said + (f" Below 0: over the whole vocabulary the model finds {c} the likelier piece here." if f < 0 else "")


def contrast_sum_line(a: Attribution, chosen: str, other: str) -> str:
    """Whether the contrastive attributions add up to f(input) − f(baseline), with this run's numbers."""
    total, f = float(a.source_ig.sum() + a.target_ig.sum()), contrast_explained(a, chosen, other)
    baseline = "tokens removed, positions kept" if a.baseline == "position" else "all-zero embeddings"
    if a.difference is None or a.f_input is None or a.f_baseline is None:
        return f"The attributions of {f} add up to {total:+.4f}: delta {a.ig_delta:+.4f} ({a.ig_steps} steps)."
    return (
        f"Integrated gradients of f = {f} should add up to f(input) − f(baseline): f(input) = {a.f_input:.4f} "
        f"(the real tokens), f(baseline) = {a.f_baseline:.4f} ({baseline}), difference {a.difference:+.4f}; the "
        f"attributions add up to {total:+.4f}: delta {a.ig_delta:+.4f} ({a.ig_steps} steps)."
    )


def contrast_trust(a: Attribution) -> tuple[bool, str]:
    """``ig_trust`` for a contrastive attribution; a difference next to 0 is said as such (not 'this word's log p')."""
    diff = a.difference
    if diff is not None and abs(diff) < TINY_DIFFERENCE:
        return False, (
            f"The difference hardly changes with and without the tokens (f(input) − f(baseline) = {diff:+.4f}): "
            "next to nothing to share out; the bars (each scaled to its largest value) magnify small numbers."
        )
    return ig_trust(a)
