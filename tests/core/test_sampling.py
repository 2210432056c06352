"""Sampling (core.decoding.sampling, Bundle.translate(sampling=...)): the reshaped distribution against its
definition, temperature 0 and top-k 1 are greedy decoding, a seed replays, a drawn piece keeps the model's own
probability, the settings are checked, and beam search refuses it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import core
from core.decoding.sampling import Sampling, reshaped
from core.errors import InputError
from core.sites import DrawArray, draw_site, output_site

TEXT = "the cat sleeps on the mat"


@pytest.fixture(scope="module")
def bundle(tiny_checkpoint: Path) -> core.Bundle:
    return core.load(tiny_checkpoint)


def test_the_reshaped_distribution_is_its_definition() -> None:
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05, 0.0]])
    hot = reshaped(p, Sampling(temperature=2.0))
    want = np.where(p.numpy() > 0, p.numpy() ** 0.5, 0.0)
    np.testing.assert_allclose(hot.numpy(), want / want.sum(), rtol=1e-6)
    assert hot[0, 4] == 0  # an id the rules set to 0 stays 0
    np.testing.assert_allclose(reshaped(p, Sampling(top_k=2)).numpy(), [[0.625, 0.375, 0, 0, 0]], rtol=1e-6)
    np.testing.assert_allclose(reshaped(p, Sampling(top_p=0.7)).numpy(), [[0.625, 0.375, 0, 0, 0]], rtol=1e-6)
    np.testing.assert_allclose(reshaped(p, Sampling(top_p=0.1)).numpy(), [[1, 0, 0, 0, 0]])  # the first always kept
    np.testing.assert_allclose(reshaped(p, Sampling(temperature=0)).numpy(), [[1, 0, 0, 0, 0]])


def test_temperature_zero_and_top_k_one_are_greedy(bundle: core.Bundle) -> None:
    greedy = bundle.translate(TEXT)
    tiny = Sampling(temperature=1e-40, seed=3)  # log p / T would overflow to -inf everywhere: the top piece is kept
    for sampling in (Sampling(temperature=0), Sampling(top_k=1, seed=7), Sampling(temperature=1e-4, seed=3), tiny):
        drawn = bundle.translate(TEXT, sampling=sampling)
        assert drawn.output_ids == greedy.output_ids, sampling
        assert drawn.trace.meta["sampling"]["seed"] == sampling.seed


def test_a_seed_replays_and_another_seed_draws_otherwise(bundle: core.Bundle) -> None:
    hot = Sampling(temperature=3.0, seed=11)
    first, again = bundle.translate(TEXT, sampling=hot), bundle.translate(TEXT, sampling=hot)
    assert first.output_ids == again.output_ids
    others = {bundle.translate(TEXT, sampling=Sampling(temperature=3.0, seed=s)).output_ids for s in range(6)}
    assert len(others) > 1  # a random tiny model at temperature 3: the draws differ
    # each step's recorded probability is the model's own for the drawn piece (a teacher-forced pass agrees)
    forced = bundle.teacher_forced(TEXT, target_ids=first.output_ids)
    np.testing.assert_allclose([s.prob for s in first.steps], [s.prob for s in forced.steps], rtol=1e-4, atol=1e-6)


def test_settings_are_checked_and_beam_search_refuses_sampling(bundle: core.Bundle) -> None:
    for bad, words in (
        ({"temperature": -1}, "temperature"),
        ({"top_k": 0}, "top-k"),
        ({"top_p": 1.5}, "top-p"),
        ({"seed": -2}, "seed"),
    ):
        with pytest.raises(InputError, match=words):
            Sampling(**bad)
    with pytest.raises(InputError, match="beam size 1"):
        bundle.translate(TEXT, beam_size=2, sampling=Sampling())
    with pytest.raises(InputError, match="beam size 1"):
        bundle.translate_batch([TEXT], beam_size=2, sampling=Sampling())
    with pytest.raises(InputError, match="Sampling"):
        bundle.translate(TEXT, sampling=0.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "sampling",
    [Sampling(temperature=1.5, top_k=8, top_p=0.95, seed=4), Sampling(temperature=0.7, top_p=0.5, seed=2),
     Sampling(temperature=0)],
)  # fmt: skip
def test_the_recorded_draw_is_the_distribution_drawn_from(bundle: core.Bundle, sampling: Sampling) -> None:
    """The ``output.draw.*`` sites decoding records against the same draw made again from each step's whole
    distribution (a teacher-forced pass over the drawn ids, every piece's probability, ``reshaped``)."""
    out = bundle.translate(TEXT, record=core.Record(qkv=False), sampling=sampling)
    trace = out.trace
    every = core.Record(qkv=False, top_k=bundle.config.tgt_vocab_size)
    forced = bundle.teacher_forced(TEXT, target_ids=out.output_ids, record=every).trace
    probs, ids = forced[output_site("top_probs")], forced[output_site("top_ids")]  # (T, V) sorted
    full = torch.zeros(probs.shape).scatter_(-1, torch.tensor(ids), torch.tensor(probs))  # (T, V) by id
    shaped = reshaped(full, sampling).numpy()
    warm = reshaped(full, Sampling(temperature=sampling.temperature)).numpy()
    # a step whose top-p edge lies within rounding of a piece could keep one piece more or less in either pass:
    # compared where moving p by 1e-6 either way keeps the same pieces (here, every step; elsewhere most)
    edge = [replace(sampling, top_p=min(1.0, sampling.top_p + d)) for d in (-1e-6, 1e-6)] if sampling.top_p else []
    steady = np.all([(reshaped(full, s).numpy() > 0) == (shaped > 0) for s in edge], axis=(0, 2)) if edge else None
    at = np.arange(len(out.output_ids)) if steady is None else np.flatnonzero(steady)
    assert len(at) >= 0.75 * len(out.output_ids)
    taken = np.asarray(out.output_ids)[at]
    top = trace[output_site("top_ids")][at]  # (T, k)
    shaped, warm, everything = shaped[at], warm[at], full.numpy()[at]
    rows = np.arange(len(at))

    def recorded(what: DrawArray) -> np.ndarray:
        return trace[draw_site(what)][at]

    np.testing.assert_allclose(recorded("top_probs"), np.take_along_axis(shaped, top, -1), atol=1e-5)
    np.testing.assert_allclose(recorded("prob"), shaped[rows, taken], atol=1e-5)
    assert (recorded("prob") > 0).all()  # every drawn piece was in the draw
    np.testing.assert_array_equal(recorded("kept"), (shaped > 0).sum(-1))
    removed = (warm > 0) & (shaped == 0)
    np.testing.assert_array_equal(recorded("cut"), removed.sum(-1))
    np.testing.assert_array_equal(recorded("top_cut"), np.take_along_axis(removed, top, -1))
    np.testing.assert_array_equal(recorded("rank"), (everything > everything[rows, taken][:, None]).sum(-1) + 1)
    if sampling.top_k is not None:
        assert (recorded("kept") <= sampling.top_k).all()
    assert draw_site("prob") not in bundle.translate(TEXT).trace  # greedy decoding draws nothing


def test_a_sampled_batch_says_how_it_was_drawn(bundle: core.Bundle) -> None:
    sampling = Sampling(temperature=1.2, top_p=0.9, seed=6)
    for out in bundle.translate_batch([TEXT, "the dog runs"], sampling=sampling):
        assert out.trace.meta["sampling"] == {"temperature": 1.2, "top_k": None, "top_p": 0.9, "seed": 6}
    assert "sampling" not in bundle.translate_batch([TEXT, "the dog runs"])[0].trace.meta
