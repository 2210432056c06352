"""A saved trace replays every page of the app without the model (no checkpoint on the machine at all)."""

from __future__ import annotations

import io
import json
import struct
import zipfile
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

import core
from core.decoding.sampling import Sampling
from core.sites import draw_site

APP = Path(__file__).resolve().parents[2] / "viz_app" / "app.py"
TIMEOUT = 90
PAGES = ["overview", "head_detail", "masks", "positional", "steps", "explain", "heads", "learn", "model_map"]


@pytest.fixture(scope="module")
def saved(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, core.Translation]:
    out = core.load(tiny_checkpoint, device="cpu").translate(
        "The cat sleeps on the warm chair.", max_len=6, options=core.InferenceOptions(causal_mask=False)
    )
    return out.trace.save(tmp_path_factory.mktemp("saved") / "trace.npz"), out


@pytest.fixture(autouse=True)
def _no_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(tmp_path / "empty"))  # nothing to load
    torch.set_num_threads(1)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_from_a_reloaded_trace(saved: tuple[Path, core.Translation], page: str) -> None:
    path, original = saved
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state["_replay"] = core.Translation(core.Trace.load(path))
    if page != "overview":
        at.switch_page(f"views/{page}.py")
    at.run(timeout=TIMEOUT)
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    shown = "\n".join([m.value for m in at.markdown] + [c.value for c in at.caption] + [i.value for i in at.info])
    assert "Replaying a saved trace" in shown and "causal mask off" in shown
    assert "No checkpoint" not in shown and "no checkpoint" not in shown
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    if page != "learn":  # the learn page works through numbers and tables
        assert charts, f"{page}: no figure drawn from the trace"
    else:
        assert at.dataframe or at.table or charts
    if page == "overview":
        assert original.text.replace(".", "") in shown.replace("\\", "").replace(".", "")


def test_the_address_bar_names_the_replayed_run_not_the_previous_sentence(saved: tuple[Path, core.Translation]) -> None:
    """While a trace is replayed the link carried the sentence typed before it (and the sidebar's switches)."""
    path, original = saved
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update({"text": "An earlier sentence.", "pe": "0"})
    at.session_state["_replay"] = core.Translation(core.Trace.load(path))
    at.run(timeout=TIMEOUT)
    assert not at.exception
    link = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert link["text"] == original.source_text == "The cat sleeps on the warm chair."
    assert link["causal"] == "0" and "pe" not in link  # the trace's switches: causal mask off, positions on
    assert "ckpt" not in link  # its model is not a checkpoint of this machine: the link opens the default
    from viz_app.session import url

    values = url.replay_link_values(original, [str(original.trace.meta["model"])])
    assert values["ckpt"] == original.trace.meta["model"] and values["beam"] == 1


def test_a_shortlist_trace_replays_the_steps_page(tmp_path: Path, tiny_checkpoint: Path) -> None:
    """The Steps page's shortlist note reads the trace (how many words of how many), not a model."""
    import shutil

    from marian_folders import write_marian_shortlist

    from core.decoding.shortlist import FILE_NAME, Shortlist

    folder = shutil.copytree(tiny_checkpoint, tmp_path / "listed")
    V = core.load(folder, device="cpu").config.tgt_vocab_size
    lex = write_marian_shortlist(tmp_path / "lex.bin", 4, 3, [[(5 * w + j) % V for j in range(3)] for w in range(V)])
    Shortlist.from_marian(lex, V, shared=True).save(folder / FILE_NAME)
    out = core.load(folder, device="cpu").translate("The cat sleeps.", core.InferenceOptions(shortlist=True))
    path = out.trace.save(tmp_path / "trace.npz")
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state["_replay"] = core.Translation(core.Trace.load(path))
    at.switch_page("views/steps.py")
    at.run(timeout=TIMEOUT)
    assert not at.exception and not at.error, [e.value for e in at.error]
    rows = out.trace.meta["shortlist_rows"]
    assert any(c.value.startswith(f"Shortlist only: each step scored {rows} of the model's {V:,}") for c in at.caption)


