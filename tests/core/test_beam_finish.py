"""Beam search's finishing policies (``core.decoding.beam_finish``): which candidates end and go on, the pool, when to
stop,
the winner; chosen by ``ModelConfig.beam``. Parity of the "transformers" policy with ``generate`` itself is tested
on every imported family (tests/core/importers/test_hf_*.py)."""

import pytest
import torch

from core import InputError
from core.config import ModelConfig
from core.decoding.beam_finish import LabFinish, TransformersFinish, finishing

EOS = 2


def score(x: float) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float32)


def test_the_lab_policy_keeps_beam_size_candidates_and_finishes_those_that_end():
    lab = LabFinish(beam_size=3, alpha=1.0)
    assert lab.width == 3
    assert lab.select([False, True, False], last=False) == ([1], [0, 2])
    lab.add(score(-2.0), [5, EOS])
    assert not lab.done(0, torch.tensor([-1.0, -3.0]))
    assert lab.done(0, torch.tensor([]))  # nothing left to extend
    lab.add(score(-2.7), [5, 6, EOS])
    lab.add(score(-1.5), [EOS])
    assert lab.done(1, torch.tensor([-1.0]))  # beam_size finished
    assert lab.best(torch.tensor([[7, 7]]), torch.tensor([-0.1])) == [5, 6, EOS]  # -0.9 per id beats -1.0 and -1.5


def test_the_lab_policy_ranks_the_live_beams_when_none_finished():
    lab = LabFinish(beam_size=2, alpha=1.0)
    assert lab.best(torch.tensor([[4, 5], [6, 7]]), torch.tensor([-1.0, -0.5])) == [6, 7]
    assert LabFinish(2, 0.0).best(torch.tensor([[4], [6]]), torch.tensor([-1.0, -3.0])) == [4]


def test_transformers_looks_at_twice_the_beam_and_keeps_beam_size_alive():
    hf = TransformersFinish(beam_size=4, length_penalty=1.0, early_stopping=False, max_len=10)
    assert hf.width == 8
    eos_second = [False, True, False, False, False, False, False, False]
    assert hf.select(eos_second, last=False) == ([1], [0, 2, 3, 4])  # the beam stays 4 wide
    eos_sixth = [False, False, False, False, False, True, False, False]
    assert hf.select(eos_sixth, last=False) == ([], [0, 1, 2, 3])  # an eos outside the 4 best is dropped
    assert hf.select(eos_second, last=True) == ([0, 1, 2, 3], [0, 2, 3, 4])  # at max_len the 4 best end


def test_transformers_pool_keeps_the_best_by_length_penalised_score():
    hf = TransformersFinish(beam_size=2, length_penalty=1.0, early_stopping=False, max_len=10)
    hf.add(score(-3.0), [4, 5, EOS])  # -1.0
    hf.add(score(-1.2), [EOS])  # -1.2
    hf.add(score(-4.0), [4, 5, 6, EOS])  # -1.0: beats -1.2, after the -1.0 already there
    assert [seq for _, seq in hf.pool] == [[4, 5, EOS], [4, 5, 6, EOS]]
    hf.add(score(-9.0), [4, 5, 6, 7, 8, EOS])  # -1.5: worse than the pool's worst, not kept
    assert len(hf.pool) == 2 and hf.best(torch.tensor([[1]]), torch.tensor([0.0])) == [4, 5, EOS]
    short = TransformersFinish(beam_size=2, length_penalty=0.0, early_stopping=False, max_len=10)
    for s, seq in ((-3.0, [4, 5, EOS]), (-1.2, [EOS]), (-4.0, [4, 5, 6, EOS])):
        short.add(score(s), seq)
    assert short.best(torch.tensor([[1]]), torch.tensor([0.0])) == [EOS]  # no length penalty: the sum decides


def test_transformers_stopping_follows_early_stopping():
    def full(stopping: bool | str, penalty: float = 1.0) -> TransformersFinish:
        hf = TransformersFinish(beam_size=2, length_penalty=penalty, early_stopping=stopping, max_len=10)  # type: ignore[arg-type]
        hf.add(score(-2.0), [4, EOS])  # -1.0
        hf.add(score(-4.0), [4, 5, 6, EOS])  # -1.0 (4 ids)
        return hf

    best_alive = torch.tensor([-2.5, -3.0])  # after step 2: 3 ids, -0.83 per id
    assert not TransformersFinish(2, 1.0, True, 10).done(2, best_alive)  # the pool is not full
    assert full(True).done(2, best_alive)  # full: stop
    assert not full(False).done(2, best_alive)  # -2.5 / 3 > -1.0: it could still win
    assert full(False).done(2, torch.tensor([-3.5]))  # -3.5 / 3 < -1.0: it cannot
    assert not full("never").done(2, torch.tensor([-3.5]))  # "never": judged at max_len, -3.5 / 10 > -1.0
    assert not full("never", penalty=0.0).done(2, torch.tensor([-3.5]))  # no length penalty: the sums, -3.5 > -4
    assert full("never", penalty=0.0).done(2, torch.tensor([-4.5]))
    assert full(False).done(9, best_alive)  # max_len
    assert full(False).done(2, torch.tensor([]))


def test_the_config_picks_the_policy_and_a_call_may_override_the_penalty():
    lab = ModelConfig(src_vocab_size=8, tgt_vocab_size=8, d_model=8, n_heads=2, d_ff=8, length_penalty=0.6)
    assert isinstance(finishing(lab, 4, None, 10), LabFinish) and finishing(lab, 4, None, 10).alpha == 0.6
    hf = ModelConfig(
        src_vocab_size=8, tgt_vocab_size=8, d_model=8, n_heads=2, d_ff=8, beam="transformers", early_stopping="never"
    )
    policy = finishing(hf, 4, 2.0, 12)
    assert policy == TransformersFinish(4, 2.0, "never", 12)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("beam", "marian", "beam must be 'lab' or 'transformers'"),
        ("early_stopping", "sometimes", "early_stopping must be true, false or 'never'"),
        ("early_stopping", 1, "early_stopping must be true, false or 'never'"),
        ("length_penalty", float("nan"), "length_penalty must be a finite number"),
        ("length_penalty", "1", "length_penalty must be a finite number"),
    ],
)
def test_bad_beam_settings_are_named(field, value, message):
    with pytest.raises(InputError, match=message):
        ModelConfig(src_vocab_size=8, tgt_vocab_size=8, d_model=8, n_heads=2, d_ff=8, **{field: value})
