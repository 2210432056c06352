"""Analysis results travel inside the exported trace (NPZ and JSON) and come back out unchanged."""

import numpy as np
import pytest

import core
from core import Trace
from core.analysis import HeadImportance, head_importance
from core.analysis.attribution import Attribution, attribute
from core.analysis.patching import PatchingResult, activation_patching


@pytest.mark.parametrize("suffix", [".npz", ".json"])
def test_importance_patching_and_attribution_round_trip(tiny_checkpoint, tmp_path, suffix):
    bundle = core.load(tiny_checkpoint, device="cpu")
    out = bundle.translate("The cat sleeps on the warm chair.", max_len=5)
    src = [int(i) for i in out.trace["ids.src"]]
    ids = [int(i) for i in out.trace["output.ids"]]
    importance = head_importance(bundle, src, ids)
    corrupt = list(src)
    corrupt[1] = next(i for i in range(4, 100) if i not in src)
    patching = activation_patching(bundle, src, corrupt, ids)
    attribution = attribute(bundle, src, ids, 1, steps=4)
    arrays, meta = {}, {}
    for a, m in (importance.to_arrays(), patching.to_arrays("the corrupted text"), attribution.to_arrays()):
        arrays.update(a)
        meta.update(m)
    trace = out.trace.with_analysis(arrays, meta)
    assert HeadImportance.from_trace(out.trace) is None  # the original is unchanged
    again = Trace.load(trace.save(tmp_path / f"t{suffix}"))
    tol = 0 if suffix == ".npz" else 1e-4
    back = HeadImportance.from_trace(again)
    assert back is not None and [e.label for e in back.ranking()] == [e.label for e in importance.ranking()]
    for a, b in zip(back.ranking(), importance.ranking(), strict=True):
        assert a.delta_logprob == pytest.approx(b.delta_logprob, abs=tol + 1e-9)
        assert (a.output_changed, a.first_change) == (b.output_changed, b.first_change)
    stored = PatchingResult.from_trace(again)
    assert stored is not None and stored[1] == "the corrupted text"
    np.testing.assert_allclose(stored[0].encoder, patching.encoder, atol=tol + 1e-9)
    assert stored[0].changed_positions == patching.changed_positions == (1,)
    a = Attribution.from_trace(again, 1)
    assert a is not None and Attribution.from_trace(again, 0) is None
    np.testing.assert_allclose(a.source_ig, attribution.source_ig, atol=tol + 1e-9)
    assert a.ig_delta == pytest.approx(attribution.ig_delta) and a.baseline == "position"
    with pytest.raises(ValueError, match="analysis"):
        out.trace.with_analysis({"decoder.0.cross.weights": np.zeros(1)}, {})
