"""Head statistics and labels: hand-made maps with known answers, and a real trace's invariants."""

from __future__ import annotations

import json

import numpy as np
import pytest

import core
from core.analysis.heads import HeadStatistics, kind_statistics, sentence_statistics, total
from core.analysis.sentences import builtin_sentences
from core.analysis.survey import builtin_statistics
from core.bundle import weights_digest

TOKENS = ["▁a", "▁b", ".", "</s>"]


def _hand_maps() -> np.ndarray:
    """One encoder layer, 3 heads over 4 tokens: previous-token, uniform, everything on </s>."""
    prev = np.zeros((4, 4))
    prev[0, 0] = 1.0
    for i in range(1, 4):
        prev[i, i - 1] = 1.0
    uniform = np.full((4, 4), 0.25)
    eos = np.zeros((4, 4))
    eos[:, 3] = 1.0
    return np.stack([prev, uniform, eos])[None]  # (L=1, H=3, 4, 4)


def _hand_stats() -> HeadStatistics:
    maps = _hand_maps()
    sums, rows = kind_statistics(list(maps), np.ones((4, 4), bool), TOKENS, TOKENS, "encoder")
    return HeadStatistics(sums={"encoder": sums}, rows={"encoder": rows})


def test_statistics_of_hand_made_heads() -> None:
    s = _hand_stats()
    assert s.mean("encoder", "previous")[0].tolist() == pytest.approx([1.0, 0.25, 0.0])  # rows 1..3 define it
    assert s.rows["encoder"]["previous"] == 3 and s.rows["encoder"]["next"] == 3
    assert s.mean("encoder", "entropy")[0].tolist() == pytest.approx([0.0, 1.0, 0.0], abs=1e-9)
    assert s.mean("encoder", "eos")[0].tolist() == pytest.approx([0.0, 0.25, 1.0])
    assert s.mean("encoder", "punctuation")[0].tolist() == pytest.approx([0.25, 0.25, 0.0])
    assert s.mean("encoder", "first")[0].tolist() == pytest.approx([0.5, 0.25, 0.0])
    # uniform: mean |i − j| over the 16 cells / 4 rows = 20/16 = 1.25
    assert s.mean("encoder", "distance")[0, 1] == pytest.approx(1.25)
    labels = {(x.head, x.label) for x in s.labels()}
    # the previous-token head also puts half its weight on the first token here (rows 0 and 1 of 4)
    assert labels == {(0, "previous-token"), (0, "first-token sink"), (1, "broad/uniform"), (2, "EOS sink")}
    evidence = next(x.evidence for x in s.labels() if x.label == "previous-token")
    assert evidence == "previous 1.00 ≥ 0.5 over 3 rows"


def test_rows_are_weighted_equally_when_sentences_are_added() -> None:
    s = _hand_stats()
    both = total([s, s])
    assert both.n_sentences == 2 and both.rows["encoder"]["previous"] == 6
    np.testing.assert_allclose(both.mean("encoder", "previous"), s.mean("encoder", "previous"))
    restored = HeadStatistics.from_dict(json.loads(json.dumps(both.to_dict())))
    np.testing.assert_allclose(restored.mean("encoder", "eos"), both.mean("encoder", "eos"))


def test_alignment_labels_come_from_gold_scores() -> None:
    maps = _hand_maps()
    sums, rows = kind_statistics(list(maps), np.ones((4, 4), bool), TOKENS, TOKENS, "cross")
    s = HeadStatistics(sums={"cross": sums}, rows={"cross": rows}).with_alignment(np.array([[0.7, 0.3, 0.9]]))
    align = [x for x in s.labels() if x.label == "alignment"]
    assert [(x.layer, x.head) for x in align] == [(0, 1)] and "AER 0.30" in align[0].evidence
    assert np.isnan(s.mean("cross", "previous")).all()  # no previous/next in cross-attention
    table = s.table()
    assert table[1]["alignment AER"] == 0.3 and "alignment" in table[1]["labels"]


