"""Every page on a checkpoint of each model family the lab opens besides Marian: T5 (relative position bias,
RMSNorm, gated FFN, no 1/sqrt(d_k)), BART (learned positions from row 3, counted from 1, one table per side,
layernorm_embedding)
and M2M100 / NLLB (fairseq's sinusoids from row 3, pre-norm). One checkpoint per family for the module; each page
runs without an exception or error box and shows what that family has."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from apptest_helpers import chart_titles, ok, specs, texts
from hf_bart_folders import build_bart_folder, build_m2m100_folder
from hf_wild_folders import build_mbart, build_t5
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from streamlit.testing.v1 import AppTest

import core
from core.cli import main

pytest.importorskip("transformers", reason="transformers is a test extra: pip install -e '.[test]'")
APP = Path(__file__).resolve().parents[2] / "viz_app" / "app.py"
TIMEOUT = 120
# each family imported from a tiny Hugging Face folder built with transformers (tests/hf_wild_folders.py: a T5 v1.1
# as transformers 5 saves it, tokenizer.json only; an mBART whose target language is only its decoder's start token,
# as mbart-large-en-ro; tests/hf_bart_folders.py) by the command the app's importer shares
FAMILIES: dict[str, Callable[[Path], Path]] = {
    "t5": lambda path: build_t5(path, seed=1),
    "bart": lambda path: build_bart_folder(path, seed=2),
    "m2m100": lambda path: build_m2m100_folder(path, seed=3),
    "mbart": lambda path: build_mbart(path, seed=4),
}


def _never_stop(folder: Path) -> None:
    """Random weights often end a translation at once; the analyses need output words: </s>'s output row 0 (and
    its bias very low), so every translation runs to the length limit."""
    path = folder / "model.safetensors"
    state = load_file(str(path))
    eos = core.ModelConfig.from_dict(json.loads((folder / "config.json").read_text())["model"]).eos_id
    row = "output.weight" if "output.weight" in state else "tgt_embed.weight" if "tgt_embed.weight" in state else None
    state[row or "src_embed.weight"][eos] = 0.0
    if "output.bias" in state:
        state["output.bias"][eos] = -10.0
    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
    save_file(state, str(path), metadata=metadata)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root, folders = tmp_path_factory.mktemp("families"), tmp_path_factory.mktemp("hf")
    for family, build in FAMILIES.items():
        folder = build(folders / family)
        assert main(["import-hf", str(folder), "--out", str(root / family)]) == 0
        _never_stop(root / family)
    return root


@pytest.fixture(autouse=True)
def _env(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(root))
    monkeypatch.setenv("LAB_CACHE_DIR", str(root / ".cache"))
    torch.set_num_threads(1)


def _page(family: str, page: str, monkeypatch: pytest.MonkeyPatch, **params: str) -> AppTest:
    monkeypatch.setenv("LAB_CHECKPOINT", family)
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update({"page": page, **params})
    return ok(at.run(timeout=TIMEOUT))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_positional_page_shows_what_the_model_has(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _page(family, "positional", monkeypatch)
    said, titles = texts(at), chart_titles(at)
    family_name = {"t5": "T5 / T5 v1.1 / Flan-T5", "bart": "BART", "m2m100": "M2M100 / NLLB (dense)"}.get(
        family, "mBART / mBART-50"
    )
    assert f"(family: {family_name};" in said, said  # the card says which family and where from
    if family == "mbart":  # and where its languages came from: the target only in the decoder's start token
        assert "the target language (ro_RO) from generation_config.json decoder_start_token_id" in said, said
    if family == "t5":
        assert "relative position bias" in said and "8 distance buckets" in said, said
        assert any(t.startswith("Encoder self-attention: bias added") for t in titles), titles
        assert any(t.startswith("Decoder self-attention: bias added") for t in titles), titles
        assert any(t.startswith("Which bucket each query reads") for t in titles), titles
        assert "Distances 0 to 1 get a bucket each" in said  # the encoder: 4 buckets a direction, 2 exact
    elif family in ("bart", "mbart"):
        assert at.slider(key="pe_n").max == 64  # the learned table's 64 positions bound "Positions shown"
        assert "learned" in said and "a table for the source and one for the target" in said, said
        assert "reads row 3" in said, said  # position 1, rows counted from 1
        assert any(t.startswith("Learned position table (the source's)") for t in titles), titles
        assert "Cosine similarity between positions" in titles, titles
    else:
        assert at.slider(key="pe_n").max == 256  # sinusoids have no last position
        assert "reads row 3" in said and "fairseq" in said, said
        assert "PE·PE similarity between positions" in titles, titles
    at.session_state["pe_tab"] = "Added in this run"
    ok(at.run(timeout=TIMEOUT))
    titles = chart_titles(at)
    if family == "t5":
        assert any(t.startswith("Bias the encoder added") for t in titles), titles
        assert not any("switched off" in i.value for i in at.info)
        at.session_state["pe"] = False  # positions off: the bias is off, and the page says so from the trace
        ok(at.run(timeout=TIMEOUT))
        assert any("relative position bias is switched off for the encoder" in i.value for i in at.info)
    else:
        assert any(t.startswith("PE values added to the source tokens") for t in titles), titles
    at.session_state["pe"] = True  # BART too: the comparison forces the output's ids (its text is invalid UTF-8)
    at.session_state["pe_tab"] = "Switch it off"
    at.session_state["compare"] = True  # before / after: the encoder's maps change when positions go (T5: the bias)
    ok(at.run(timeout=TIMEOUT))
    changes = [c.value for c in at.caption if c.value.startswith(("The weights change", "No change"))]
    assert changes and changes[0].startswith("The weights change by up to"), changes


PAGES = [
    ("overview", {}),
    ("head", {}),
    ("masks", {}),
    ("steps", {}),
    ("explain", {}),
    ("explain", {"explain_tab": "Attention rollout"}),
    ("explain", {"explain_tab": "Patching"}),
    ("explain", {"explain_tab": "Attribution"}),
    ("heads", {}),
    ("learn", {}),
    ("map", {}),
]


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize(("page", "params"), PAGES, ids=[f"{p}-{'-'.join(q.values())}" for p, q in PAGES])
def test_every_page_runs(family: str, page: str, params: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    at = _page(family, page, monkeypatch, **params)
    if params.get("explain_tab") == "Patching":  # patching runs once a word is replaced by one as many pieces long
        words = at.text_input(key="text").value.split()
        for j, word in [(j, w) for j in range(len(words)) for w in words if w != words[j]]:
            at.selectbox(key="explain_word").set_value(j)
            at.text_input(key="explain_replacement").input(word)
            at.run(timeout=TIMEOUT)
            if not at.warning:
                break
        ok(at)
    assert at.get("plotly_chart") or at.dataframe or at.table, f"{page} drew nothing on {family}"
    if page == "masks":  # the stages' first panel names the scores this model computes
        stage = next(a["text"] for s in specs(at) for a in s["layout"].get("annotations", []) if a["text"][:3] == "1 ·")
        assert ("not divided by √d_k" in stage) is (family == "t5"), stage


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize(("kind", "layer"), [("encoder", "1"), ("encoder", "2"), ("decoder", "1"), ("cross", "2")])
def test_learn_follows_the_family_arithmetic(
    family: str, kind: str, layer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every by-hand step equals the model's on each family (layer 1: the embedding, its positions and embedding
    norm), and the page writes only the steps the model takes."""
    at = _page(family, "learn", monkeypatch, kind=kind, layer=layer, head="2", query="2")
    said = texts(at)
    assert "✓ equal" in said and "✗ differ" not in said, said
    assert [s.value for s in at.success] and "recomputed softmax equals" in at.success[0].value
    latex = "\n".join(e.value for e in at.latex)
    columns = next(list(d.value.columns) for d in at.dataframe if "q·k" in d.value.columns)  # step 4's table
    t5 = family == "t5"
    assert ("sqrt{d_k}" in latex) is not t5, latex  # T5 divides by nothing
    assert ("B_{h}(j - i)" in latex) is (t5 and kind != "cross"), latex  # step 4: the bias by distance
    assert ("RMSNorm" in said) is t5 and ("LayerNorm" in said) is not t5, said
    assert any(c.startswith("÷ √") for c in columns) is not t5, columns
    assert ("+ bias B" in columns) is (t5 and kind != "cross"), columns
    if t5 and kind != "cross":
        assert "the bias looked up in the learned table by distance equals" in said
    if layer == "1":
        assert ("embedding + PE" in said) is not t5, said
        assert ("layernorm_embedding" in said) is (family in ("bart", "mbart")), said
    if t5 and kind == "encoder":
        assert r"\odot x W_{up}" in latex and r"\mathrm{GELU}_{\tanh}" in latex, latex  # the gated FFN, gelu_new
        assert "no bias terms" in said and "d_kv = 12" in said  # hf_folders' T5: d_model 32, 4 heads of 12


