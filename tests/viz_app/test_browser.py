"""End-to-end in a real browser: the app served as `make run` serves it + Debian's Chromium driven by Playwright
(the worker's app server and Chromium: ``lab_server``, ``chromium`` in tests/conftest.py).

Runs against the real checkpoint a user meets first (a tiny random one where there is none).
Screenshots go to test-artifacts/ (gitignored).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from conftest import POLL, SCREENSHOTS, new_tab, snapshot

import core

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
SENTENCE = "The cat sleeps on the warm chair."


def _figure_titles(page) -> list[str]:
    return page.eval_on_selector_all(".js-plotly-plot .gtitle", "els => els.map(e => e.textContent)")


def _until_a_title(page, test: str) -> None:
    """Wait (at most 20 s) until some figure's title passes ``test``, a JS function of the title text (Plotly draws
    titles a moment after the script is idle); the timeout names the titles there were."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            f"() => [...document.querySelectorAll('.js-plotly-plot .gtitle')].some(t => ({test})(t.textContent))",
            timeout=20_000,
            polling=POLL,
        )
    except PlaywrightTimeout:
        raise AssertionError(f"no figure title passes {test}: {_figure_titles(page)}") from None


@pytest.fixture
def served(lab_server: tuple[str, Path]) -> tuple[str, Path, str]:
    """The shared server (tests/conftest.py) and the checkpoint a user meets first (checkpoints/DEFAULT, opened with
    ?ckpt=); the tiny one (the server's default) where there is none. One checkpoint: the flow is the same code for
    any (the tiny model's pages are the AppTests' and test_browser_claims.py's)."""
    url, root = lab_server
    name = core.default_checkpoint(REPO / "checkpoints")
    if name is None or not (root / name).exists():
        return url, root, "tiny"
    return url, root, name


