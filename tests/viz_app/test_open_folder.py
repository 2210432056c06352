"""Opening a Hugging Face folder from the sidebar: a tiny Marian folder built here (no hub) is imported into the
checkpoint root with a progress bar and selected; a path, a folder or a name the lab refuses is named in words,
with no traceback and nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from apptest_helpers import texts
from hf_bart_folders import build_bart_folder, build_m2m100_folder, build_mbart_folder
from hf_folders import build_t5_folder
from marian_folders import marian_model, save_folder, write_tokenizer
from streamlit.testing.v1 import AppTest

import core
from core.importers.hf_families import checkpoint_name
from viz_app.session import importing

pytest.importorskip("transformers", reason="transformers is a test extra: pip install -e '.[test]'")
APP = Path(__file__).resolve().parents[2] / "viz_app" / "app.py"


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A snapshot laid out as in the Hugging Face cache: models--org--name/snapshots/<hash>/."""
    folder = tmp_path_factory.mktemp("hub") / "models--Test-Org--opus-mt-tiny" / "snapshots" / "0123abcd"
    vocab = write_tokenizer(folder, (70, 60))
    save_folder(marian_model(vocab, seed=3), folder, readme="---\nlicense: cc-by-4.0\n---\n# a test model\n")
    return folder


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(root))
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LAB_SERVE_NETWORK", raising=False)
    torch.set_num_threads(1)
    return root


def _import(at: AppTest, folder: str, name: str = "") -> AppTest:
    at.sidebar.text_input(key="hf_folder").input(folder)
    at.sidebar.text_input(key="hf_name").input(name)
    at.sidebar.button(key="hf_import").click()
    return at.run(timeout=180)


def _said(at: AppTest) -> str:
    return "\n".join([e.value for e in at.sidebar.error] + [s.value for s in at.sidebar.success])


def test_a_folder_is_imported_selected_and_its_card_says_where_from(root: Path, marian_folder: Path) -> None:
    at = AppTest.from_file(str(APP), default_timeout=180).run()
    assert not at.exception
    assert "open a Hugging Face folder in the sidebar" in texts(at)  # an empty root points at the importer
    at = _import(at, str(marian_folder))
    assert not at.exception, [e.message for e in at.exception]
    assert [p.name for p in root.iterdir()] == ["opus-mt-tiny"]  # the model's name, not the snapshot's hash
    assert at.sidebar.selectbox(key="ckpt").value == "opus-mt-tiny"
    said = _said(at)
    assert "Imported **opus-mt-tiny**" in said and "MB" in said, said
    captions = [c.value for c in at.sidebar.caption]
    assert any(
        c.startswith(
            "Imported from the Hugging Face folder `Test-Org/opus-mt-tiny (snapshot 0123abcd)` "
            "(family: Marian (Opus-MT);"
        )
        for c in captions
    ), captions
    assert not at.error, [e.value for e in at.error]
    assert [t.value for t in at.title] == ["Translate & overview"] and at.get("plotly_chart")  # the page ran on it
    # the same folder again under the same name: refused, the checkpoint there kept
    before = (root / "opus-mt-tiny" / "model.safetensors").stat().st_mtime_ns
    at = _import(at, str(marian_folder), "opus-mt-tiny")
    assert "already in" in _said(at) and "opus-mt-tiny" in _said(at), _said(at)
    assert (root / "opus-mt-tiny" / "model.safetensors").stat().st_mtime_ns == before
    assert not at.exception


OTHER_FAMILIES = {  # name -> (how to build its folder, the family the card names)
    "flan-t5-tiny": (lambda path: build_t5_folder(path, "1.1"), "T5 / T5 v1.1 / Flan-T5"),
    "bart-tiny": (build_bart_folder, "BART"),
    "mbart-tiny": (build_mbart_folder, "mBART / mBART-50"),
    "nllb-tiny": (lambda path: build_m2m100_folder(path, nllb=True), "M2M100 / NLLB (dense)"),
}


@pytest.mark.parametrize("name", list(OTHER_FAMILIES))
def test_each_family_is_imported_selected_and_named(root: Path, tmp_path: Path, name: str) -> None:
    build, family = OTHER_FAMILIES[name]
    folder = build(tmp_path / name)
    at = _import(AppTest.from_file(str(APP), default_timeout=180).run(), str(folder))
    assert not at.exception, [e.message for e in at.exception]
    assert at.sidebar.selectbox(key="ckpt").value == name
    captions = [c.value for c in at.sidebar.caption]
    said = f"Imported from the Hugging Face folder `{name}` (family: {family};"
    assert any(c.startswith(said) for c in captions), captions
    assert not at.error, [e.value for e in at.error]


