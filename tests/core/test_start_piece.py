"""The decoder's first input is labelled with the piece of the id the model starts from (``Trace.start_piece``):
T5's ``<pad>`` (decoder_start_token_id = pad), BART's ``</s>``; ``<s>`` only where the model starts from no token
(Marian C++ / Bergamot's zero vector). It travels with a saved trace."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import tiny_config
from hf_bart_folders import build_bart_folder
from hf_folders import build_t5_folder

import core
from core import Recorder, Trace, Transformer
from core.cli import main
from core.recording.call import Call

pytest.importorskip("transformers", reason="transformers is a test extra: pip install -e '.[test]'")
BUILDERS = {"t5": lambda path: build_t5_folder(path, "1.1", seed=1), "bart": lambda path: build_bart_folder(path)}
STARTS = {"t5": "<pad>", "bart": "</s>"}  # each family's decoder_start_token_id, as its tokenizer writes it


@pytest.mark.parametrize("kind", list(BUILDERS))
def test_an_imported_model_starts_from_its_own_piece(kind: str, tmp_path: Path) -> None:
    folder = BUILDERS[kind](tmp_path / "hf")
    assert main(["import-hf", str(folder), "--out", str(tmp_path / "ckpt")]) == 0
    bundle = core.load(tmp_path / "ckpt", device="cpu")
    assert bundle.tokenizer.piece(bundle.config.bos_id) == STARTS[kind]
    out = bundle.translate("The cat sleeps.", record=core.Record(qkv=False), max_len=4)
    assert out.tgt_tokens[0] == STARTS[kind] and out.trace.start_piece == STARTS[kind]
    forced = bundle.teacher_forced("The cat sleeps.", target_ids=out.output_ids, record=core.Record(qkv=False))
    assert forced.tgt_tokens == out.tgt_tokens
    back = Trace.load(out.trace.to_json().encode("utf-8"))
    assert back.tgt_tokens[0] == STARTS[kind]


def test_a_zero_vector_start_is_no_piece_and_shows_as_s() -> None:
    for start, first in (("zeros", "<s>"), ("bos", "p1")):
        model = Transformer(tiny_config(start=start, bos_id=1)).eval()
        recorder = Recorder(model)
        with torch.no_grad():
            model(torch.tensor([[5, 6, 2]]), torch.tensor([[1, 7]]), call=Call(recorder=recorder))
        trace = recorder.freeze(lambda i: f"p{i}")
        assert trace.tgt_tokens == [first, "p7"], start