@pytest.mark.parametrize("link", [{"temperature": "0.5", "seed": "1"}, {}])
def test_a_sampled_trace_replays_its_draws_on_the_steps_page(
    tmp_path: Path, tiny_checkpoint: Path, link: dict[str, str]
) -> None:
    """The draw chart and the note read what decoding recorded while it drew, with the trace's own settings: not
    the link's other ones, and also when the link does not sample."""
    out = core.load(tiny_checkpoint, device="cpu").translate(
        "The cat sleeps.", sampling=Sampling(temperature=1.3, top_k=6, seed=5)
    )
    path = out.trace.save(tmp_path / "sampled.npz")
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update(link)
    at.session_state["_replay"] = core.Translation(core.Trace.load(path))
    at.switch_page("views/steps.py")
    at.run(timeout=TIMEOUT)
    assert not at.exception and not at.error, [e.value for e in at.error]
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    draw = next(c for c in charts if c["layout"]["title"]["text"].startswith("The draw at step 1"))
    assert draw["layout"]["title"]["text"].endswith("temperature 1.3, top-k 6, seed 5")
    shaped = out.trace[draw_site("top_probs")][0]
    assert draw["data"][1]["x"][: len(shaped)] == pytest.approx(shaped.tolist(), abs=1e-4)
    said = "\n".join(c.value for c in at.caption)
    assert (
        "At temperature 1.3 the drawn piece" in said and f"kept {int(out.trace[draw_site('kept')][0]):,} pieces" in said
    )
    assert "Sampled: each piece drawn at temperature 1.3, top-k 6, seed 5." in said and "temperature 0.5" not in said


def _open(data: bytes) -> None:  # runs inside AppTest.from_function
    import streamlit as st

    from viz_app.session import trace_replay as s

    st.session_state["text"] = "kept"
    st.write(f"error: {s.open_trace(data)}")
    st.write(f"replaying: {s.replay() is not None}; text: {st.session_state['text']}")


def test_a_file_that_is_not_a_trace_is_named_and_nothing_is_lost(
    saved: tuple[Path, core.Translation],
) -> None:
    at = AppTest.from_function(_open, args=(b"PK\x03\x04 not really a zip",), default_timeout=TIMEOUT).run()
    assert not at.exception
    shown = "\n".join(m.value for m in at.markdown)
    assert "error: This file is not a trace the lab can open" in shown
    assert "replaying: False; text: kept" in shown
    at = AppTest.from_function(_open, args=(saved[0].read_bytes(),), default_timeout=TIMEOUT).run()
    shown = "\n".join(m.value for m in at.markdown)
    assert "error: None" in shown and "replaying: True" in shown


def test_anything_but_a_translation_in_the_replay_slot_is_ignored() -> None:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state["_replay"] = "not a translation"
    at.run(timeout=TIMEOUT)
    assert not at.exception
    shown = "\n".join([i.value for i in at.info] + [m.value for m in at.markdown])
    assert "Replaying" not in shown


