"""The Corpus page's sentences (viz_app/claims_corpus.py), one test per branch."""

from __future__ import annotations

from core.analysis.scan_summary import ScanTotals
from viz_app import claims_corpus


def totals(**changes) -> ScanTotals:
    base = dict(
        lines=1000,
        scored=998,
        errors=2,
        flagged=12,
        wrong_language=3,
        with_invented=5,
        with_reference=998,
        chrf=41.23,
        mean_source_share=0.9,
    )
    return ScanTotals(**(base | changes))


def test_a_whole_scan_with_every_part() -> None:
    assert claims_corpus.scan_summary(totals(), 1000, 0.797) == (
        "1,000 pairs scanned: 12 flagged (mean source share below 0.797), 3 in the wrong language, 5 with invented "
        "words; chrF 41.2 against 998 references; 2 lines not scored (listed below)."
    )


def test_nothing_wrong_no_reference_no_error() -> None:
    t = totals(lines=1, scored=1, errors=0, flagged=0, wrong_language=0, with_invented=0, with_reference=0, chrf=None)
    assert claims_corpus.scan_summary(t, 1, 0.5) == (
        "1 pair scanned: 0 flagged (mean source share below 0.5), none in the wrong language, none with invented words."
    )


def test_a_stopped_scan_says_what_its_figures_count() -> None:
    text = claims_corpus.scan_summary(totals(lines=120, errors=0, scored=120, with_reference=1, chrf=10.0), 1000, 0.8)
    assert text.startswith("Stopped after 120 of 1,000 pairs (these figures count those 120): 12 flagged")
    assert "against 1 reference;" not in text and text.endswith("against 1 reference.")


def test_nothing_scored() -> None:
    t = totals(lines=2, scored=0, errors=2)
    assert (
        claims_corpus.scan_summary(t, 2, 0.8)
        == "2 pairs scanned: none could be scored (2 lines with a problem, listed below)."
    )


def test_the_scatter_sample_and_the_opened_row() -> None:
    assert claims_corpus.sample_note(10, 10, 0) is None
    assert claims_corpus.sample_note(2000, 10000, 7).startswith(
        "The scatter draws 2,000 of the 10,000 scored pairs: every flagged one (7)"
    )
    assert "its translation is the one scanned here" in claims_corpus.opened_note(3, own=True)
    assert "the translation this line gave was the one scored here" in claims_corpus.opened_note(3, own=False)


def _label(share_holds: int, defined: int = 10, label: str = "EOS sink"):
    from core.analysis.head_spread import LabelStability

    return LabelStability("encoder", 2, 0, label, share_holds, defined)


def test_the_stability_note_names_the_unsteady_labels() -> None:
    assert claims_corpus.stability_note([], 240).startswith("No head has a label over these 240 sentences")
    steady = claims_corpus.stability_note([_label(5), _label(9)], 240)
    assert steady == (
        "Of the 2 labels the set's averages give, every one holds on at least half of the 240 sentences taken one "
        "at a time."
    )
    one = claims_corpus.stability_note([_label(4), _label(9)], 240)
    assert one.endswith("1 holds on fewer than half of the 240 sentences taken one at a time (marked “?” in the "
                        "maps): encoder L3 H1 EOS sink (40%).")  # fmt: skip
    many = claims_corpus.stability_note([_label(i, defined=20) for i in range(7)], 20)
    assert "7 hold on fewer than half" in many and many.endswith("and 2 more.")
