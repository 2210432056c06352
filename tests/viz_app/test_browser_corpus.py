"""The Corpus page in a real browser (issue 45's "done when"): an uploaded file with bad lines scans, names each bad
line, says a summary whose counts are those of the CLI scan's JSON lines for the same file, and a row clicked in the
table opens that sentence on the overview. The worker's app server and Chromium (tests/conftest.py), tiny model."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
import torch
from conftest import POLL, new_tab, snapshot

from core.analysis.scan import ScanSettings, scan
from core.analysis.scan_summary import totals
from viz_app import claims_corpus

pytestmark = pytest.mark.browser

LINES = [
    "the cat sleeps\t\tthe cat sleeps",  # the model's own translation, against a reference
    "\tno source here",  # line 2: no source text
    "the dog runs\tder Hund läuft",  # a given translation
    "a\tb\tc\td",  # line 4: four fields
    "the house is small",
]
ROW_HEIGHT = 35  # px: Streamlit's data grid rows and its header


def test_an_uploaded_file_scans_names_its_bad_lines_and_a_row_opens_on_the_overview(
    lab_server: tuple[str, Path], chromium: object, tmp_path: Path
) -> None:
    url, root = lab_server
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    torch.set_num_threads(1)  # as the server: the same floats
    scan(root / "tiny", pairs, tmp_path / "out.jsonl", ScanSettings(), progress=False)
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    expected = claims_corpus.scan_summary(totals(records), len(records), ScanSettings().threshold)
    assert "2 lines not scored" in expected
    with new_tab(chromium, "corpus", {"width": 1280, "height": 900}) as page:
        page.goto(f"{url}/corpus", timeout=120_000)
        page.get_by_text("a file of my own").click(timeout=60_000)
        page.locator('[data-testid="stMain"] input[type="file"]').set_input_files(str(pairs))
        page.get_by_role("button", name="Scan 5 pairs").click(timeout=60_000)
        summary = page.get_by_text(re.compile("pairs scanned:"))
        summary.wait_for(timeout=120_000)
        assert summary.inner_text().strip() == expected
        page.get_by_text("Lines not scored (2)").click()
        listed = page.locator('[data-testid="stExpanderDetails"]').last.inner_text()
        assert "line 2: no source text" in listed and "line 4: 4 tab-separated fields" in listed
        snapshot(page, "corpus-upload")
        grid = page.locator('[data-testid="stDataFrame"]')
        grid.scroll_into_view_if_needed()
        page.wait_for_timeout(500)
        box = grid.bounding_box()
        assert box is not None
        # the selection box at the left edge of the third row (line 3)
        page.mouse.click(box["x"] + 18, box["y"] + ROW_HEIGHT * 2.5 + ROW_HEIGHT)
        page.get_by_text("Line 3 · the dog runs").wait_for(timeout=30_000)
        page.get_by_role("button", name="Translate & overview →").click()
        page.wait_for_function(
            "() => location.search.includes('page=overview') || location.pathname === '/'", timeout=60_000, polling=POLL
        )
        page.get_by_text("Translation ·").first.wait_for(timeout=60_000)
        assert parse_qs(urlparse(page.url).query)["text"] == ["the dog runs"]
        assert page.get_by_label(re.compile("Sentence to translate")).input_value() == "the dog runs"
