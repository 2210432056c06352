"""A scan's records as the Corpus page's table, its filters and its downloads (CSV, Parquet, the JSON lines):
pure functions of the records, no Streamlit."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

import pandas as pd
import pyarrow.parquet as pq

from core.analysis.scan_parquet import COLUMNS, records_table
from viz_app.figures.style import token_text

OPTIONAL = ("chrF", "reference", "problem")  # columns left out when no row has a value in them
# what the "Show" filter keeps: its label -> the test on a record
FILTERS = {
    "every line": lambda r: True,
    "flagged": lambda r: bool(r.get("flagged")),
    "in the wrong language": lambda r: bool(r.get("language_mismatch")),
    "with invented words": lambda r: bool(r.get("invented_words")),
    "not scored": lambda r: "error" in r,
}


def open_link(record: dict[str, Any], checkpoint: str) -> str:
    """The lab's link that opens this row's source on the overview with the checkpoint (the link carries it)."""
    return "/?" + urlencode({"page": "overview", "ckpt": checkpoint, "text": record.get("source") or ""})


def rows(records: Sequence[dict[str, Any]], checkpoint: str) -> pd.DataFrame:
    """One row per record, in line order: the numbers first, then the texts and the link."""

    def words(value: Any) -> str | None:
        return None if value is None else ", ".join(value)

    def lowest(value: Any) -> str | None:
        return None if value is None else ", ".join(f"{token_text(w['piece'])} {w['share']:.2f}" for w in value)

    frame = pd.DataFrame(
        {
            "line": [r["line"] for r in records],
            "flagged": [r.get("flagged") for r in records],
            "source share": [r.get("source_share") for r in records],
            "source": [r.get("source") for r in records],
            "translation": [r.get("translation") for r in records],
            "mean log p": [r.get("mean_logprob") for r in records],
            "chrF": [r.get("chrf") for r in records],
            "wrong language": [r.get("language_mismatch") for r in records],
            "invented words": [words(r.get("invented_words")) for r in records],
            "length ratio": [r.get("length_ratio") for r in records],
            "lowest-share pieces": [lowest(r.get("lowest_share_words")) for r in records],
            "reference": [r.get("reference") for r in records],
            "problem": [r.get("error") for r in records],
            "open": [open_link(r, checkpoint) for r in records],
        }
    )
    empty = [c for c in OPTIONAL if frame[c].isna().all()]  # no reference, no problem: no column for them
    return frame.drop(columns=empty)


def kept(records: Sequence[dict[str, Any]], show: str, contains: str) -> list[dict[str, Any]]:
    """The records the filters keep: ``show`` a key of ``FILTERS``, ``contains`` text looked for (case ignored) in
    the source, the translation and the reference."""
    test = FILTERS[show]
    needle = contains.strip().casefold()

    def has(r: dict[str, Any]) -> bool:
        return any(needle in str(r.get(k) or "").casefold() for k in ("source", "translation", "reference"))

    return [r for r in records if test(r) and (not needle or has(r))]


def jsonl_bytes(records: Sequence[dict[str, Any]]) -> bytes:
    """The records as ``python -m core scan`` writes them: one JSON object a line."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def parquet_bytes(records: Sequence[dict[str, Any]]) -> bytes:
    """The records as ``python -m core scan --parquet`` writes them."""
    buffer = io.BytesIO()
    pq.write_table(records_table(list(records)), buffer)
    return buffer.getvalue()


def csv_bytes(records: Sequence[dict[str, Any]]) -> bytes:
    """The records as CSV, a column per field (``scan_parquet.COLUMNS``' order); list fields as JSON text."""
    keys = [key for key in COLUMNS if any(key in r for r in records)]

    def cell(value: Any) -> Any:
        return json.dumps(value, ensure_ascii=False) if isinstance(value, list | dict) else value

    frame = pd.DataFrame([[cell(r.get(key)) for key in keys] for r in records], columns=keys)
    return frame.to_csv(index=False).encode("utf-8")
