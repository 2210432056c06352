"""Heads over many sentences (core.analysis.head_spread, survey.survey_sentences / builtin_spread): each
sentence's own means, the quartiles, the agreement with ALTI+ against numpy's correlation, and each set label's
stability against the labels each sentence gets alone — on a self-attention and an SSRU decoder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import build_tiny_checkpoint

import core
from core.analysis import survey
from core.analysis.contributions import contributions
from core.analysis.head_spread import HeadSpread, alti_agreement
from core.analysis.heads import STATS, sentence_statistics
from core.analysis.sentences import builtin_sentences
from core.config import Record

SENTENCES = builtin_sentences("en")[0][:10]


@pytest.fixture(scope="module", params=["attention", "ssru"])
def bundle(request, tmp_path_factory: pytest.TempPathFactory) -> core.Bundle:
    extra = {"decoder_self": "ssru", "pe_layout": "concatenated", "start": "zeros"} if request.param == "ssru" else {}
    return core.load(build_tiny_checkpoint(tmp_path_factory.mktemp("spread") / "tiny", seed=3, **extra))


@pytest.fixture(scope="module")
def measured(bundle: core.Bundle):
    return survey.survey_sentences(bundle, SENTENCES)


def traces(bundle: core.Bundle) -> list[core.Trace]:
    return [bundle.translate(s, truncate=True, record=Record(qkv=False)).trace for s in SENTENCES]


def test_each_sentence_keeps_its_own_means_and_the_total_is_the_sets(bundle: core.Bundle, measured) -> None:
    stats, spread = measured
    assert stats.to_dict() == survey.set_statistics(bundle, SENTENCES).to_dict()
    assert spread.n_sentences == len(SENTENCES)
    for i, trace in enumerate(traces(bundle)):
        alone = sentence_statistics(trace)
        for kind in alone.kinds:
            for stat in STATS:
                np.testing.assert_array_equal(spread.values[kind][stat][i], alone.mean(kind, stat))
    assert set(spread.values) == set(stats.kinds) and "alti" in spread.values["cross"]
    assert all("alti" not in spread.values[k] for k in spread.values if k != "cross")
    q = spread.quantiles("encoder", "entropy")
    np.testing.assert_allclose(q, np.percentile(spread.values["encoder"]["entropy"], [25, 50, 75], axis=0))


def test_agreement_with_alti_is_the_correlation_of_the_two_maps(bundle: core.Bundle, measured) -> None:
    _, spread = measured
    trace = traces(bundle)[3]
    alti = contributions(bundle, SENTENCES[3]).source_matrix
    rows = alti / alti.sum(-1, keepdims=True)
    for layer in range(trace.n_layers["cross"]):
        maps = trace.attention("cross", layer)
        for head in range(maps.shape[0]):
            want = np.corrcoef(maps[head].ravel(), rows.ravel())[0, 1]
            assert spread.values["cross"]["alti"][3, layer, head] == pytest.approx(want, abs=1e-4)
    flat = np.ones((1, 1, 2, 3))  # a head that attends uniformly is uncorrelated with anything: NaN, not 0
    assert np.isnan(alti_agreement(list(flat), np.eye(2, 3) + 0.1)).all()


def test_a_labels_stability_counts_the_sentences_it_holds_on_alone(bundle: core.Bundle, measured) -> None:
    stats, spread = measured
    alone = [{(x.kind, x.layer, x.head, x.label) for x in sentence_statistics(t).labels()} for t in traces(bundle)]
    found = spread.stability(stats)
    assert found, "the tiny model's set gives labels: the counts below compare something"
    for x in found:
        assert x.holds == sum((x.kind, x.layer, x.head, x.label) in labels for labels in alone), x
        assert x.steady == (x.share >= 0.5)
    assert {(x.kind, x.layer, x.head, x.label) for x in found} == {
        (x.kind, x.layer, x.head, x.label) for x in stats.labels() if x.label != "alignment"
    }


def test_the_built_in_spread_is_kept_on_disk(bundle: core.Bundle, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(survey, "builtin_sentences", lambda language: (SENTENCES[:4], "en"))
    stats, spread, language = survey.builtin_spread(bundle)
    assert language == "en" and spread.n_sentences == 4

    def fail(*args, **kwargs):
        raise AssertionError("measured again instead of read from disk")

    monkeypatch.setattr(survey, "survey_sentences", fail)
    again = survey.builtin_spread(bundle)
    assert again[0].to_dict() == stats.to_dict()
    for kind, stats_of_kind in spread.values.items():
        for stat, values in stats_of_kind.items():
            np.testing.assert_array_equal(again[1].values[kind][stat], values)
    assert survey.cached_builtin_statistics(bundle) is not None  # the labels the other pages read are kept too
    spread.save(tmp_path / "x.npz")
    assert HeadSpread.load(tmp_path / "x.npz").n_sentences == 4


def test_a_batch_alti_cannot_score_leaves_out_its_own_sentences_only(bundle: core.Bundle, monkeypatch) -> None:
    from core.errors import LabError

    real, calls = survey.batch_contributions, []

    def second_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise LabError("this batch cannot be scored")
        return real(*args, **kwargs)

    monkeypatch.setattr(survey, "SPREAD_BATCH", 2)
    monkeypatch.setattr(survey, "batch_contributions", second_fails)
    _, spread = survey.survey_sentences(bundle, SENTENCES[:6])
    alti = spread.values["cross"]["alti"]  # (6, L, H)
    assert np.isnan(alti[2:4]).all() and np.isfinite(alti[[0, 1, 4, 5]]).all()
