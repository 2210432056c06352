"""Sampling (core.decoding.sampling, Bundle.translate(sampling=...)): the reshaped distribution against its
definition, temperature 0 and top-k 1 are greedy decoding, a seed replays, a drawn piece keeps the model's own
probability, the settings are checked, and beam search refuses it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import core
from core.decoding.sampling import Sampling, reshaped
from core.errors import InputError

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