def test_type_translate_and_toggle_positional_encoding(served: tuple[str, Path, str], chromium: object) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    url, root, name = served
    torch.set_num_threads(1)  # the app's setting on this machine: identical arithmetic, identical greedy choices
    bundle = core.load(root / name, device="cpu")
    sentence = SENTENCE if bundle.languages[0] == "en" else "O gato dorme na cadeira quente."
    expected = bundle.translate(sentence).text
    expected_no_pe = bundle.translate(sentence, options=core.InferenceOptions(positional_encoding=False)).text
    # a tall tab only when screenshots are asked for (make screenshots): less to paint in software otherwise
    viewport = {"width": 1400, "height": 2200 if SCREENSHOTS else 900}
    with new_tab(chromium, f"browser-{name}", viewport=viewport) as page:
        requested: list[str] = []
        page.on("request", lambda request: requested.append(request.url))
        page.goto(url if name == "tiny" else f"{url}/?ckpt={name}", timeout=120_000)
        page.wait_for_selector(".js-plotly-plot .heatmaplayer", timeout=120_000)
        box = page.locator(".st-key-text input")
        box.fill(sentence)
        start = time.time()
        box.press("Enter")
        page.wait_for_function(
            """([want]) => [...document.querySelectorAll('h4')].some(h => h.innerText.trim() === want)""",
            arg=[expected or "∅ (the model produced no words)"],
            timeout=60_000,
            polling=POLL,
        )
        page.wait_for_function(
            """() => { const plots = [...document.querySelectorAll('.js-plotly-plot')];
                       return plots.length >= 2 && plots.every(p => p.querySelector('.heatmaplayer image'))
                              && document.querySelector('[data-testid="stApp"]')
                                         .getAttribute('data-test-script-state') === 'notRunning'; }""",
            timeout=60_000,
            polling=POLL,
        )
        elapsed = time.time() - start
        print(f"\n[{name}] Enter -> translation and heatmaps drawn in {elapsed:.2f} s")
        snapshot(page, f"browser-{name}-overview")
        _until_a_title(page, "t => t.includes('as trained')")

        page.locator(".st-key-pe label").click()
        page.wait_for_function(
            """() => document.querySelector('section[data-testid="stSidebar"]').innerText.includes('PE off')""",
            timeout=60_000,
            polling=POLL,
        )
        page.wait_for_function(
            """() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]
                     .some(t => t.textContent.includes('PE off'))""",
            timeout=60_000,
            polling=POLL,
        )
        if expected_no_pe != expected:
            page.wait_for_function(
                """([want]) => [...document.querySelectorAll('h4')].some(h => h.innerText.trim() === want)""",
                arg=[expected_no_pe or "∅ (the model produced no words)"],
                timeout=60_000,
                polling=POLL,
            )
        page.wait_for_function(  # the link follows (the app writes it at the end of its run)
            "() => new URLSearchParams(location.search).get('pe') === '0'", timeout=30_000, polling=POLL
        )
        snapshot(page, f"browser-{name}-pe-off")

        idle = """() => document.querySelector('[data-testid="stApp"]')
                            .getAttribute('data-test-script-state') === 'notRunning'"""
        for attempt in range(3):  # the export is made on click; a click during a rerun can be dropped
            page.wait_for_function(idle, timeout=60_000, polling=POLL)
            try:
                with page.expect_download(timeout=30_000) as download:
                    page.locator(".st-key-dl_json button").click()
                break
            except PlaywrightTimeout:
                if attempt == 2:
                    raise
        exported = json.loads(Path(download.value.path()).read_text(encoding="utf-8"))
        assert exported["options"]["positional_encoding"] is False
        assert "decoder.0.cross.weights" in exported["arrays"] and exported["meta"]["text"] == expected_no_pe
        assert exported["meta"]["source_text"] == sentence  # the file says what was translated, and by which model
        assert download.value.suggested_filename.startswith(f"{bundle.name}_")

        # the exported file opens again in the sidebar and replays the run without the model
        saved = ARTIFACTS / f"browser-{name}-trace.json"
        Path(download.value.path()).replace(saved)
        page.wait_for_function(idle, timeout=60_000, polling=POLL)
        page.get_by_text("Open a saved trace").click()
        page.locator('section[data-testid="stSidebar"] input[type="file"]').set_input_files(str(saved))
        page.wait_for_function(
            """() => document.querySelector('section[data-testid="stSidebar"]').innerText
                         .includes('Replaying a saved trace')""",
            timeout=60_000,
            polling=POLL,
        )
        page.wait_for_function(
            """([want]) => [...document.querySelectorAll('h4')].some(h => h.innerText.trim() === want)""",
            arg=[expected_no_pe or "∅ (the model produced no words)"],
            timeout=60_000,
            polling=POLL,
        )
        page.wait_for_function(idle, timeout=60_000, polling=POLL)
        _until_a_title(page, "t => t.includes('PE off')")
        snapshot(page, f"browser-{name}-replay")
        page.locator(".st-key-close_trace button").click()
        page.wait_for_function(
            """() => !document.querySelector('section[data-testid="stSidebar"]').innerText
                          .includes('Replaying a saved trace')""",
            timeout=60_000,
            polling=POLL,
        )
        page.wait_for_function(idle, timeout=60_000, polling=POLL)  # the run over, its link written

        page.goto(f"{url}/head?{page.url.split('?', 1)[1]}", timeout=60_000)  # a copied link restores the view
        page.wait_for_selector(".js-plotly-plot .heatmaplayer", timeout=60_000)
        _until_a_title(page, "t => t.includes('PE off')")
        snapshot(page, f"browser-{name}-head")

        page.goto(f"{url}/explain?{page.url.split('?', 1)[1]}", timeout=60_000)  # Why this word?
        page.wait_for_function(
            """() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]
                     .filter(t => t.textContent.includes('PE off')).length >= 2""",
            timeout=120_000,
            polling=POLL,
        )
        page.wait_for_function(idle, timeout=60_000, polling=POLL)
        _until_a_title(page, "t => t.startsWith('Cross-attention')")
        snapshot(page, f"browser-{name}-explain")
        page.goto(f"{url}/heads?{page.url.split('?', 1)[1]}", timeout=60_000)  # What does each head do?
        page.wait_for_function(
            """() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]
                     .some(t => t.textContent.startsWith('Encoder self-attention: entropy'))""",
            timeout=120_000,
            polling=POLL,
        )
        page.wait_for_function(idle, timeout=60_000, polling=POLL)
        page.get_by_text("Which cross-attention heads align words?").wait_for(timeout=60_000)
        # PE is off here: the default model's translation may be empty (no links)
        _until_a_title(page, "t => t.startsWith('Cross-attention') || t.startsWith('Links read from')")
        snapshot(page, f"browser-{name}-heads", full_page=True)
        # the page loads nothing from outside the machine: every request went to the app's own origin
        outside = [u for u in requested if not u.startswith(url) and not u.startswith(("data:", "blob:"))]
        assert requested and not outside, outside[:5]