def test_a_real_trace_gives_bounded_shares_and_no_next_token_in_the_causal_decoder(tiny_checkpoint) -> None:
    bundle = core.load(tiny_checkpoint, device="cpu")
    s = sentence_statistics(bundle.translate("The cat sleeps on the warm chair.", max_len=8).trace)
    assert set(s.kinds) == {"encoder", "decoder", "cross"}
    for kind in s.kinds:
        for stat in ("entropy", "diagonal", "eos", "first", "punctuation"):
            v = s.mean(kind, stat)
            assert v.shape == (2, 2) and ((v >= -1e-6) & (v <= 1 + 1e-6)).all(), (kind, stat, v)
    assert s.rows["decoder"]["next"] == 0 and np.isnan(s.mean("decoder", "next")).all()
    arrays, details = s.to_arrays()
    traced = bundle.translate("The cat sleeps.", max_len=4).trace.with_analysis(arrays, details)
    again = core.Trace.load(traced.to_json().encode())
    restored = HeadStatistics.from_trace(again)
    assert restored is not None
    np.testing.assert_allclose(restored.mean("cross", "entropy"), s.mean("cross", "entropy"))
    assert "analysis.head_stats.encoder.previous" in again


def test_builtin_statistics_are_cached_on_disk_by_weights(tiny_checkpoint, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path))
    bundle = core.load(tiny_checkpoint, device="cpu")
    monkeypatch.setattr("core.analysis.survey.builtin_sentences", lambda lang: (builtin_sentences(lang)[0][:6], "en"))
    first, language = builtin_statistics(bundle)
    assert language == "en" and first.n_sentences == 6
    files = list(tmp_path.glob("head-stats-*.json"))
    assert len(files) == 1 and weights_digest(bundle.model) in files[0].name
    calls = []
    monkeypatch.setattr("core.analysis.survey.set_statistics", lambda *a: calls.append(a))
    again, _ = builtin_statistics(bundle)  # from the file: nothing recomputed
    assert not calls
    np.testing.assert_allclose(again.mean("encoder", "entropy"), first.mean("encoder", "entropy"))
    other = core.load(tiny_checkpoint, device="cpu")
    with __import__("torch").no_grad():
        next(other.model.parameters()).add_(0.01)
    assert weights_digest(other.model) != weights_digest(bundle.model)  # changed weights: another cache entry


def test_builtin_sentences_are_deterministic_and_varied() -> None:
    en, lang = builtin_sentences("en")
    assert lang == "en" and len(en) == len(set(en)) == 240 and en == builtin_sentences("en")[0]
    pt, _ = builtin_sentences("pt")
    assert len(pt) == 240 and "O cão mordeu o homem." in pt
    assert builtin_sentences("fr")[1] == "en"  # no French set: English, and it says so
    assert max(len(s.split()) for s in en) >= 18
    en.clear()  # made once and kept: each caller still gets its own list
    assert len(builtin_sentences("en")[0]) == 240
    assert builtin_sentences("en", 5)[0] == builtin_sentences("en")[0][:5]


def test_alignment_scores_are_kept_on_disk_by_weights_and_gold_pairs(tiny_checkpoint, tmp_path, monkeypatch) -> None:
    from core.analysis import survey
    from core.analysis.alignment import GoldPair

    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path))
    bundle = core.load(tiny_checkpoint, device="cpu")
    gold = [
        GoldPair("the cat sleeps", "o gato dorme", frozenset({(0, 0), (1, 1), (2, 2)}), frozenset()),
        GoldPair("a dog", "um cão", frozenset({(0, 0), (1, 1)}), frozenset()),
    ]
    first = survey.kept_alignment_scores(bundle, gold)
    files = list(tmp_path.glob("alignment-*.json"))
    assert len(files) == 1 and bundle.digest in files[0].name
    calls = []
    real = survey.alignment_scores
    monkeypatch.setattr(survey, "alignment_scores", lambda *a: calls.append(a) or real(*a))
    again = survey.kept_alignment_scores(bundle, gold)  # from the file: nothing measured
    assert not calls
    np.testing.assert_allclose(again.head_aer, first.head_aer)
    assert (again.best_head, again.n_pairs, again.method) == (first.best_head, first.n_pairs, first.method)
    survey.kept_alignment_scores(bundle, gold[:1])  # other gold pairs: measured, kept apart
    assert len(calls) == 1 and len(list(tmp_path.glob("alignment-*.json"))) == 2
    files[0].write_text("{not json")  # a damaged entry is measured again
    survey.kept_alignment_scores(bundle, gold)
    assert len(calls) == 2
