"""The Corpus page's table, filters and downloads (viz_app/corpus/table.py) and its figures
(viz_app/figures/corpus.py), on the records of a real scan of the tiny checkpoint."""

from __future__ import annotations

import io
import json
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import core
from core.analysis.scan import ScanSettings, score_pairs
from core.analysis.scan_input import parse_pairs
from core.analysis.scan_parquet import records_table
from viz_app.corpus import table
from viz_app.figures import corpus as figures


@pytest.fixture(scope="module")
def records(tiny_checkpoint: Path) -> list[dict]:
    bundle = core.load(tiny_checkpoint, device="cpu")
    data = b"the cat sleeps\tthe cat\n\t\nthe dog & <b>\t\tder Hund\n"
    return score_pairs(bundle, parse_pairs(data), ScanSettings(threshold=0.5), "m", batch_size=4)


def test_rows_in_line_order_with_links_and_no_empty_optional_column(records: list[dict]) -> None:
    frame = table.rows(records, "tiny")
    assert list(frame["line"]) == [1, 2, 3]
    assert {"chrF", "reference", "problem"} <= set(frame.columns)  # line 3 has a reference, line 2 a problem
    link = urlparse(frame["open"][2])
    assert link.path == "/" and parse_qs(link.query) == {
        "page": ["overview"],
        "ckpt": ["tiny"],
        "text": ["the dog & <b>"],
    }
    scored_only = table.rows([records[0]], "tiny")
    assert not {"chrF", "reference", "problem"} & set(scored_only.columns)
    pieces = frame["lowest-share pieces"][0]
    assert "▁" not in pieces and pieces.count(",") == min(3, len(records[0]["target_pieces"]) - 1) - 1


def test_filters(records: list[dict]) -> None:
    assert table.kept(records, "every line", "") == records
    assert [r["line"] for r in table.kept(records, "not scored", "")] == [2]
    assert [r["line"] for r in table.kept(records, "every line", "HUND")] == [3]  # the reference, case ignored
    flagged = [r["line"] for r in records if r.get("flagged")]
    assert [r["line"] for r in table.kept(records, "flagged", "")] == flagged


def test_downloads_hold_every_field(records: list[dict]) -> None:
    assert [json.loads(line) for line in table.jsonl_bytes(records).decode().splitlines()] == records
    back = pq.read_table(io.BytesIO(table.parquet_bytes(records)))
    assert back.equals(records_table(records))
    csv = pd.read_csv(io.BytesIO(table.csv_bytes(records)))
    assert list(csv["line"]) == [1, 2, 3] and csv["error"].notna().tolist() == [False, True, False]
    assert json.loads(csv["target_pieces"][0]) == records[0]["target_pieces"]


def test_scatter_sample_keeps_every_flagged_point() -> None:
    flags = np.zeros(5000, dtype=bool)
    flags[[3, 4000]] = True
    drawn = figures.scatter_sample(flags, limit=100)
    assert len(drawn) == 100 and {3, 4000} <= set(drawn.tolist()) and list(drawn) == sorted(drawn)
    assert drawn[0] == 0 and drawn[-1] == 4999
    assert list(figures.scatter_sample([True, False])) == [0, 1]


def test_scatter_colours_the_flag_and_marks_the_threshold() -> None:
    fig = figures.share_scatter(
        [0.9, 0.5, 0.7], [-0.1, -2.0, -0.5], [False, True, True], [1, 2, 3], ["a", "b", "c"], threshold=0.8, title="t"
    )
    flagged, kept = fig.data
    assert flagged.name == "flagged (2)" and list(flagged.x) == [0.5, 0.7] and kept.name == "not flagged (1)"
    assert [c[0] for c in flagged.customdata] == [2, 3]
    assert fig.layout.shapes[0].x0 == 0.8 and fig.layout.xaxis.range[0] == pytest.approx(0.48)
    hist = figures.histogram([1.0, 2.0, 2.0], title="h", axis="x")
    assert list(hist.data[0].x) == [1.0, 2.0, 2.0]