def test_a_replayed_t5_trace_keeps_its_arithmetic(root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the model (a saved trace replayed), Learn reads T5's unscaled scores and its bias from the trace,
    and the Positional-encoding page shows the bias each head added."""
    bundle = core.load(root / "t5", device="cpu")
    out = bundle.record_more(bundle.translate("Is tea left?"))
    saved = core.Translation(core.Trace.load(out.trace.save(tmp_path / "t5.npz")))
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(tmp_path / "empty"))  # nothing to load
    for page, check in (("learn", "learn"), ("positional", "positional")):
        at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
        at.session_state["_replay"] = saved
        at.query_params.update({"page": page, "kind": "encoder"})
        ok(at.run(timeout=TIMEOUT))
        if check == "learn":
            latex = "\n".join(e.value for e in at.latex)
            assert "B_{h}(j - i)" in latex and r"\sqrt" not in latex, latex  # read from the recorded numbers
            assert at.success and "recomputed softmax equals" in at.success[0].value
        else:
            assert any(t.startswith("Bias the encoder added") for t in chart_titles(at)), chart_titles(at)


@pytest.mark.parametrize(("family", "start"), [("t5", "<pad>"), ("bart", "</s>"), ("mbart", "ro_RO")])
def test_the_decoders_first_input_is_the_piece_it_starts_from(
    family: str, start: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    said = texts(_page(family, "steps", monkeypatch))  # T5 starts from <pad>, BART from </s>: neither from <s>
    assert f"the only piece written so far is `{start}`" in said, said
    assert f"`{start}` starts the decoder" in texts(_page(family, "overview", monkeypatch))
