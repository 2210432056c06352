"""A scan's JSON lines as a Parquet table (``python -m core scan --parquet OUT.parquet``): one row per record, one
column per key of the records, in the JSONL's order; list fields as list columns, ``lowest_share_words`` as a list
of (piece, share) structs. Made from the whole JSONL after the scan (resumed lines included), written to a
temporary name and then renamed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import LabError

COLUMNS: dict[str, pa.DataType] = {
    "line": pa.int64(),
    "source": pa.string(),
    "translation": pa.string(),
    "reference": pa.string(),
    "own_translation": pa.bool_(),
    "target_pieces": pa.list_(pa.string()),
    "source_share": pa.float64(),
    "token_source_share": pa.list_(pa.float64()),
    "mean_logprob": pa.float64(),
    "flagged": pa.bool_(),
    "chrf": pa.float64(),
    "invented_words": pa.list_(pa.string()),
    "language_mismatch": pa.bool_(),
    "length_ratio": pa.float64(),
    "lowest_share_words": pa.list_(pa.struct([("piece", pa.string()), ("share", pa.float64())])),
    "model": pa.string(),
    "error": pa.string(),
    "seconds": pa.float64(),
}


def read_records(jsonl: str | Path) -> list[dict[str, Any]]:
    """The records of a scan's JSON lines."""
    with open(jsonl, encoding="utf-8") as f:
        return [json.loads(text) for text in f]


def records_table(records: list[dict[str, Any]]) -> pa.Table:
    """``records`` as a table with a column per key found in any of them (``COLUMNS``' types; missing: null)."""
    keys = [key for key in COLUMNS if any(key in r for r in records)]
    unknown = {key for r in records for key in r} - set(COLUMNS)
    if unknown:
        raise LabError(f"not a scan's records: unknown fields {', '.join(sorted(unknown))}")
    schema = pa.schema([(key, COLUMNS[key]) for key in keys])
    return pa.Table.from_pylist([{key: r.get(key) for key in keys} for r in records], schema=schema)


def write_parquet(jsonl: str | Path, out: str | Path) -> int:
    """The records of the scan output ``jsonl`` written to ``out`` as Parquet; returns the number of rows."""
    table = records_table(read_records(jsonl))
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, out)
    return table.num_rows
