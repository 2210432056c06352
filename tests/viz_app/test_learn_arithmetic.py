"""The Learn page's formulas come from the config: no division a model does not do, the bias only where it is
added, RMSNorm and the gated FFN named; a replayed trace's scale is read from its numbers."""

from __future__ import annotations

import numpy as np
from conftest import tiny_config

from viz_app.figures.masking import score_label
from viz_app.learn.arithmetic import Arithmetic, header_note, scale_of_recorded

T5 = dict(d_kv=5, attention_scale=False, norm="pre", norm_kind="rms", positional="relative", linear_bias=False)


def test_formulas_follow_the_config() -> None:
    paper, t5 = Arithmetic.of(tiny_config()), Arithmetic.of(tiny_config(**T5, gated_ffn=True, activation="gelu_new"))
    assert r"\sqrt{d_k}" in paper.attention() and r"\sqrt" not in t5.attention()
    assert "+ B" in t5.attention("encoder") and "+ B" not in t5.attention("cross") and "+ B" not in paper.attention()
    assert "B_{h}" in t5.score("decoder") and "B_{h}" not in t5.score("cross") and r"\sqrt{8}" in paper.score("cross")
    assert t5.projection("q") == r"q = x\, W_Q^{(h)}" and paper.projection("k", matrix=True).endswith("+ b_K^{(h)}")
    assert "RMSNorm" in t5.norm_formula() and "LayerNorm" in paper.norm_formula()
    assert r"\odot x W_{up}" in t5.ffn() and "b_1" not in t5.ffn() and r"\mathrm{ReLU}(x W_1 + b_1)" in paper.ffn()
    assert "PE_i" not in t5.embedding() and "PE_i" in paper.embedding()
    assert header_note(paper) == "" and "No division by √d_k" in header_note(t5) and "B:" in header_note(t5)
    assert t5.residual() == "h + y" and paper.residual() == r"\mathrm{LayerNorm}(h + y)"
    bart = Arithmetic.of(tiny_config(embed_norm=True, scale_embedding=False))
    assert bart.embedding() == r"h_i = \mathrm{LayerNorm}\big(E[\text{token}_i] + PE_i\big)"


def test_a_replayed_scale_is_read_from_the_numbers() -> None:
    rng = np.random.default_rng(0)
    dots, bias, mask = rng.normal(size=6), rng.normal(size=6), np.array([1, 1, 1, 1, 0, 0], bool)
    assert scale_of_recorded(dots, dots / 2.0 + bias, bias, mask, 4) is True
    assert scale_of_recorded(dots, dots + bias, bias, mask, 4) is False
    assert scale_of_recorded(dots, dots * 3.0, 0.0, mask, 4) is None
    assert score_label(False, True) == "1 · scores  q·k (not divided by √d_k) + B"
    assert score_label(True) == "1 · scaled scores  q·k / √d_k" and score_label(None) == "1 · scores"
