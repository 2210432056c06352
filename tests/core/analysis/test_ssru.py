"""Every analysis on a model whose decoder is an SSRU (no decoder self-attention): what applies runs, and says so."""

import numpy as np
import pytest

import core
from core.analysis import head_importance, trace_rollout
from core.analysis.attribution import attribute
from core.analysis.patching import activation_patching


@pytest.fixture(scope="module")
def ssru(tmp_path_factory):
    from conftest import build_tiny_checkpoint

    return core.load(build_tiny_checkpoint(tmp_path_factory.mktemp("ssru") / "m", decoder_self="ssru"), device="cpu")


def test_analyses_run_on_an_ssru_decoder(ssru):
    out = ssru.translate("The cat sleeps on the warm chair.", max_len=5)
    src = [int(i) for i in out.trace["ids.src"]]
    ids = [int(i) for i in out.trace["output.ids"]]
    importance = head_importance(ssru, src, ids)
    assert {e.kind for e in importance.effects} == {"encoder", "cross"}  # no decoder self-attention heads
    corrupt = list(src)
    corrupt[1] = next(i for i in range(4, 100) if i not in src)
    patched = activation_patching(ssru, src, corrupt, ids)
    assert patched.decoder.shape[0] == 2 and np.isfinite(patched.cross_heads).all()
    assert patched.restored(patched.encoder)[0, 1] == pytest.approx(1.0, abs=1e-4)
    a = attribute(ssru, src, ids, 0, steps=8)
    assert np.isfinite(a.source_ig).all() and np.isfinite(a.ig_delta)
    assert trace_rollout(out.trace).notes  # rollout says what it assumes for the SSRU
