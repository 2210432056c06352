"""Reader/writer for Marian's binary model format (``*.bin``), as used by Bergamot.

Layout (little endian), as written by Marian's ``io::binary::saveItems``::

    uint64 version (== 1)
    uint64 count
    count x Header{uint64 name_len, uint64 type, uint64 shape_len, uint64 data_len}
    names   : count NUL-terminated strings (name_len includes the NUL)
    shapes  : count x shape_len int32
    uint64 pad, then `pad` zero bytes (data starts on a 256-byte boundary)
    data    : count blobs of data_len bytes each (Marian pads every blob to 256 bytes)

Supported item types: 0x404 float32, 0x402 float16, 0x101 int8 (used for the
``special:model.yml`` text item), 0x4101 / 0x4102 intgemm8 / intgemm16.  An
intgemm item holds an integer matrix followed by one float32 quantisation
multiplier ``m``; the float value is ``q * (1/m)``.  Except for ``Wemb`` the
integer matrix is stored *transposed* (``[cols, rows]`` row-major) while the
header keeps Marian's ``[rows, cols]`` shape; ``Wemb`` is stored untransposed
(this mirrors ``prepareAndTransposeB`` / ``unquantizeWemb`` in Marian).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError

BINARY_FILE_VERSION = 1
TYPE_INT8 = 0x101
TYPE_FLOAT16 = 0x402
TYPE_FLOAT32 = 0x404
TYPE_INTGEMM8 = 0x4101
TYPE_INTGEMM16 = 0x4102
_ALIGN = 256
_HEADER = struct.Struct("<4Q")
_INT_TYPES: dict[int, np.dtype] = {TYPE_INTGEMM8: np.dtype("<i1"), TYPE_INTGEMM16: np.dtype("<i2")}
_PLAIN_TYPES: dict[int, np.dtype] = {
    TYPE_FLOAT32: np.dtype("<f4"),
    TYPE_FLOAT16: np.dtype("<f2"),
    TYPE_INT8: np.dtype("<i1"),
}
YML_ITEM = "special:model.yml"


class MarianFormatError(CheckpointError, ValueError):
    """A Marian ``.bin`` file is truncated, corrupt or uses an unsupported type."""


@dataclass(frozen=True)
class MarianWeights:
    """Contents of a Marian ``.bin`` file.

    ``tensors`` maps parameter names to float32 arrays in Marian's orientation
    (a layer computes ``x @ W + b``; ``W`` has shape ``[in, out]``).  ``types``
    records the on-disk type code of every tensor; ``model_yml`` is the raw text
    of ``special:model.yml`` and ``config`` its parsed form.
    """

    tensors: dict[str, np.ndarray]
    model_yml: str
    config: dict[str, Any]
    types: dict[str, int] = field(default_factory=dict)


def _scalar(text: str) -> Any:
    text = text.strip()
    if text in ("", "~", "null"):
        return None
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    if text == "[]":
        return []
    if text.startswith("[") and text.endswith("]"):
        return [_scalar(x) for x in text[1:-1].split(",")]
    if text in ("true", "false"):
        return text == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_simple_yml(text: str) -> dict[str, Any]:
    """Parse the flat ``key: value`` / ``key:`` + ``  - item`` YAML Marian writes."""
    out: dict[str, Any] = {}
    last: str | None = None
    for raw in text.splitlines():
        line = raw.split(" #")[0].rstrip() if " #" in raw else raw.rstrip()
        if not line.strip() or line.strip() == "---":
            continue
        stripped = line.strip()
        if stripped.startswith("- ") or stripped == "-":
            if last is None:
                raise ValueError(f"list item without a key: {raw!r}")
            if not isinstance(out[last], list):
                out[last] = []
            out[last].append(_scalar(stripped[1:]))
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"cannot parse yml line: {raw!r}")
        last = key.strip()
        out[last] = _scalar(value) if value.strip() else []
    return out


def _decode(name: str, typ: int, shape: tuple[int, ...], blob: memoryview, path: Path) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if typ in _INT_TYPES:
        dt = _INT_TYPES[typ]
        need = n * dt.itemsize + 4
        if len(blob) < need:
            raise MarianFormatError(f"{path}: item {name!r} has {len(blob)} data bytes, needs {need}")
        q = np.frombuffer(blob, dtype=dt, count=n)
        mult = np.frombuffer(blob, dtype="<f4", count=1, offset=n * dt.itemsize)[0]
        if not np.isfinite(mult) or mult == 0:
            raise MarianFormatError(f"{path}: item {name!r} has invalid quantisation multiplier {mult}")
        x = q.astype(np.float32) * np.float32(1.0 / mult)
        if "Wemb" in name or len(shape) < 2:
            return x.reshape(shape)
        cols = shape[-1]
        return np.ascontiguousarray(x.reshape(cols, n // cols).T).reshape(shape)
    if typ in _PLAIN_TYPES:
        dt = _PLAIN_TYPES[typ]
        if len(blob) < n * dt.itemsize:
            raise MarianFormatError(f"{path}: item {name!r} has {len(blob)} data bytes, needs {n * dt.itemsize}")
        return np.frombuffer(blob, dtype=dt, count=n).astype(np.float32).reshape(shape)
    raise MarianFormatError(f"{path}: item {name!r} has unsupported type 0x{typ:x}")


def read_marian_bin(path: str | Path) -> MarianWeights:
    """Read a Marian binary model; see the module docstring for the layout."""
    path = Path(path)
    buf = memoryview(path.read_bytes())
    pos = 0

    def take(nbytes: int, what: str) -> memoryview:
        nonlocal pos
        if nbytes < 0 or pos + nbytes > len(buf):
            raise MarianFormatError(
                f"{path}: truncated or corrupt file while reading {what} "
                f"(need {nbytes} bytes at offset {pos}, file has {len(buf)})"
            )
        pos += nbytes
        return buf[pos - nbytes : pos]

    version, count = struct.unpack("<2Q", take(16, "file header"))
    if version != BINARY_FILE_VERSION:
        raise MarianFormatError(
            f"{path}: not a Marian binary model (version {version}, expected {BINARY_FILE_VERSION})"
        )
    if count > len(buf) // _HEADER.size:
        raise MarianFormatError(f"{path}: implausible item count {count}")
    headers = [_HEADER.unpack(take(_HEADER.size, f"header {i}")) for i in range(count)]
    names = []
    for i, (name_len, *_rest) in enumerate(headers):
        raw = bytes(take(name_len, f"name {i}"))
        if not raw.endswith(b"\0"):
            raise MarianFormatError(f"{path}: name {i} is not NUL-terminated")
        try:
            names.append(raw[:-1].decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise MarianFormatError(f"{path}: name {i} is not valid UTF-8") from exc
    shapes = [
        tuple(int(d) for d in np.frombuffer(take(4 * h[2], f"shape of {names[i]!r}"), dtype="<i4"))
        for i, h in enumerate(headers)
    ]
    (pad,) = struct.unpack("<Q", take(8, "padding length"))
    take(pad, "alignment padding")

    tensors: dict[str, np.ndarray] = {}
    types: dict[str, int] = {}
    model_yml = ""
    for name, (_, typ, _, data_len), shape in zip(names, headers, shapes, strict=True):
        if any(d < 0 for d in shape):
            raise MarianFormatError(f"{path}: item {name!r} has negative shape {shape}")
        blob = take(data_len, f"data of {name!r}")
        if name.startswith("special:"):
            if name == YML_ITEM:
                try:
                    model_yml = bytes(blob[: int(np.prod(shape))]).rstrip(b"\0").decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise MarianFormatError(f"{path}: {YML_ITEM} is not valid UTF-8") from exc
            continue
        tensors[name] = _decode(name, typ, shape, blob, path)
        types[name] = typ
    try:
        config = parse_simple_yml(model_yml) if model_yml else {}
    except ValueError as exc:
        raise MarianFormatError(f"{path}: cannot parse {YML_ITEM}: {exc}") from exc
    return MarianWeights(tensors=tensors, model_yml=model_yml, config=config, types=types)


def _pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % _ALIGN)


def write_marian_bin(
    path: str | Path,
    tensors: Mapping[str, np.ndarray],
    model_yml: str,
    int8: Mapping[str, tuple[np.ndarray, float]] | None = None,
) -> None:
    """Write a Marian binary model.

    ``tensors`` are stored as float32 (0x404).  ``int8`` maps names to
    ``(q, multiplier)`` with ``q`` an int8 array in Marian orientation; these are
    stored as intgemm8 (0x4101): transposed on disk unless the name contains
    ``Wemb``, followed by the float32 multiplier, so that reading gives
    ``q / multiplier``.  ``model_yml`` becomes the ``special:model.yml`` item.
    """
    items: list[tuple[str, int, tuple[int, ...], bytes]] = []
    for name, arr in tensors.items():
        a = np.asarray(arr, dtype="<f4")
        items.append((name, TYPE_FLOAT32, a.shape, a.tobytes()))
    for name, (q, mult) in (int8 or {}).items():
        q = np.asarray(q)
        if q.dtype != np.int8:
            raise ValueError(f"int8 tensor {name!r} must have dtype int8, got {q.dtype}")
        if "Wemb" in name or q.ndim < 2:
            disk = q
        else:
            disk = q.reshape(-1, q.shape[-1]).T
        items.append((name, TYPE_INTGEMM8, q.shape, np.ascontiguousarray(disk).tobytes() + struct.pack("<f", mult)))
    text = model_yml.encode("utf-8") + b"\0"
    items.append((YML_ITEM, TYPE_INT8, (len(text),), text))
    if len({it[0] for it in items}) != len(items):
        raise ValueError("duplicate tensor names")

    out = bytearray(struct.pack("<2Q", BINARY_FILE_VERSION, len(items)))
    blobs = [_pad(data) for *_, data in items]
    for (name, typ, shape, _), blob in zip(items, blobs, strict=True):
        out += _HEADER.pack(len(name.encode("utf-8")) + 1, typ, len(shape), len(blob))
    for name, *_ in items:
        out += name.encode("utf-8") + b"\0"
    for _, _, shape, _ in items:
        out += np.asarray(shape, dtype="<i4").tobytes()
    pad = -(len(out) + 8) % _ALIGN
    out += struct.pack("<Q", pad) + b"\0" * pad
    for blob in blobs:
        out += blob
    Path(path).write_bytes(bytes(out))
