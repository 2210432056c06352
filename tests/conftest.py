"""Shared fixtures: a tiny random model config and a tiny checkpoint folder built on the fly; one torch thread
for the whole run; one app server and one Chromium per worker that runs browser tests; at the end, the tests
skipped because data that ``make test`` fetches is missing."""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from benchmarks.serve import CHROMIUM, CHROMIUM_ARGS, streamlit_server

if TYPE_CHECKING:
    from core import ModelConfig, Transformer

# torch and core are imported where used below, not here: under `pytest -n 2` this module is also loaded by the
# controller, which runs no test, and importing them there held back the workers' start by about 3 s

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"  # screenshots and server logs (gitignored)
# ms between a browser test's checks of a page (wait_for_function): Playwright's default checks at every animation
# frame, which keeps Chromium's renderer busy and, on 2 cores, slows the server and the other worker it waits for
POLL = 200
# screenshots of each step into test-artifacts/ only when asked (`make screenshots`): at 0.5-2 s each in software
# rendering they were a fifth of the browser tests' time; a failing browser test's tab is captured anyway (``new_tab``)
SCREENSHOTS = os.environ.get("LAB_SCREENSHOTS") == "1"
# pytester: tests/test_skip_summary.py and tests/test_xdist_browser_split.py run pytest on files of their own;
# browser_last: make test's scheduling, the browser files last and split over the two workers
pytest_plugins = ["pytester", "browser_last"]

# a skip for data that `make test` fetches (`make downloads`, `make models`, `make browser`, the word lists) and a
# failed download leaves missing: said at the end of the run, not only as one line among the skips
REAL_DATA_SKIP = re.compile(r"Ding|Bergamot|checkpoint|word lists|chromium|not downloaded|make (downloads|models)")


def pytest_configure(config: pytest.Config) -> None:
    # one intra-op thread, as the app runs (viz_app/app.py): the models here are tiny, and two threads on a shared
    # 2-core machine spin against each other (tests/core/test_beam_tree.py: 132 s with two, 17 s with one). The app's
    # script, run here by AppTest, sets its own count from LAB_TORCH_THREADS (viz_app/session/server.py): 1 too.
    os.environ["LAB_TORCH_THREADS"] = "1"
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return  # the xdist controller: it runs no test
    import torch

    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _torch_threads_unchanged() -> Iterator[None]:
    """A test that leaves torch on another thread count fails: every later test of its worker would run on it (after
    a CTranslate2 translator set the process's OpenMP threads to the 2 cores, tests/core/test_plan.py took 61 s in a
    fresh-clone run against 5 s alone, spinning against the other worker)."""
    yield
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        pytest.fail(f"the test left torch on {threads} threads instead of 1: put the caller's count back")


@contextlib.contextmanager
def new_tab(chromium: Any, name: str, viewport: dict[str, int] | None = None) -> Iterator[Any]:
    """A new tab of the worker's Chromium (the ``chromium`` fixture), ``viewport`` in pixels (else Playwright's
    1280x720), closed at the end; if the block fails, a full-page screenshot of the tab is left in
    test-artifacts/failed-NAME.png first."""
    page = chromium.new_page()
    try:
        if viewport:
            page.set_viewport_size(viewport)
        yield page
    except BaseException:
        with contextlib.suppress(Exception):  # the failure itself is what the run reports
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"failed-{name}.png"), full_page=True, timeout=30_000)
        raise
    finally:
        page.close()


def snapshot(page: Any, name: str, full_page: bool = False) -> None:
    """A screenshot of the tab as it is now, test-artifacts/NAME.png, when asked for (LAB_SCREENSHOTS=1, `make
    screenshots`), half a second after the page settled so that Plotly has drawn."""
    if SCREENSHOTS:
        page.wait_for_timeout(500)
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full_page, timeout=120_000)


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """A red section naming each test skipped for missing data, with its reason: a download that failed during
    `make test` would otherwise pass as one line in a green run."""
    missing = []
    for report in terminalreporter.stats.get("skipped", []):
        reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        if REAL_DATA_SKIP.search(reason):
            missing.append(f"{report.nodeid}: {reason}")
    if not missing:
        return
    terminalreporter.write_sep("!", f"{len(missing)} real-data test(s) SKIPPED: their data is missing", red=True)
    for line in missing:
        terminalreporter.write_line(line, red=True)
    terminalreporter.write_line(
        "These tests did not run. Fetch the data (`make downloads`, `make models`, `make browser`; they need the "
        "network) and run `make test` again.",
        bold=True,
    )


def plotly_array(value) -> np.ndarray:
    """A Plotly JSON array from a chart's spec: a plain list or the typed {dtype, bdata, shape} form."""
    if isinstance(value, dict):
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        return flat.reshape([int(n) for n in str(value.get("shape", len(flat))).split(",")])
    return np.asarray(value, dtype=float)


