"""Every page on a checkpoint imported from a Hugging Face Marian folder (built here: no hub), and the sidebar
says where it came from."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from marian_folders import marian_model, save_folder, write_tokenizer
from streamlit.testing.v1 import AppTest

from core.cli import main

pytest.importorskip("transformers", reason="transformers is a test extra: pip install -e '.[test]'")
APP = Path(__file__).resolve().parents[2] / "viz_app" / "app.py"
PAGES = ["overview", "head_detail", "masks", "positional", "steps", "explain", "heads", "learn", "model_map"]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("imported")
    folder = base / "opus-mt-like"
    vocab = write_tokenizer(folder, (70, 60))
    save_folder(marian_model(vocab, seed=1), folder, readme="---\nlicense: cc-by-4.0\n---\n# a test model\n")
    assert main(["import-hf", str(folder), "--out", str(base / "root" / "opus-mt-like")]) == 0
    return base / "root"


@pytest.mark.parametrize("page", PAGES)
def test_every_page_runs_on_an_imported_model(root: Path, page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(root))
    monkeypatch.setenv("LAB_CACHE_DIR", str(root.parent / "cache"))
    torch.set_num_threads(1)
    at = AppTest.from_file(str(APP), default_timeout=120)
    if page != "overview":
        at.switch_page(f"views/{page}.py")
    at.run(timeout=120)
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    captions = [c.value for c in at.sidebar.caption]
    said = [c for c in captions if c.startswith("Imported from the Hugging Face folder `opus-mt-like` (family: Marian")]
    assert said and "cc-by-4.0" in said[0], captions
