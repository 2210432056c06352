"""The Compare page's sentences (viz_app/claims_compare.py), one test per branch."""

from __future__ import annotations

import numpy as np

from core.analysis.compare import Comparison, KindChange
from viz_app import claims_compare
from viz_app.session.params import KINDS


def change(values, unmatched=((), ())) -> KindChange:
    return KindChange("encoder", np.array(values, dtype=float), 5, 5, unmatched, ((), ()))


def test_outputs() -> None:
    assert claims_compare.outputs_note("a b", "a b") == "Both runs write the same translation."
    assert claims_compare.outputs_note("a b", "a  b ") == "Both runs write the same translation."  # spacing only
    assert claims_compare.outputs_note("O cão", "O gato") == "The translations part at word 2: “cão” in A, “gato” in B."
    assert claims_compare.outputs_note("a b", "a") == "The translations part at word 2: “b” in A, nothing more in B."


def test_kind_notes() -> None:
    assert claims_compare.kind_note(change([[0.5, 0.2]]), "Enc") == (
        "Enc: every one of the 2 heads changed (by 0.001 or more); most of all layer 1 head 1 (0.500)."
    )
    assert claims_compare.kind_note(change([[0.0, 0.2]]), "Enc").startswith("Enc: 1 of the 2 heads changed")
    assert claims_compare.kind_note(change([[1e-5, 0.0]]), "Enc") == (
        "Enc: no head changed (every matched row moved less than 0.001)."
    )
    assert claims_compare.kind_note(change([[np.nan]]), "Enc") == (
        "Enc: no piece is shared by both runs, so no head can be compared."
    )


def test_unmatched_and_counterparts() -> None:
    assert claims_compare.unmatched_note(change([[0.1]]), "Enc") is None
    text = claims_compare.unmatched_note(change([[0.1]], (("▁dog",), ("▁man",))), "Enc")
    assert text == (
        "Enc: compared over the 5 query and 5 key pieces both runs share; left out, as queries, A's “dog” and "
        "B's “man”."
    )
    found = Comparison({}, ("decoder",), ())
    assert claims_compare.counterpart_note(found, KINDS, "student", "teacher") == (
        "Decoder masked self-attention: only student has it (teacher has none), so it has no counterpart."
    )
    only_b = Comparison({}, (), ("decoder",))  # the other way round: the names swap
    assert claims_compare.counterpart_note(only_b, KINDS, "student", "teacher") == (
        "Decoder masked self-attention: only teacher has it (student has none), so it has no counterpart."
    )
    both = Comparison({}, ("cross",), ("cross",))
    assert "differ in number" in claims_compare.counterpart_note(both, KINDS, "a", "b")
    assert claims_compare.counterpart_note(Comparison({}, (), ()), KINDS, "a", "b") is None


def test_shares_and_attribution() -> None:
    assert claims_compare.share_note(0.9012, 0.9009) == (
        "Both translations draw as much on the source: a mean source share of 0.901."
    )
    assert (
        claims_compare.share_note(0.8, 0.9)
        == "Mean source share: A 0.800, B 0.900 — B's translation draws more on the source."
    )
    assert claims_compare.attribution_note("▁cão", "▁dog", "▁homem", "▁man") == (
        "A's “cão” owes most to the source piece “dog”; B's “homem” to “man” (integrated gradients)."
    )


def test_the_ranked_heading_says_when_the_heads_did_not_change() -> None:
    assert claims_compare.ranked_title([0.3, 0.01]) == "The 2 heads that changed most"
    assert claims_compare.ranked_title([0.3, 0.0004]) == "The 2 heads that changed most (1 of them by less than 0.001)"
    assert claims_compare.ranked_title([0.0, 0.0]) == "2 heads, none changed (each by less than 0.001)"
