"""Attention rollout: a hand-computed two-layer example, row sums, head fusion, encoder-decoder flow."""

import numpy as np
import pytest

import core
from core.analysis import fuse_heads, rollout, trace_rollout
from core.analysis.rollout import concentration, set_aside, special_positions


def test_two_layer_rollout_by_hand():
    a1 = np.array([[1.0, 0.0], [0.5, 0.5]])
    a2 = np.array([[0.0, 1.0], [1.0, 0.0]])
    # 0.5 A + 0.5 I: [[1, 0], [0.25, 0.75]] and [[0.5, 0.5], [0.5, 0.5]]; the second times the first:
    expected = np.array([[0.625, 0.375], [0.625, 0.375]])
    np.testing.assert_allclose(rollout([a1, a2]), expected)
    np.testing.assert_allclose(rollout([a1]), [[1.0, 0.0], [0.25, 0.75]])


def test_head_fusion_renormalises_rows():
    w = np.array([[[0.9, 0.1], [0.5, 0.5]], [[0.1, 0.9], [0.0, 1.0]]])  # (H=2, 2, 2)
    np.testing.assert_allclose(fuse_heads(w, "mean"), [[0.5, 0.5], [0.25, 0.75]])
    np.testing.assert_allclose(fuse_heads(w, "max"), [[0.5, 0.5], [1 / 3, 2 / 3]])
    np.testing.assert_allclose(fuse_heads(w, "min"), [[0.5, 0.5], [0.0, 1.0]])
    assert fuse_heads(np.zeros((2, 1, 3)), "min").sum() == 0  # an all-zero row stays zero, no NaN
    with pytest.raises(ValueError, match="fusion"):
        fuse_heads(w, "median")


@pytest.fixture(scope="module")
def bundle(tiny_checkpoint):
    return core.load(tiny_checkpoint, device="cpu")


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
def test_every_output_row_is_a_distribution_over_source_and_prefix(bundle, fusion):
    out = bundle.translate("The cat sleeps on the warm chair.", max_len=6)
    r = trace_rollout(out.trace, fusion)
    Tt, Ts = len(out.tgt_tokens), len(out.src_tokens)
    assert r.source.shape == (Tt, Ts) and r.target.shape == (Tt, Tt) and r.encoder.shape == (Ts, Ts)
    np.testing.assert_allclose(r.encoder.sum(-1), 1.0, atol=1e-9)
    np.testing.assert_allclose(r.source.sum(-1) + r.target.sum(-1), 1.0, atol=1e-9)
    np.testing.assert_allclose(r.per_output().sum(-1), 1.0, atol=1e-9)
    assert (r.source >= 0).all() and np.triu(r.target, 1).max() <= 1e-12  # no flow from later decoder inputs
    # the first decoder position: half its content comes through cross-attention after each of 2 layers
    assert r.target[0, 0] == pytest.approx(0.25)


def test_padding_takes_no_part_and_ssru_is_said(bundle, tmp_path):
    from conftest import build_tiny_checkpoint

    batch = bundle.translate_batch(["Hello.", "The cat sleeps on the warm chair because it is tired."], max_len=4)
    short = batch[0].trace
    r = trace_rollout(short)
    pads = ~short["keep.src"]
    assert pads.any() and (r.source[:, pads] == 0).all() and (r.encoder[:, pads] == 0).all()
    assert not r.notes
    ssru = core.load(build_tiny_checkpoint(tmp_path / "ssru", decoder_self="ssru"), device="cpu")
    rs = trace_rollout(ssru.translate("Hello.", max_len=4).trace)
    assert rs.notes and "SSRU" in rs.notes[0]
    np.testing.assert_allclose(rs.source.sum(-1) + rs.target.sum(-1), 1.0, atol=1e-9)


def test_special_positions_are_whole_angle_bracket_pieces():
    assert special_positions(["▁The", "▁<", "b", ">", "<unk>", "▁cat", ".", "</s>"]) == (4, 7)
    assert special_positions(["▁The", "▁cat"]) == ()


def test_set_aside_removes_columns_and_renormalises_rows():
    m = np.array([[0.2, 0.3, 0.5], [0.0, 0.0, 1.0]])
    np.testing.assert_allclose(set_aside(m, [2]), [[0.4, 0.6], [0.0, 0.0]])  # a row with nothing left stays 0
    np.testing.assert_allclose(set_aside(m, []), m)


def test_concentration_names_a_sink_and_alike_rows():
    sink = np.array([[0.1, 0.1, 0.8], [0.12, 0.08, 0.8], [0.1, 0.1, 0.8]])  # every row: the last column
    c = concentration(sink, (2,))
    assert c.special_share == pytest.approx(0.8) and c.top_column == 2 and c.top_share == pytest.approx(0.8)
    assert c.sink_dominated and c.rows_alike and c.row_spread < 0.05
    words = np.array([[0.9, 0.05, 0.05], [0.05, 0.9, 0.05]])  # each row its own word, little on the special one
    w = concentration(words, (2,))
    assert not w.sink_dominated and w.special_share == pytest.approx(0.05)
    assert not w.rows_alike and w.row_spread == pytest.approx(0.425)
    assert not concentration(sink).sink_dominated  # no special column: no sink to name
    assert concentration(sink, (0,)).special_share == pytest.approx((0.1 + 0.12 + 0.1) / 3)
    with pytest.raises(ValueError, match="non-empty"):
        concentration(np.zeros((0, 3)))


def test_on_a_traced_translation_the_sink_is_measured_on_eos(bundle):
    out = bundle.translate("The cat sleeps on the warm chair.", max_len=6)
    special = special_positions(out.src_tokens)
    assert special == (len(out.src_tokens) - 1,)  # </s> closes the source
    per_output = trace_rollout(out.trace).per_output()
    c = concentration(per_output, special)
    assert c.special_share == pytest.approx(per_output[:, -1].mean())
    words = set_aside(per_output, special)
    assert words.shape == (per_output.shape[0], per_output.shape[1] - 1)
    np.testing.assert_allclose(words.sum(-1), 1.0, atol=1e-9)
