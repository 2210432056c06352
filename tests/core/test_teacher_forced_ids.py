"""Re-running a model's own output goes by its ids (``Bundle.teacher_forced(..., target_ids=...)``), not its text: a
byte-level BPE model with random weights (an imported tiny BART, 64 learned positions) writes invalid UTF-8, whose
text tokenizes back to other, more pieces. Forcing the translation's own ids reproduces every step; decoding (greedy
and beam) and a text target stay within the learned position table."""

from __future__ import annotations

import numpy as np
import pytest
from hf_bart_folders import ENGLISH, build_bart_folder

import core
from core import InputError
from core.cli import main

pytest.importorskip("transformers", reason="transformers is a test extra: pip install -e '.[test]'")
LONG = " ".join(ENGLISH[:6])  # a source long enough that 2 x its length + 10 passes the table's 64 rows


@pytest.fixture(scope="module")
def bart(tmp_path_factory: pytest.TempPathFactory) -> core.Bundle:
    root = tmp_path_factory.mktemp("bart_ids")
    folder = build_bart_folder(root / "hf", seed=2)
    assert main(["import-hf", str(folder), "--out", str(root / "ckpt")]) == 0
    return core.load(root / "ckpt", device="cpu")


def _texts_that_do_not_round_trip(bart: core.Bundle) -> list[core.Translation]:
    outs = [bart.translate(text, record=core.Record(qkv=False)) for text in ENGLISH[:4]]
    broken = [out for out in outs if bart.encode_target(out.text) != list(out.output_ids)]
    assert broken, "every output's text tokenized back to its ids: the test needs one that does not"
    return broken


def test_forcing_a_translations_own_ids_reproduces_its_steps(bart: core.Bundle) -> None:
    assert bart.config.positional == "learned" and bart.config.max_positions == 64
    for out in _texts_that_do_not_round_trip(bart):
        forced = bart.teacher_forced(out.source_text, target_ids=out.output_ids, record=core.Record(qkv=False))
        assert forced.output_ids == out.output_ids
        assert forced.tgt_tokens == out.tgt_tokens
        np.testing.assert_allclose(  # one pass vs step by step with a KV cache: float32 rounding only
            np.log(forced.trace["output.probs"]), np.log(out.trace["output.probs"]), rtol=0, atol=1e-4
        )
        np.testing.assert_array_equal(forced.trace["output.top_ids"], out.trace["output.top_ids"])
        # its text is other pieces: forcing it scores a different output (within the table, no error)
        by_text = bart.teacher_forced(out.source_text, out.text, record=core.Record(qkv=False))
        assert by_text.output_ids != out.output_ids and len(by_text.output_ids) <= 64


def test_switches_compare_on_the_same_ids(bart: core.Bundle) -> None:
    out = _texts_that_do_not_round_trip(bart)[0]
    off = core.InferenceOptions(positional_encoding=False)
    switched = bart.teacher_forced(out.source_text, None, off, target_ids=out.output_ids, record=core.Record(qkv=False))
    assert switched.output_ids == out.output_ids and switched.options == off
    assert not np.allclose(switched.trace["output.probs"], out.trace["output.probs"])  # positions mattered


def test_decoding_stays_within_the_learned_table(bart: core.Bundle) -> None:
    src_len = len(bart.encode_source(LONG, truncate=True)[0])
    assert core.decoding.search.default_max_len(src_len) > 64  # without the cap the 65th step would need row 64
    for beam in (1, 2):
        out = bart.translate(LONG, beam_size=beam, truncate=True, record=core.Record(qkv=False))
        assert 0 < len(out.output_ids) <= 64
    tree = bart.beam_tree(LONG, beam_size=2, truncate=True)
    assert len(tree.steps) <= 64


@pytest.mark.parametrize(
    ("tgt_text", "target_ids", "said"),
    [
        (None, None, "either tgt_text or target_ids"),
        ("Hallo", [5, 2], "not both"),
        (None, [], "target_ids is empty"),
        (None, "5 2", "must be a list"),
        (None, [5, -1], "whole numbers from 0"),
        (None, [5, 10**6], "whole numbers from 0"),
        (None, [5] * 65, "at most 64 output positions"),
    ],
)
def test_bad_targets_are_refused_by_name(bart: core.Bundle, tgt_text: object, target_ids: object, said: str) -> None:
    with pytest.raises(InputError, match=said):
        bart.teacher_forced("Hello.", tgt_text, target_ids=target_ids)  # type: ignore[arg-type]