def tiny_config(**overrides) -> ModelConfig:
    from core import ModelConfig

    base = dict(
        src_vocab_size=64,
        tgt_vocab_size=64,
        d_model=16,
        n_heads=2,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=32,
        dropout=0.0,
    )
    base.update(overrides)
    return ModelConfig(**base)


@pytest.fixture
def cfg() -> ModelConfig:
    return tiny_config()


@pytest.fixture
def model(cfg: ModelConfig) -> Transformer:
    import torch

    from core import Transformer

    torch.manual_seed(0)
    return Transformer(cfg).eval()


@pytest.fixture(params=["attention", "ssru"])
def peaked(request):
    """A random model (a self-attention, then an SSRU decoder) with large output weights: well-separated greedy
    choices."""
    import torch

    from core import Transformer

    torch.manual_seed(11)
    m = Transformer(tiny_config(decoder_self=request.param, tie_output=False)).eval()
    with torch.no_grad():
        m.output.weight.mul_(8.0)
    return m


def build_tiny_checkpoint(directory: Path, seed: int = 0, **overrides) -> Path:
    """A real (random-weight) checkpoint folder with a SentencePiece model trained on the fixture corpus."""
    import torch

    from core import CheckpointMeta, Tokenizer, Transformer, save_checkpoint

    lines = (FIXTURES / "tiny_corpus.txt").read_text(encoding="utf-8").splitlines()
    spm_path = Tokenizer.train(
        lines * 4, directory.parent / f"{directory.name}-spm", vocab_size=120, seed_sentencepiece_size=10000
    )
    vocab = Tokenizer(spm_path).vocab_size
    torch.manual_seed(seed)
    config = tiny_config(src_vocab_size=vocab, tgt_vocab_size=vocab, **overrides)
    model = Transformer(config)
    card = "# tiny test checkpoint\n\nRandom weights, for tests only.\n"
    return save_checkpoint(model, spm_path, directory, card=card, meta=CheckpointMeta(name="tiny-test"))


@pytest.fixture(scope="session", autouse=True)
def _component_scan_once() -> Iterator[None]:
    """Each new AppTest scans the metadata of every installed package for Streamlit (v2) components on its first run:
    about 0.2 s, paid by each of the run's ~200 AppTests (196 counted) for the same empty answer (nothing is installed
    or removed during the tests). One scan per worker instead; nothing to do in a worker whose tests never imported
    streamlit (they are collected, so imported, before this runs)."""
    if "streamlit" not in sys.modules:
        yield
        return
    from streamlit.components.v2 import manifest_scanner  # imported here: most core tests never load streamlit

    with pytest.MonkeyPatch.context() as patch:
        scan = functools.cache(manifest_scanner.scan_component_manifests)
        patch.setattr(manifest_scanner, "scan_component_manifests", scan)
        yield


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny")


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The worker's one app server for its browser tests, started from the repository root as `make run` starts it, on a
    checkpoint root holding the tiny checkpoint (the default) and, linked, the default real one (open it with
    ``?ckpt=NAME``); one torch thread, as the tests compare with ``core`` run here on one thread."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (make browser) to run the browser tests")
    root = tmp_path_factory.mktemp("served_checkpoints")
    build_tiny_checkpoint(root / "tiny", seed=3)
    import core

    real = core.default_checkpoint(REPO / "checkpoints")
    if real is not None:
        (root / real).symlink_to(REPO / "checkpoints" / real, target_is_directory=True)
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")  # one log per worker's server, not one overwritten
        log, env = ARTIFACTS / f"server-{worker}.log", {"LAB_TORCH_THREADS": "1"}
        with streamlit_server(root, "tiny", log, extra_env=env, flags=()) as url:  # no flags, as `make run`
            yield url, root
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The worker's one Chromium for its browser tests, with one profile, as a user's own browser has: each test opens
    its own tabs (``new_tab``; a fresh app session per tab: a session's state lives in its link and on the server,
    not in the cookies and storage the tabs share), and the frontend's scripts, fetched and compiled for the first
    tab, come from the profile's cache for the next (in a probe, a page opened in a new tab cost the machine about
    6 CPU-s without it, 4 with it). The name evil.example resolves to this machine, as a DNS-rebinding page's would
    (tests/viz_app/test_browser_guard.py)."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (make browser) to run the browser tests")
    from playwright.sync_api import sync_playwright  # only the browser tests need Playwright

    with sync_playwright() as p:
        profile = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=str(CHROMIUM),
            args=[*CHROMIUM_ARGS, "--host-resolver-rules=MAP evil.example 127.0.0.1"],
        )
        try:
            yield profile
        finally:
            profile.close()
