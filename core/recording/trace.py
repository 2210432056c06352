"""The frozen, site-keyed record of one call: ``Trace``. Made by ``Recorder.freeze``; saved and loaded as NPZ/JSON.

Every array lives under a site name (``core.sites``), e.g. ``trace["decoder.1.cross.weights"]``; ``trace.keys()`` lists
them. ``attention``, ``scores``, ``mask``, ``positional_encoding`` ... read the same store. Arrays keep the
batch axis; ``trace[...]`` and the helpers return batch element ``item`` (``select`` views another).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..config import InferenceOptions, ModelConfig
from ..sites import (
    ANALYSIS,
    ATTENTION_KINDS,
    ATTENTION_MAPS,
    SIDES,
    AttentionKind,
    Side,
    array_of,
    attention_array,
    attention_site,
    gate_site,
    ids_site,
    is_batched,
    is_site,
    keep_site,
    mask_site,
    migrate_site_name,
    output_site,
    pe_site,
    site_axes,
    spec_of,
    stream_sites,
)

FORMAT = "attention-lab-trace/1"
START_PIECE, PAD_PIECE = "<s>", "<pad>"  # START_PIECE: the decoder's first input when it is no token (zeros)


@dataclass(frozen=True)
class ModelShape:
    """What a trace needs to know about the model that made it."""

    n_heads: int
    d_model: int
    n_encoder_layers: int
    n_decoder_layers: int
    decoder_self: str  # 'attention' or 'ssru'

    @classmethod
    def of(cls, config: ModelConfig) -> ModelShape:
        return cls(
            config.n_heads, config.d_model, config.n_encoder_layers, config.n_decoder_layers, config.decoder_self
        )

    @property
    def kinds(self) -> tuple[AttentionKind, ...]:
        """Attention kinds this model has, in order (an SSRU decoder has no 'decoder' kind)."""
        return tuple(k for k in ATTENTION_KINDS if k != "decoder" or self.decoder_self == "attention")

    @property
    def n_layers(self) -> dict[str, int]:
        """kind -> number of layers."""
        return {k: self.n_encoder_layers if k == "encoder" else self.n_decoder_layers for k in self.kinds}

    def attention_sites(self) -> list[str]:
        return [attention_site(k, layer) for k in self.kinds for layer in range(self.n_layers[k])]

    def stream_sites(self) -> list[str]:
        """Residual-stream sites: 'embed.src', 'encoder.0.out', ..., 'embed.tgt', 'decoder.0.out', ..."""
        return stream_sites(self.n_encoder_layers, self.n_decoder_layers)

    def check_attention_site(self, site: str) -> None:
        if site not in self.attention_sites():
            raise ValueError(f"no attention site {site!r} in this model; sites: {', '.join(self.attention_sites())}")

    def check_ablation(self, ablate: Iterable[tuple[str, int, int]]) -> None:
        """ValueError naming the first (kind, layer, head) this model does not have."""
        for kind, layer, head in sorted(ablate):
            if kind not in self.kinds:
                raise ValueError(
                    f"cannot switch off a {kind} head: this model has no {kind} attention "
                    f"(it has {', '.join(self.kinds)})"
                )
            if layer >= self.n_layers[kind]:
                raise ValueError(
                    f"cannot switch off {kind} layer {layer + 1} head {head + 1}: the model has "
                    f"{self.n_layers[kind]} {kind} layers"
                )
            if head >= self.n_heads:
                raise ValueError(
                    f"cannot switch off {kind} layer {layer + 1} head {head + 1}: the model has "
                    f"{self.n_heads} heads per layer"
                )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Trace:
    """Everything one call recorded, as read-only CPU numpy arrays under site names, plus tokens and options."""

    arrays: Mapping[str, np.ndarray] = field(repr=False)
    vocab: Mapping[int, str] = field(repr=False)  # every id that appears -> its piece
    options: InferenceOptions
    shape: ModelShape
    meta: Mapping[str, Any] = field(default_factory=dict)  # e.g. source_text, text, model, beam_size, notices
    item: int = 0

    # --------------------------------------------------------------- the store
    def keys(self) -> list[str]:
        return sorted(self.arrays)

    def __contains__(self, name: object) -> bool:
        return name in self.arrays

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __getitem__(self, name: str) -> np.ndarray:
        """The array at site ``name`` for batch element ``item`` (positional encodings have no batch axis)."""
        if name not in self.arrays:
            near = [k for k in self.arrays if k.split(".")[0] == name.split(".")[0]][:8]
            raise KeyError(
                f"{name!r} was not recorded"
                + (
                    f"; recorded under {name.split('.')[0]!r}: {near}"
                    if near
                    else f"; recorded: {self.keys()[:12]} ..."
                )
            )
        a = self.arrays[name]
        return a[self.item] if is_batched(name) else a

    @property
    def batch_size(self) -> int:
        """The batch's size, read from the recorded ids (the source's, else the decoder inputs'; 1 when neither)."""
        for side in ("src", "tgt"):
            if ids_site(side) in self.arrays:
                return int(self.arrays[ids_site(side)].shape[0])
        return 1

    def with_analysis(self, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> Trace:
        """A new trace that also holds analysis results (``core.analysis``): arrays named 'analysis.*' and their
        JSON-able details under meta['analysis'], so an export carries them and a replay can show them."""
        bad = [name for name in arrays if not (is_site(name) and spec_of(name) is ANALYSIS)]
        if bad:
            raise ValueError(f"analysis arrays are named 'analysis.*', got {bad}")
        added = {name: np.array(a, copy=True) for name, a in arrays.items()}
        for a in added.values():
            a.flags.writeable = False
        merged_meta = {**dict(self.meta), "analysis": {**dict(self.meta.get("analysis", {})), **dict(meta)}}
        return replace(self, arrays={**self.arrays, **added}, meta=merged_meta)

    def select(self, item: int) -> Trace:
        """The same trace, viewed at batch element ``item``."""
        if not 0 <= item < self.batch_size:
            raise IndexError(f"item {item} out of range for a batch of {self.batch_size}")
        return replace(self, item=item)

    # --------------------------------------------------------------- model shape
    @property
    def kinds(self) -> tuple[AttentionKind, ...]:
        return tuple(k for k in self.shape.kinds if attention_array(k, 0, "weights") in self.arrays)

    @property
    def n_heads(self) -> int:
        return self.shape.n_heads

    @property
    def n_layers(self) -> dict[str, int]:
        return self.shape.n_layers

    # --------------------------------------------------------------- tokens
    def piece(self, token_id: int) -> str:
        return self.vocab.get(int(token_id), f"<{int(token_id)}>")

    @property
    def src_tokens(self) -> list[str]:
        """Source pieces (eos included; ``<pad>`` where a padded batch's item was padded)."""
        keep = self[keep_site("src")] if keep_site("src") in self.arrays else None
        return [self.piece(i) if keep is None or keep[p] else PAD_PIECE for p, i in enumerate(self[ids_site("src")])]

    @property
    def tgt_tokens(self) -> list[str]:
        """Decoder inputs: the start piece, then the output pieces before the last."""
        ids: np.ndarray | list[int] = self[ids_site("tgt")] if ids_site("tgt") in self.arrays else []
        return [self.start_piece if p == 0 else self.piece(i) for p, i in enumerate(ids)]

    @property
    def start_piece(self) -> str:
        """The piece the decoder starts from: the model's start id's (``meta['start_piece']``: T5's and Marian's
        ``<pad>``, BART's ``</s>``, a language code); ``<s>`` where it starts from no token (Bergamot's zero vector)
        or the trace predates the record."""
        return str(self.meta.get("start_piece", START_PIECE))

    @property
    def output_tokens(self) -> list[str]:
        """What the decoder predicted at each step (eos included)."""
        chosen = output_site("ids")
        return [self.piece(i) for i in self[chosen]] if chosen in self.arrays else []

    # --------------------------------------------------------------- convenience views of the store
    def attention(self, kind: AttentionKind, layer: int) -> np.ndarray:
        """Weights after softmax, before dropout: float32 (heads, n_query, n_key)."""
        return self[array_of(self._site(kind, layer), "weights")]

    def scores(self, kind: AttentionKind, layer: int, *, masked: bool = True) -> np.ndarray:
        """Scaled scores QK^T/sqrt(d_k): (heads, n_query, n_key); masked entries -inf
        (``masked=False``: before the mask)."""
        return self[array_of(self._site(kind, layer), "scores" if masked else "scores_raw")]

    def mask(self, kind: AttentionKind, part: str | None = None) -> np.ndarray:
        """The mask applied: bool (n_query, n_key), True = may attend; ``part`` 'padding' or 'causal' for its parts."""
        if kind not in ATTENTION_KINDS:
            raise KeyError(f"kind must be one of {ATTENTION_KINDS}, got {kind!r}")
        return self[mask_site(kind, part)]

    def positional_encoding(self, side: Side) -> np.ndarray:
        """The positional-encoding values added: float32 (n, d_model); zeros when switched off."""
        if side not in SIDES:
            raise KeyError(f"side must be one of {SIDES}, got {side!r}")
        return self[pe_site(side)]

    def gates(self, layer: int) -> np.ndarray:
        """SSRU forget gates of decoder ``layer``: (n_target, d_model). Only for SSRU decoders."""
        return self[gate_site(layer)]

    @property
    def has_gates(self) -> bool:
        return gate_site(0) in self.arrays

    def qkv(self, kind: AttentionKind, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-head queries (H, Tq, dh), keys (H, Tk, dh), values (H, Tk, dh) — when recorded with qkv=True."""
        site = self._site(kind, layer)
        if array_of(site, "q") not in self.arrays:
            raise KeyError(f"q/k/v of {site} were not recorded (use Recorder(model, qkv=True))")
        return self[array_of(site, "q")], self[array_of(site, "k")], self[array_of(site, "v")]

    def step_rows(self, kind: AttentionKind, layer: int) -> np.ndarray | None:
        """(heads, steps, n_key): the row each step computed, when each step recomputed the prefix; else None."""
        name = array_of(self._site(kind, layer), "step_rows")
        return self[name] if name in self.arrays else None

    def _site(self, kind: AttentionKind, layer: int) -> str:
        if kind not in ATTENTION_KINDS:
            raise KeyError(f"kind must be one of {ATTENTION_KINDS}, got {kind!r}")
        site = attention_site(kind, layer)
        if array_of(site, "weights") not in self.arrays:
            raise KeyError(
                f"no {kind} attention recorded for layer {layer} (recorded: {list(self.kinds)}, layers {self.n_layers})"
            )
        return site

    # --------------------------------------------------------------- export / import
    @property
    def nbytes(self) -> int:
        # raw scores share the masked scores' array when nothing is masked: count it once
        unique = {id(a): a for a in self.arrays.values()}
        return sum(a.nbytes for a in unique.values())

    def metadata(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "options": self.options.to_dict(),
            "shape": self.shape.to_dict(),
            "vocab": {str(k): v for k, v in self.vocab.items()},
            "meta": dict(self.meta),
        }

    def to_json(self, decimals: int = 4) -> str:
        """JSON text: metadata plus every array as nested lists (-inf written as null)."""
        data: dict[str, Any] = self.metadata()
        arrays: dict[str, Any] = {}
        for name, a in self.arrays.items():
            if a.dtype == np.bool_ or np.issubdtype(a.dtype, np.integer):
                arrays[name] = {"dtype": str(a.dtype), "data": a.tolist()}
            else:
                r = np.round(a.astype(np.float64), decimals)
                finite = np.isfinite(r)
                if finite.all():
                    values = r.tolist()
                else:
                    with_null = r.astype(object)
                    with_null[~finite] = None  # -inf -> null
                    values = with_null.tolist()
                arrays[name] = {"dtype": "float32", "data": values}
        data["arrays"] = arrays
        return json.dumps(data, allow_nan=False, ensure_ascii=False)

    def to_npz(self) -> bytes:
        """An .npz archive: every array under its site name, plus 'metadata' as a JSON string."""
        buffer = io.BytesIO()
        # values typed Any: mypy matches a ** mapping against savez's allow_pickle too (no site has that name)
        arrays: dict[str, Any] = {"metadata": np.array(json.dumps(self.metadata())), **self.arrays}
        np.savez_compressed(buffer, **arrays)
        return buffer.getvalue()

    def save(self, path: str | Path) -> Path:
        """Write ``path`` as .npz (exact) or .json (rounded), by its suffix."""
        path = Path(path)
        if path.suffix == ".json":
            path.write_text(self.to_json(), encoding="utf-8")
        elif path.suffix == ".npz":
            path.write_bytes(self.to_npz())
        else:
            raise ValueError(f"{path.name}: a trace is saved as .npz or .json")
        return path

    @classmethod
    def load(cls, source: str | Path | bytes) -> Trace:
        """Read a trace written by ``save`` / ``to_npz`` / ``to_json`` (a path, or the file's bytes).

        Raises ValueError naming what is wrong with a file that is not such a trace. Never unpickles. Array names
        written before today's site grammar ('cross.1.weights') are renamed on load (``sites.migrate_site_name``)."""
        if isinstance(source, (str, Path)):
            try:
                data = Path(source).read_bytes()
            except OSError as e:
                raise ValueError(f"cannot read the trace file: {e.strerror}") from None
        else:
            data = bytes(source)
        if not data.strip():
            raise ValueError("the file is empty")
        if data[:2] == b"PK":
            try:
                _check_archive(data)
                with np.load(io.BytesIO(data), allow_pickle=False) as npz:
                    metadata = json.loads(str(npz["metadata"]))
                    arrays = {name: npz[name] for name in npz.files if name != "metadata"}
            except (zipfile.BadZipFile, KeyError, ValueError, OSError) as e:
                raise ValueError(f"not a trace archive (.npz): {e}") from None
        else:
            try:
                decoded = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"it is neither an .npz archive nor JSON text (byte {data[e.start]:#04x} at {e.start} is not UTF-8)"
                ) from None
            try:
                parsed = json.loads(decoded)
                metadata = parsed
                arrays = {}
                for name, entry in parsed["arrays"].items():
                    dtype = np.dtype(entry["dtype"])
                    values = entry["data"]
                    if dtype == np.float32:
                        arrays[name] = np.array(_nulls_to_inf(values), dtype=np.float32)
                    else:
                        arrays[name] = np.array(values, dtype=dtype)
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                raise ValueError(f"not a trace (.json): {e}") from None
            except RecursionError:
                raise ValueError("not a trace (.json): its lists are nested too deeply") from None
        return cls._from_parts(metadata, arrays)

    @classmethod
    def _from_parts(cls, metadata: dict[str, Any], arrays: dict[str, np.ndarray]) -> Trace:
        if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
            raise ValueError(
                f"not a trace of this format (expected {FORMAT!r}, got "
                f"{metadata.get('format') if isinstance(metadata, dict) else type(metadata).__name__!r})"
            )
        try:
            options = InferenceOptions.from_dict(metadata["options"])
            shape = ModelShape(**metadata["shape"])
            vocab = {int(k): str(v) for k, v in metadata["vocab"].items()}
            meta = dict(metadata.get("meta") or {})
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"the trace's metadata is incomplete or wrong: {e}") from None
        _check_shape(shape)
        arrays = {migrate_site_name(name): a for name, a in arrays.items()}
        _check_options(shape, metadata["options"], options)
        _check_arrays(shape, arrays)
        _check_meta(meta)
        for a in arrays.values():
            a.flags.writeable = False
        return cls(arrays=arrays, vocab=vocab, options=options, shape=shape, meta=meta)


MAX_ARCHIVE_BYTES = 1 << 30  # what an .npz may unpack to: a 256-piece trace with q/k/v of the models here is ~70 MB


def _check_archive(data: bytes) -> None:
    """Before numpy reads it: a zip archive whose members unpack to at most MAX_ARCHIVE_BYTES (a small file can
    declare gigabytes of zeros). The sizes are the ones the zip reader stops at, so the check holds."""
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise ValueError("the file starts like a zip archive but is not one (cut short or damaged?)")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        unpacked = sum(info.file_size for info in archive.infolist())
    if unpacked > MAX_ARCHIVE_BYTES:
        raise ValueError(
            f"it unpacks to {unpacked / 2**30:.1f} GiB; a trace is at most {MAX_ARCHIVE_BYTES / 2**30:.0f} GiB"
        )


_META_TYPES = {
    "model": str,
    "source_text": str,
    "text": str,
    "beam_size": int,
    "forced_prefix": int,
    "notices": list,
    "max_len": int,
    "generation_rules": dict,
}


def _check_shape(shape: ModelShape) -> None:
    for name in ("n_heads", "d_model", "n_encoder_layers", "n_decoder_layers"):
        value = getattr(shape, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"the trace's model shape is wrong: {name} is {value!r} (a whole number >= 1)")
    if shape.decoder_self not in ("attention", "ssru"):
        raise ValueError(f"the trace's model shape is wrong: decoder_self is {shape.decoder_self!r}")


def _check_options(shape: ModelShape, stored: dict[str, Any], options: InferenceOptions) -> None:
    """The switches as written: true/false values (``bool("false")`` is True), heads the model has."""
    for name, value in stored.items():
        if name != "ablate" and not isinstance(value, bool):
            raise ValueError(f"the trace's option {name!r} is {value!r:.40}, not true or false")
    try:
        shape.check_ablation(options.ablate)
    except (TypeError, ValueError) as e:
        raise ValueError(f"the trace's switched-off heads are wrong: {e}") from None


def _check_arrays(shape: ModelShape, arrays: Mapping[str, np.ndarray]) -> None:
    """ValueError naming the first array that a recording of ``shape`` could not have made (a hand-edited or
    damaged file): numbers only, the batch and head axes, every layer of each attention kind present, each site's
    axes as its registry entry names them (``sites.site_axes``)."""
    for name, a in arrays.items():
        if a.dtype.kind not in "biuf":
            raise ValueError(f"array {name!r} holds {a.dtype} values, not numbers")
    src, tgt = ids_site("src"), ids_site("tgt")
    ids = arrays.get(src)
    if ids is None:
        raise ValueError(f"the trace holds no source ids ({src!r})")
    if ids.ndim != 2 or ids.dtype.kind not in "iu" or 0 in ids.shape:
        raise ValueError(f"{src!r} must be whole numbers shaped (batch, source length), got {ids.dtype} {ids.shape}")
    batch, n_src = ids.shape
    n_tgt = arrays[tgt].shape[-1] if tgt in arrays else None
    for name, a in arrays.items():
        if is_batched(name) and (a.ndim < 1 or a.shape[0] != batch):
            raise ValueError(f"array {name!r} has shape {a.shape}; its first axis should be the batch of {batch}")
    for kind in shape.kinds:
        layers = range(shape.n_layers[kind])
        recorded = [layer for layer in layers if attention_array(kind, layer, "weights") in arrays]
        if recorded and len(recorded) != shape.n_layers[kind]:
            missing = sorted(set(range(shape.n_layers[kind])) - set(recorded))
            raise ValueError(f"{kind} attention of layer {missing[0] + 1} is missing ({shape.n_layers[kind]} layers)")
        if recorded and kind != "encoder" and n_tgt is None:
            raise ValueError(f"the trace has {kind} attention but no target ids ({tgt!r})")
        n_query = n_src if kind == "encoder" else n_tgt
        n_key = n_src if kind != "decoder" else n_tgt
        for layer in recorded:
            for part in ATTENTION_MAPS:
                name = attention_array(kind, layer, part)
                got = arrays[name].shape if name in arrays else None
                if got is not None and got != (batch, shape.n_heads, n_query, n_key):
                    raise ValueError(
                        f"array {name!r} has shape {got}, not (batch {batch}, {shape.n_heads} heads, "
                        f"{n_query} queries, {n_key} keys)"
                    )
    sizes = {"B": batch, "Ts": n_src, "Tt": n_tgt, "H": shape.n_heads, "D": shape.d_model}
    named = {"B": "batch", "Ts": "source length", "Tt": "target length", "H": "heads", "D": "d_model"}
    for name, a in arrays.items():
        want = site_axes(name) if is_site(name) else ()
        if want and (
            a.ndim != len(want) or any(d in sizes and sizes[d] != n for d, n in zip(want, a.shape, strict=True))
        ):
            axes = ", ".join(f"{named[d]} {sizes[d]}" if d in sizes else "any" for d in want)
            raise ValueError(f"array {name!r} has shape {a.shape}, not ({axes})")


def _check_meta(meta: Mapping[str, Any]) -> None:
    for key, kind in _META_TYPES.items():
        value = meta.get(key)
        if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
            raise ValueError(f"the trace's meta[{key!r}] is {type(value).__name__} {value!r:.40}, not {kind.__name__}")
    if meta.get("beam_size", 1) < 1 or meta.get("forced_prefix", 0) < 0:
        raise ValueError("the trace's beam_size is below 1 or its forced_prefix negative")
    if not all(isinstance(n, str) for n in meta.get("notices") or []):
        raise ValueError("the trace's notices are not all text")


def _nulls_to_inf(values: Any) -> Any:
    if isinstance(values, list):
        return [_nulls_to_inf(v) for v in values]
    return float("-inf") if values is None else values
