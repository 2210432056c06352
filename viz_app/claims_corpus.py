"""Sentences the lab states about many sentences at once: the Corpus page's about a scan (computed from its records,
``scan_summary.totals``) and "What does each head do?"'s about how steady the heads' labels are over a set
(``head_spread.LabelStability``).

One function per claim, a test for each branch (tests/viz_app/test_claims_corpus.py). Pure: no Streamlit, no
model.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.analysis import head_spread
from core.analysis.head_spread import LabelStability
from core.analysis.scan_summary import ScanTotals
from viz_app.claims import counted


def scan_summary(t: ScanTotals, total: int, threshold: float) -> str:
    """'1,000 pairs scanned: 12 flagged (mean source share below 0.797), 3 in the wrong language, 5 with invented
    words; chrF 41.2 against 1,000 references; 2 lines not scored.' — ``t`` counted from the records so far,
    ``total`` the pairs of the input (more than ``t.lines`` while the scan is stopped part-way)."""
    head = (
        f"{counted(t.lines, 'pair')} scanned"
        if t.lines == total
        else f"Stopped after {t.lines:,} of {counted(total, 'pair')} (these figures count those {t.lines:,})"
    )
    if t.scored == 0:
        return f"{head}: none could be scored ({counted(t.errors, 'line')} with a problem, listed below)."
    parts = [f"{t.flagged:,} flagged (mean source share below {threshold:g})"]
    parts.append(
        "none in the wrong language" if t.wrong_language == 0 else f"{t.wrong_language:,} in the wrong language"
    )
    parts.append("none with invented words" if t.with_invented == 0 else f"{t.with_invented:,} with invented words")
    text = f"{head}: " + ", ".join(parts)
    if t.chrf is not None:
        text += f"; chrF {t.chrf:.1f} against {counted(t.with_reference, 'reference')}"
    if t.errors:
        text += f"; {counted(t.errors, 'line')} not scored (listed below)"
    return text + "."


def sample_note(shown: int, total: int, flagged: int) -> str | None:
    """Said under the scatter when it draws a sample of the points rather than all of them."""
    if shown >= total:
        return None
    return (
        f"The scatter draws {shown:,} of the {total:,} scored pairs: every flagged one ({flagged:,}) and an even "
        "sample of the rest, in line order. The table and the histograms hold all of them."
    )


def opened_note(line: int, own: bool) -> str:
    """What opening a row on the other pages shows."""
    if own:
        return f"Line {line:,}: the pages run the model on this source; its translation is the one scanned here."
    return (
        f"Line {line:,}: the pages run the model on this source and show the model's own translation; the "
        "translation this line gave was the one scored here."
    )


def stability_note(stabilities: Sequence[LabelStability], n_sentences: int, *, marked: bool = True) -> str:
    """What the label-stability table says in one sentence: how many of the set's labels hold on at least the share
    of the sentences taken one at a time that makes a label steady (``head_spread.STABLE``), and which do not."""
    if not stabilities:
        return (
            f"No head has a label over these {n_sentences:,} sentences, so there is no label to check sentence by "
            "sentence."
        )
    unsteady = [x for x in stabilities if not x.steady]
    bar = "half" if head_spread.STABLE == 0.5 else f"{head_spread.STABLE:.0%}"  # read here: the bar the labels met
    head = f"Of the {counted(len(stabilities), 'label')} the set's averages give, "
    if not unsteady:
        return head + f"every one holds on at least {bar} of the {n_sentences:,} sentences taken one at a time."
    names = ", ".join(f"{x.kind} L{x.layer + 1} H{x.head + 1} {x.label} ({x.share:.0%})" for x in unsteady[:5])
    more = f" and {len(unsteady) - 5:,} more" if len(unsteady) > 5 else ""
    verb = "holds" if len(unsteady) == 1 else "hold"
    return (
        head
        + f"{len(unsteady):,} {verb} on fewer than {bar} of the {n_sentences:,} sentences taken one at a time"
        + (" (marked “?” in the maps)" if marked else "")
        + f": {names}{more}."
    )
