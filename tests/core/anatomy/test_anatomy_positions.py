"""The position signal read from the weights: the relative bias per distance equals what the model adds to its
scores, the bucket map equals the model's own, and the absolute rows are read from the row offset on, per side."""

from __future__ import annotations

import numpy as np
import torch
from conftest import tiny_config

from core import InferenceOptions, Transformer
from core.anatomy.positions import position_rows, relative_bias
from core.recording.call import Call


def _t5_like() -> Transformer:
    torch.manual_seed(0)
    model = Transformer(tiny_config(positional="relative", relative_buckets=8, relative_max_distance=12)).eval()
    with torch.no_grad():
        for module in (model.encoder_bias, model.decoder_bias):
            assert module is not None
            module.embedding.weight.normal_(0.0, 1.0)  # every bucket a different value
    return model


def test_the_bias_per_distance_is_what_the_model_adds() -> None:
    model, n = _t5_like(), 30
    for stack, side in (("encoder", "src"), ("decoder", "tgt")):
        found = relative_bias(model, stack, span=n)
        assert found is not None
        added = model.position_bias(side, (n, n), Call())[0].detach().double().numpy()  # (H, Tq, Tk)
        by_distance = dict(zip(found.distances.tolist(), found.values.T, strict=True))
        for i in range(n):
            for j in range(n):
                if j - i in by_distance:
                    np.testing.assert_allclose(added[:, i, j], by_distance[j - i], atol=1e-7)
        module = model.encoder_bias if stack == "encoder" else model.decoder_bias
        assert module is not None
        np.testing.assert_array_equal(found.bucket_map(n), module.buckets(n, n).numpy())
    encoder, decoder = relative_bias(model, "encoder", 5), relative_bias(model, "decoder", 5)
    assert encoder is not None and decoder is not None
    assert encoder.distances.tolist() == list(range(-5, 6)) and decoder.distances.tolist() == list(range(-5, 1))
    assert (encoder.exact, decoder.exact) == (2, 4)  # 8 buckets: 4 per direction, half exact; causal: 8, half exact


def test_bias_switched_off_is_not_what_the_table_shows() -> None:
    """The table is the model's; switching positions off removes the bias from the run, not from the table."""
    model = _t5_like()
    off = Call(options=InferenceOptions(positional_encoding=False))
    assert model.position_bias("src", (4, 4), off) is None
    found = relative_bias(model, "encoder", 4)
    assert found is not None and np.abs(found.values).max() > 0


def test_a_model_without_relative_bias_has_none() -> None:
    assert relative_bias(Transformer(tiny_config()), "encoder", 4) is None


def test_absolute_rows_start_at_the_offset_and_per_side() -> None:
    torch.manual_seed(1)
    model = Transformer(
        tiny_config(positional="learned", max_positions=20, position_offset=2, separate_positions=True)
    ).eval()
    assert model.tgt_positions is not None
    rows = position_rows(model, "tgt", 50)  # more than the table has: all of it
    np.testing.assert_allclose(rows, model.tgt_positions.embedding.weight[2:22].double().detach().numpy())
    assert not np.allclose(position_rows(model, "src", 5), rows[:5])  # the source's own table
    assert not position_rows(_t5_like(), "src", 6).any()  # T5 adds no position rows
