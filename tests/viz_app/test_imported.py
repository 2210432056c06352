"""Every page on a checkpoint imported from a Hugging Face Marian folder (built here: no hub), and the sidebar
says where it came from."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
import torch
from apptest_helpers import specs
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


def test_a_multilingual_marian_model_offers_its_target_tokens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """opus-mt-en-ROMANCE style: a '>>pt<<' token first says the target language. The sentence bar offers the
    tokens the vocabulary has (the folder's own target first); the chosen one starts the source the model reads,
    and the translation is core's of that source; a link's token the model lacks is named."""
    from hf_wild_folders import build_marian

    import core

    folder = build_marian(tmp_path / "opus-mt-en-romance-like", multi=True)
    assert main(["import-hf", str(folder), "--out", str(tmp_path / "root" / "romance")]) == 0
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))
    torch.set_num_threads(1)
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run(timeout=120)
    assert not at.exception and not at.error, [e.value for e in at.error]
    picker = at.selectbox(key="target_code")
    assert picker.options == [">>pt<<", ">>es<<"] and picker.value == ">>pt<<"
    bundle = core.load(tmp_path / "root" / "romance", device="cpu")
    text = at.text_input(key="text").value
    for code in (">>pt<<", ">>es<<"):
        at.selectbox(key="target_code").set_value(code).run(timeout=120)
        assert not at.exception and not at.error
        shown = "\n".join(m.value for m in at.markdown)
        expected = bundle.translate(f"{code} {text}")
        assert expected.src_tokens[0] == code
        assert expected.text and expected.text in shown, (code, expected.text)
        drawn = json.dumps(specs(at))  # the attention maps' source axes: the chosen token, not the other
        other = ">>es<<" if code == ">>pt<<" else ">>pt<<"
        escaped = {c: html.escape(c, quote=False) for c in (code, other)}  # as the figures write a piece
        assert escaped[code] in drawn and escaped[other] not in drawn, code
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.query_params["target_code"] = ">>xx<<"
    at.run(timeout=120)
    assert at.selectbox(key="target_code").value == ">>pt<<"
    assert any("target_code" in w.value and "not available here" in w.value for w in at.warning), at.warning