def test_analyses_exported_with_the_trace_replay_on_why_this_word(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from core.analysis import head_importance

    bundle = core.load(tiny_checkpoint, device="cpu")
    out = bundle.translate("The cat sleeps on the warm chair.", max_len=6)
    src = [int(i) for i in out.trace["ids.src"]]
    ids = [int(i) for i in out.trace["output.ids"]]
    path = out.trace.with_analysis(*head_importance(bundle, src, ids).to_arrays()).save(tmp_path / "t.json")
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state["_replay"] = core.Translation(core.Trace.load(path))
    at.session_state["explain_tab"] = "Head importance"
    at.switch_page("views/explain.py").run(timeout=TIMEOUT)
    assert not at.exception and not at.error
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert len(titles) == 3 and titles[2].startswith("Cross-attention")
    assert len(at.dataframe[0].value) == 12
    assert not any("holds no head importance" in i.value for i in at.info)


def _open_each(payloads: list[bytes]) -> None:  # runs inside AppTest.from_function
    import streamlit as st

    from viz_app.session import trace_replay as s

    for data in payloads:
        st.write(f"error: {s.open_trace(data)}")
    st.write(f"replaying: {s.replay() is not None}")


def _declaring(size: int) -> bytes:
    """A zip bomb's headers: an archive of about 1 kB whose one member says it unpacks to ``size`` bytes (< 4 GiB).
    Compressing real gigabytes took a minute here; the refusal must come from the headers alone, before anything is
    unpacked (unpacking this one would fail on its size and CRC, with another message)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", bytes(1024))
    data = bytearray(buf.getvalue())
    local, central = data.index(b"PK\x03\x04"), data.index(b"PK\x01\x02")
    struct.pack_into("<I", data, local + 22, size)  # uncompressed size, local header
    struct.pack_into("<I", data, central + 24, size)  # and central directory
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
        assert archive.infolist()[0].file_size == size
    return bytes(data)


def _broken(saved: Path) -> dict[str, tuple[bytes, str]]:
    """Hand-edited or damaged trace files -> (their bytes, what the message must name)."""
    good = json.loads(saved.with_suffix(".json").read_text(encoding="utf-8"))

    def edited(change: object) -> bytes:
        data = json.loads(json.dumps(good))
        change(data)  # type: ignore[operator]
        return json.dumps(data).encode()

    return {
        "empty": (b"", "the file is empty"),
        "garbage": (bytes(range(256)), "neither an .npz archive nor JSON text (byte 0x80 at 128 is not UTF-8)"),
        "cut short": (saved.read_bytes()[:1000], "not one (cut short or damaged?)"),
        "a zip bomb": (_declaring(3 << 30), "it unpacks to 3.0 GiB"),
        "deeply nested": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        "weights of another shape": (
            edited(lambda d: d["arrays"]["decoder.0.cross.weights"].update(data=[[1.0, 2.0]])),
            "'decoder.0.cross.weights' has shape (1, 2)",
        ),
        "a number for an array": (
            edited(lambda d: d["arrays"]["encoder.0.self.weights"].update(data=0.5)),
            "'encoder.0.self.weights' has shape ()",
        ),
        "ids without the batch axis": (edited(lambda d: d["arrays"]["ids.src"].update(data=[3, 4])), "'ids.src'"),
        "text ids": (edited(lambda d: d["arrays"]["ids.src"].update(dtype="object")), "not numbers"),
        "negative heads": (edited(lambda d: d["shape"].update(n_heads=-1)), "n_heads is -1"),
        "more layers than recorded": (edited(lambda d: d["shape"].update(n_encoder_layers=50)), "layer 3 is missing"),
        "an option in words": (edited(lambda d: d["options"].update(causal_mask="false")), "'causal_mask' is 'false'"),
        "a head the model lacks": (
            edited(lambda d: d["options"].update(ablate=[["cross", 99, 0]])),
            "cannot switch off cross layer 100",
        ),
        "a beam size in words": (edited(lambda d: d["meta"].update(beam_size="x")), "meta['beam_size']"),
        "no cross-attention": (
            edited(lambda d: [d["arrays"].pop(k) for k in list(d["arrays"]) if ".cross." in k]),
            "no cross attention",
        ),
        "no output": (edited(lambda d: d["arrays"].pop("output.ids")), "no 'output.ids'"),
    }


def test_a_damaged_or_hand_edited_trace_is_refused_with_what_is_wrong(
    saved: tuple[Path, core.Translation],
) -> None:
    """Before, these opened and every page showed 'This view failed' (or the upload a traceback); a zip bomb
    made the server allocate what it declared."""
    path, original = saved
    original.trace.save(path.with_suffix(".json"))
    cases = _broken(path)
    at = AppTest.from_function(_open_each, args=([data for data, _ in cases.values()],), default_timeout=TIMEOUT)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    shown = [m.value for m in at.markdown]
    for (name, (_, why)), line in zip(cases.items(), shown, strict=False):
        assert line.startswith("error: This file is not a trace the lab can open") and why in line, (name, line)
    assert shown[-1] == "replaying: False"


def test_the_trace_picker_takes_a_file_of_any_name_and_judges_its_content() -> None:
    """With type=['npz', 'json'] a renamed file (trace.json.txt) was refused in the browser by a red icon and no
    word; now any file reaches open_trace, which opens a trace whatever its name and names what is wrong."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run(timeout=TIMEOUT)
    picker = at.get("file_uploader")
    assert len(picker) == 1 and list(picker[0].proto.type) == []