def test_clicking_a_dot_of_the_tree_selects_that_hypothesis(lab_server: tuple[str, Path], chromium: object) -> None:
    """A click on a pruned hypothesis of the beam tree (step 4, rank 3) opens its attention and moves the pickers
    (on the worker's server and Chromium)."""
    url, _ = lab_server
    idle = """() => document.querySelector('[data-testid="stApp"]')
                        ?.getAttribute('data-test-script-state') === 'notRunning'"""
    position = """([step, rank]) => {
        const gd = [...document.querySelectorAll('.js-plotly-plot')]
            .find(p => (p.layout?.title?.text || '').includes('Beam search tree'));
        gd.scrollIntoView();
        const fl = gd._fullLayout, r = gd.getBoundingClientRect();
        return [r.left + fl.xaxis._offset + fl.xaxis.l2p(step), r.top + fl.yaxis._offset + fl.yaxis.l2p(rank)];
    }"""
    with new_tab(chromium, "beam-tree", viewport={"width": 1400, "height": 1600}) as page:
        page.goto(f"{url}/steps?beam=2&ckpt=tiny", timeout=120_000)
        page.wait_for_function(
            """() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]
                     .some(t => t.textContent.startsWith('Beam search tree'))""",
            timeout=120_000,
            polling=POLL,
        )
        page.wait_for_function(idle, timeout=60_000, polling=POLL)
        page.mouse.click(*page.evaluate(position, [4, 3]))  # step 4, rank 3: a pruned hypothesis
        page.wait_for_function(  # the figure below the pickers now shows that hypothesis's attention
            """() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]
                     .some(t => t.textContent.startsWith('Cross-attention at step 4, scoring'))""",
            timeout=60_000,
            polling=POLL,
        )
        page.wait_for_function(idle, timeout=60_000, polling=POLL)
        picked = page.locator(".st-key-tree_node input").first  # the hypothesis picker followed
        assert picked.input_value().startswith("rank 3 ·"), picked.input_value()
        assert page.locator(".st-key-tree_step input").first.input_value() == "Step 4"
        snapshot(page, "browser-tiny-beam-tree")


def test_opening_folders_transformers_5_wrote(
    lab_server: tuple[str, Path], chromium: object, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """ "Open a Hugging Face folder" in the sidebar, typed as a person would: a T5 v1.1 saved by transformers 5
    (tokenizer.json only) and an mBART whose target language is only its decoder's start token (as
    mbart-large-en-ro) are imported, selected and translated; the sidebar says where the mBART's languages came
    from, and the translation is core's on the imported checkpoint."""
    from hf_wild_folders import build_mbart, build_t5

    url, root = lab_server
    base = tmp_path_factory.mktemp("wild")
    folders = {"t5-saved-by-transformers-5": build_t5, "mbart-en-ro-like": build_mbart}
    idle = """() => document.querySelector('[data-testid="stApp"]')
                        ?.getAttribute('data-test-script-state') === 'notRunning'"""
    for name, build in folders.items():
        folder = build(base / name)
        with new_tab(chromium, f"open-{name}", viewport={"width": 1280, "height": 900}) as page:
            page.goto(f"{url}/?ckpt=tiny", timeout=120_000)
            page.wait_for_function(idle, timeout=120_000, polling=POLL)
            page.get_by_text("Open a Hugging Face folder").click()
            field = page.locator(".st-key-hf_folder input")
            field.fill(str(folder))
            field.press("Enter")
            page.wait_for_function(idle, timeout=60_000, polling=POLL)
            page.locator(".st-key-hf_import button").click()
            page.get_by_text(f"Imported {name}").wait_for(timeout=120_000)
            page.wait_for_function(idle, timeout=120_000, polling=POLL)
            _until_a_title(page, "t => t.length > 0")
            sidebar = page.locator('[data-testid="stSidebar"]').inner_text()
            assert "Imported from the Hugging Face folder" in sidebar, sidebar
            if name.startswith("mbart"):
                said = "the target language (ro_RO) from generation_config.json decoder_start_token_id"
                assert said in " ".join(sidebar.split()), sidebar
            bundle = core.load(root / name, device="cpu")
            text = page.locator(".st-key-text input, .st-key-text textarea").first.input_value()
            shown = page.locator('[data-testid="stMain"]').inner_text()
            theirs = bundle.translate(text).text
            assert theirs.strip() and theirs in shown, (theirs, shown[:600])
            snapshot(page, f"browser-open-{name}")