def _copy_without(folder: Path, dest: Path, *missing: str) -> Path:
    shutil.copytree(folder, dest, ignore=shutil.ignore_patterns(*missing))
    return dest


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("empty", "type the path"),
        ("missing", "does not exist"),
        ("file", "is a file, not a folder"),
        ("no_config", "config.json: missing"),
        ("whisper", "'whisper'"),
        ("pickle", "refused — it is a Python pickle"),
        ("no_tokenizer", "target.spm: missing"),
        ("bad_name", "cannot be a checkpoint folder's name"),
    ],
)
def test_refusals_are_named_and_write_nothing(
    root: Path, marian_folder: Path, tmp_path: Path, case: str, expected: str
) -> None:
    name = ""
    if case == "empty":
        path = "  "
    elif case == "missing":
        path = str(tmp_path / "nowhere")
    elif case == "file":
        path = str(marian_folder / "config.json")
    elif case == "no_config":
        path = str(_copy_without(marian_folder, tmp_path / "m", "config.json"))
    elif case == "whisper":
        folder = _copy_without(marian_folder, tmp_path / "w")
        (folder / "config.json").write_text(json.dumps({"model_type": "whisper"}))
        path = str(folder)
    elif case == "pickle":
        folder = _copy_without(marian_folder, tmp_path / "p", "model.safetensors")
        (folder / "pytorch_model.bin").write_bytes(b"not opened")
        path = str(folder)
    elif case == "no_tokenizer":
        path = str(_copy_without(marian_folder, tmp_path / "t", "target.spm"))
    else:
        path, name = str(marian_folder), "../escape"
    with pytest.raises(core.LabError, match=expected.replace("(", r"\(")):
        importing.import_folder(path, name, lambda fraction, text: None)
    assert list(root.iterdir()) == []  # nothing written, not even a hidden staging folder


def test_the_sidebar_shows_a_refusal_in_words(root: Path, marian_folder: Path, tmp_path: Path) -> None:
    folder = _copy_without(marian_folder, tmp_path / "p", "model.safetensors")
    (folder / "pytorch_model.bin").write_bytes(b"not opened")
    at = _import(AppTest.from_file(str(APP), default_timeout=180).run(), str(folder))
    assert not at.exception, [e.message for e in at.exception]
    said = _said(at)
    assert said.startswith("**Not imported:**") and "pickle" in said, said
    assert list(root.iterdir()) == []


def test_progress_is_reported_in_order(root: Path, marian_folder: Path) -> None:
    seen: list[tuple[float, str]] = []
    done = importing.import_folder(str(marian_folder), "tiny", lambda f, t: seen.append((f, t)))
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] == 1.0, seen
    between = [t for f, t in seen if 0.1 < f < 0.8]  # the bar moves while the folder is read, not 0.1 -> 0.8
    assert sum(t.startswith("Read and checked tensor") for t in between) >= 10, seen
    assert done.name == "tiny" and (root / "tiny" / "config.json").is_file() and done.megabytes > 0


def test_a_cache_snapshot_of_symlinks_to_blobs_is_read(root: Path, marian_folder: Path, tmp_path: Path) -> None:
    """The Hugging Face cache keeps each file once under blobs/ and links it from snapshots/<hash>/."""
    repo = tmp_path / "models--Org--linked"
    snapshot, blobs = repo / "snapshots" / "feed", repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for i, file in enumerate(p for p in marian_folder.iterdir() if p.is_file()):
        shutil.copyfile(file, blobs / f"blob{i}")
        (snapshot / file.name).symlink_to(Path("../../blobs") / f"blob{i}")
    done = importing.import_folder(str(snapshot), "", lambda f, t: None)
    assert done.name == "linked" and not any(p.is_symlink() for p in (root / "linked").iterdir())


def test_serving_a_network_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_SERVE_NETWORK", "1")
    assert "LAB_SERVE_NETWORK=1" in (importing.refused_here() or "")
    monkeypatch.delenv("LAB_SERVE_NETWORK")
    assert importing.refused_here() is None


def test_a_cache_snapshot_is_named_after_its_model(tmp_path: Path) -> None:
    snapshot = tmp_path / "models--Helsinki-NLP--opus-mt-en-de" / "snapshots" / "abc123"
    assert checkpoint_name(snapshot) == "opus-mt-en-de"
    assert checkpoint_name(tmp_path / "my model (v2)") == "my-model-v2"
