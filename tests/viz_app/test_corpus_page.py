"""The Corpus page (views/corpus.py) in AppTest: a built-in set scanned, its summary equal to the one computed from
the CLI scan's records of the same lines, the table and the downloads holding them, a second session finding the
scan done, a cancelled scan keeping what it scored; the checkpoint's own sets offered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from apptest_helpers import chart_titles, ok, texts
from conftest import build_tiny_checkpoint
from streamlit.testing.v1 import AppTest

import core
from core.analysis.corpus_sets import builtin_sets
from core.analysis.scan import ScanSettings, scan
from core.analysis.scan_summary import totals
from viz_app import cache, claims_corpus
from viz_app.corpus import store

APP = Path(__file__).resolve().parents[2] / "viz_app" / "app.py"
REPO = APP.parents[1]
TIMEOUT = 180


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus_checkpoints")
    build_tiny_checkpoint(root / "tiny", seed=3)
    return root


@pytest.fixture(autouse=True)
def _env(root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(root))
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LAB_CHECKPOINT", "tiny")
    cache.shared().clear()
    store._scans.clear()
    monkeypatch.setattr("core.analysis.corpus_sets.builtin_sentences", _few)  # 40 of the 240: the same code path
    torch.set_num_threads(1)


def _few(language: str, n: int = 0) -> tuple[list[str], str]:
    from core.analysis.sentences import builtin_sentences

    found, used = builtin_sentences(language)
    return found[:40], used


def page() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.switch_page("views/corpus.py")
    return at.run(timeout=TIMEOUT)


def builtin(at: AppTest) -> AppTest:
    at.selectbox(key="corpus_set").select("builtin")
    return ok(at.run(timeout=TIMEOUT))


def test_a_built_in_set_scans_and_its_summary_is_the_cli_scans(root: Path, tmp_path: Path) -> None:
    at = builtin(ok(page()))
    (data_set,) = [s for s in builtin_sets("src", "tgt", REPO / "data" / "ding-split") if s.key == "builtin"]
    assert at.button(key="corpus_scan").label == f"Scan {data_set.lines} pairs"
    assert not at.dataframe  # nothing scanned yet
    ok(at.button(key="corpus_scan").click().run(timeout=TIMEOUT))
    # the same lines scanned by the CLI's path: its records give the page's sentence, word for word
    pairs_file = tmp_path / "pairs.tsv"
    pairs_file.write_bytes(data_set.data)
    scan(root / "tiny", pairs_file, tmp_path / "out.jsonl", ScanSettings(), progress=False)
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    summary = claims_corpus.scan_summary(totals(records), len(records), ScanSettings().threshold)
    assert summary in texts(at)
    frame = at.dataframe[0].value
    assert list(frame["line"]) == [r["line"] for r in records]
    assert list(frame["source share"]) == [r["source_share"] for r in records]
    assert list(frame["translation"]) == [r["translation"] for r in records]
    titles = chart_titles(at)
    assert titles[0] == "Source share against log-probability, one point a pair" and "Source share" in titles
    assert [b.label for b in at.get("download_button")] == ["⬇ CSV", "⬇ Parquet", "⬇ JSON lines"]
    # a second session (another visit) finds the scan done: no button, the same sentence at once
    again = builtin(page())
    assert summary in texts(again) and not [b for b in again.button if b.key == "corpus_scan"]


def test_filters_narrow_the_table(root: Path) -> None:
    at = builtin(page())
    ok(at.button(key="corpus_scan").click().run(timeout=TIMEOUT))
    n = len(at.dataframe[0].value)
    at.text_input(key="corpus_contains").input("station").run(timeout=TIMEOUT)
    frame = at.dataframe[0].value
    assert 0 < len(frame) < n and all("station" in s.lower() for s in frame["source"])
    assert f"{len(frame):,} of {n:,} lines." in texts(at)
    at.selectbox(key="corpus_show").select("not scored").run(timeout=TIMEOUT)
    assert len(at.dataframe[0].value) == 0


def test_a_stopped_scan_keeps_its_rows_and_goes_on(root: Path) -> None:
    at = builtin(page())
    data = next(s for s in builtin_sets("src", "tgt", REPO / "data" / "ding-split") if s.key == "builtin").data
    # a scan stopped after its first batch, as Cancel leaves it: the records so far, kept by the server
    found = store.scan_for(root / "tiny", data)
    bundle = core.load(root / "tiny", device="cpu")

    class Stop(Exception):
        pass

    def stop(_: int) -> None:
        raise Stop

    with pytest.raises(Stop):
        store.advance(bundle, found, stop)
    done = len(found.records)
    assert 0 < done < len(found.pairs)
    ok(at.run(timeout=TIMEOUT))
    assert f"Stopped after {done:,} of {len(found.pairs):,} pairs" in texts(at)
    assert len(at.dataframe[0].value) == done
    button = at.button(key="corpus_scan")
    assert button.label == f"Continue: {len(found.pairs) - done:,} pairs"
    ok(button.click().run(timeout=TIMEOUT))
    assert f"{len(found.pairs):,} pairs scanned:" in texts(at)


def test_the_heads_are_measured_over_the_scanned_sources(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.analysis import head_spread
    from core.analysis.survey import survey_sentences

    monkeypatch.setattr(head_spread, "STABLE", 1.0)  # a label must hold on every sentence: some do not
    at = builtin(page())
    ok(at.button(key="corpus_scan").click().run(timeout=TIMEOUT))
    assert not any(t.startswith("Encoder self-attention: entropy, spread") for t in chart_titles(at))
    ok(at.button(key="corpus_heads").click().run(timeout=TIMEOUT))
    sources = list(dict.fromkeys(at.dataframe[0].value["source"]))
    stats, spread = survey_sentences(core.load(root / "tiny"), sources)
    stabilities = spread.stability(stats)
    assert any(not x.steady for x in stabilities), "an unsteady label, for the page's wording of them"
    said = claims_corpus.stability_note(stabilities, len(sources), marked=False)  # this page draws no "?" marks
    assert said in texts(at) and "on fewer than 100% of the" in said and "marked" not in said
    assert "Encoder self-attention: entropy, spread over the sentences (75th − 25th percentile)" in chart_titles(at)
    at.selectbox(key="corpus_heads_stat").select("eos").run(timeout=TIMEOUT)
    assert "Encoder self-attention: eos, spread over the sentences (75th − 25th percentile)" in chart_titles(ok(at))


def test_another_threshold_flags_the_rows_again_without_scanning_again(root: Path) -> None:
    at = builtin(page())
    ok(at.button(key="corpus_scan").click().run(timeout=TIMEOUT))
    scan = next(s for s in store._scans()[0].values() if s.records)  # the scan this page ran
    records = list(scan.records)
    at.number_input(key="corpus_threshold").set_value(1.0).run(timeout=TIMEOUT)
    ok(at)
    assert store._scans()[0][scan.key] is scan and scan.records == records  # the same scan, nothing scored again
    strict = store.flagged_at(records, 1.0)
    assert all(r["flagged"] for r in strict if "error" not in r)
    assert claims_corpus.scan_summary(totals(strict), len(records), 1.0) in texts(at)
    assert not [b for b in at.button if b.key == "corpus_scan"]
