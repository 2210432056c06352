"""Two runs compared head by head (core.analysis.compare): matched pieces, the mean total-variation distance against
a loop written out, what is left unmatched and the kinds without a counterpart."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import build_tiny_checkpoint

import core
from core.analysis.compare import compare, match, shared_maps
from core.analysis.heads import kind_tokens


@pytest.fixture(scope="module")
def bundle(tiny_checkpoint: Path) -> core.Bundle:
    return core.load(tiny_checkpoint)


def brute(a: core.Trace, b: core.Trace, kind: str) -> np.ndarray:
    """The measure with loops: per head, per matched query, TV over the matched keys."""
    (qa, ka), (qb, kb) = kind_tokens(a, kind), kind_tokens(b, kind)
    rows, keys = match(qa, qb), match(ka, kb)
    out = np.zeros((a.n_layers[kind], a.n_heads))
    for layer in range(a.n_layers[kind]):
        ma, mb = a.attention(kind, layer), b.attention(kind, layer)
        for h in range(a.n_heads):
            distances = []
            for i, j in rows:
                p = np.array([ma[h, i, k] for k, _ in keys], dtype=np.float64)
                q = np.array([mb[h, j, m] for _, m in keys], dtype=np.float64)
                distances.append(0.5 * np.abs(p / p.sum() - q / q.sum()).sum())
            out[layer, h] = np.mean(distances)
    return out


def test_match_pairs_equal_pieces_in_order() -> None:
    assert match(["a", "b"], ["a", "b"]) == [(0, 0), (1, 1)]
    assert match(["The", "dog", "bit", "the", "man"], ["The", "man", "bit", "the", "dog"]) == [(0, 0), (2, 2), (3, 3)]
    assert match([], ["x"]) == []


def test_a_run_against_itself_changed_nothing(bundle: core.Bundle) -> None:
    trace = bundle.translate("the cat sleeps").trace
    found = compare(trace, trace)
    assert set(found.kinds) == set(trace.kinds) and not found.only_a and not found.only_b
    for change in found.kinds.values():
        assert change.matched_all and np.all(change.change == 0)


def test_a_switch_on_the_same_decoder_inputs_against_the_loop(bundle: core.Bundle) -> None:
    a = bundle.translate("the cat sleeps on the mat")
    b = bundle.teacher_forced(
        a.source_text, target_ids=a.output_ids, options=core.InferenceOptions(positional_encoding=False)
    )
    found = compare(a.trace, b.trace)
    for kind, change in found.kinds.items():
        assert change.matched_all
        np.testing.assert_allclose(change.change, brute(a.trace, b.trace, kind), atol=1e-9)
        assert np.all(change.change > 0)  # PE off moves every head's attention
    ranked = found.ranked()
    assert ranked[0][3] == max(float(c.change.max()) for c in found.kinds.values())
    assert [r[3] for r in ranked] == sorted((r[3] for r in ranked), reverse=True)


def test_a_minimal_pair_compares_the_shared_pieces_and_names_the_rest(bundle: core.Bundle) -> None:
    a = bundle.translate("the dog sees the cat").trace
    b = bundle.translate("the cat sees the dog").trace
    found = compare(a, b)
    encoder = found.kinds["encoder"]
    assert not encoder.matched_all and encoder.rows < len(a.src_tokens)
    assert encoder.unmatched_queries[0] and encoder.unmatched_keys[1]
    for kind, change in found.kinds.items():
        if change.rows and change.keys:
            np.testing.assert_allclose(change.change, brute(a, b, kind), atol=1e-9)
    # the maps the page draws over the shared pieces: the matched rows and keys of each run's own map
    sub_a, sub_b, queries, keys = shared_maps(a, b, "encoder", 0)
    (qa, ka), (qb, kb) = kind_tokens(a, "encoder"), kind_tokens(b, "encoder")
    rows, cols = match(qa, qb), match(ka, kb)
    assert queries == [qa[i] for i, _ in rows] == [qb[j] for _, j in rows] and keys == [ka[i] for i, _ in cols]
    for h in range(a.n_heads):
        for r, (i, j) in enumerate(rows):
            for c, (k, m) in enumerate(cols):
                assert sub_a[h, r, c] == a.attention("encoder", 0)[h, i, k]
                assert sub_b[h, r, c] == b.attention("encoder", 0)[h, j, m]


def test_a_kind_one_model_lacks_is_named(tiny_checkpoint: Path, tmp_path: Path) -> None:
    ssru = core.load(
        build_tiny_checkpoint(tmp_path / "ssru", seed=0, decoder_self="ssru", pe_layout="concatenated", start="zeros")
    )
    attention = core.load(tiny_checkpoint)
    found = compare(attention.translate("the cat").trace, ssru.translate("the cat").trace)
    assert found.only_a == ("decoder",) and not found.only_b and set(found.kinds) == {"encoder", "cross"}
