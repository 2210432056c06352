"""``core.importers.hf_families.convert(progress=...)``: each real step of an import is reported (one report per
tensor read and checked, with counts; the weights' digest; writing), with fractions that only grow and end at 1.0
once the checkpoint is written; the app's "Open a Hugging Face folder" bar moves between its own steps with them."""

from __future__ import annotations

from pathlib import Path

import pytest
from hf_bart_folders import build_bart_folder
from hf_folders import build_t5_folder
from safetensors import safe_open

from core import load
from core.importers.hf_families import convert
from core.storage.progress import part

pytest.importorskip("transformers", reason="transformers is a test extra: pip install -e '.[test]'")
BUILDERS = {"t5": lambda path: build_t5_folder(path, "1.1", seed=1), "bart": lambda path: build_bart_folder(path)}


@pytest.mark.parametrize("kind", list(BUILDERS))
def test_convert_reports_each_tensor_and_ends_at_one(kind: str, tmp_path: Path) -> None:
    folder = BUILDERS[kind](tmp_path / "hf")
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        n_tensors = len(list(f.keys()))
    seen: list[tuple[float, str]] = []
    out = convert(folder, tmp_path / "ckpt", progress=lambda fraction, text: seen.append((fraction, text)))
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and len(set(fractions)) == len(fractions), seen  # strictly increasing
    assert 0.0 < fractions[0] < 0.1 and fractions[-1] == 1.0, seen
    read = [t for _, t in seen if t.startswith("Read and checked tensor")]
    assert len(read) == n_tensors and read[-1].startswith(f"Read and checked tensor {n_tensors} of {n_tensors}")
    assert any(t.startswith("Digest of model.safetensors") for _, t in seen)
    assert seen[-2][1].startswith("Writing the checkpoint") and seen[-1][1] == "Wrote the checkpoint ckpt."
    assert load(out, device="cpu").config.d_model > 0  # what was reported as written loads


def test_without_a_callback_nothing_is_asked_and_parts_are_checked(tmp_path: Path) -> None:
    assert part(None, 0.2, 0.4) is None
    seen: list[float] = []
    inner = part(lambda f, _: seen.append(f), 0.2, 0.4)
    assert inner is not None
    for f in (-1.0, 0.0, 0.5, 1.0, 2.0):
        inner(f, "")
    assert seen == pytest.approx([0.2, 0.2, 0.3, 0.4, 0.4])
    with pytest.raises(ValueError, match="0 <= start <= end <= 1"):
        part(None, 0.5, 0.4)
