"""The app's cache: bounded by bytes for all sessions, least recently used dropped first, q/k/v only where read."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import build_tiny_checkpoint
from streamlit.testing.v1 import AppTest

import core
from viz_app import cache
from viz_app.cache import ByteBudgetCache, weigh

APP = Path(__file__).resolve().parents[2] / "viz_app" / "app.py"


def test_weigh_counts_array_bytes_once() -> None:
    a = np.zeros((1000,), dtype=np.float32)
    assert weigh(a) == 4000
    assert 4000 <= weigh((a, a, [a])) < 4000 + 500  # the same array inside twice counts once
    assert weigh({"t": torch.zeros(10, 10)}) >= 400


def test_least_recently_used_results_go_first_within_the_budget() -> None:
    c = ByteBudgetCache(budget=10_000)
    for name in "abc":
        c.get(name, lambda: np.zeros(3000, dtype=np.uint8))
    c.get("a", lambda: pytest.fail("'a' is cached"))  # touch a: b is now the oldest
    c.get("d", lambda: np.zeros(3000, dtype=np.uint8))
    assert "b" not in c and {"a", "c", "d"} <= {k for k in "abcd" if k in c}
    assert c.total <= c.budget
    big = c.get("big", lambda: np.zeros(20_000, dtype=np.uint8))  # larger than the budget: returned, not kept
    assert big.nbytes == 20_000 and "big" not in c and c.total <= c.budget


def test_concurrent_calls_for_one_key_compute_once() -> None:
    c = ByteBudgetCache(budget=10**6)
    calls = []

    def slow() -> np.ndarray:
        calls.append(1)
        time.sleep(0.2)
        return np.ones(10)

    results: list[np.ndarray] = []
    threads = [threading.Thread(target=lambda: results.append(c.get("k", slow))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(results) == 6 and all(r is results[0] for r in results)


def test_a_failed_computation_is_not_cached() -> None:
    c = ByteBudgetCache(budget=10**6)
    with pytest.raises(core.InputError):
        c.get("k", lambda: (_ for _ in ()).throw(core.InputError("bad")))
    assert "k" not in c and c.get("k", lambda: 5) == 5


@pytest.mark.parametrize(("env", "mb"), [("", 512), ("64", 64), ("0.5", 0.5), ("-3", 512), ("lots", 512)])
def test_budget_from_the_environment(monkeypatch: pytest.MonkeyPatch, env: str, mb: float) -> None:
    monkeypatch.setenv("LAB_CACHE_MB", env)
    assert cache.budget_bytes() == int(mb * 1e6)


def test_the_app_caches_traces_without_qkv_except_for_the_learn_page(tmp_path: Path, monkeypatch) -> None:
    build_tiny_checkpoint(tmp_path / "tiny", seed=3)
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(tmp_path))
    monkeypatch.setenv("LAB_CHECKPOINT", "tiny")
    torch.set_num_threads(1)
    shared = cache.shared()
    shared.clear()
    at = AppTest.from_file(str(APP), default_timeout=90).run(timeout=90)
    assert not at.exception
    traces = [v for v, _ in shared._entries.values() if isinstance(v, core.Translation)]
    assert traces and all("encoder.0.self.q" not in t.trace for t in traces)
    at.switch_page("views/learn.py").run(timeout=90)
    assert not at.exception and not at.error
    traces = [v for v, _ in shared._entries.values() if isinstance(v, core.Translation)]
    assert any("encoder.0.self.q" in t.trace for t in traces)  # the Learn page's own run
    assert shared.total == sum(size for _, size in shared._entries.values()) <= shared.budget


def test_one_call_is_one_entry_however_its_arguments_are_spelled(monkeypatch) -> None:
    shared = cache.shared()
    shared.clear()
    calls: list[tuple[int, bool]] = []

    @cache.cached("…")
    def f(a: int, flag: bool = False) -> np.ndarray:
        calls.append((a, flag))
        return np.zeros(4)

    first = f(1)
    assert f(1, False) is first and f(1, flag=False) is first and f(a=1) is first
    assert cache.peek(f, 1) is first and cache.peek(f, 1, False) is first and cache.peek(f, 2) is None
    f(1, True)
    assert calls == [(1, False), (1, True)]


def test_pages_reuse_the_translation_they_show(tmp_path: Path, monkeypatch) -> None:
    """Learn and Why this word? build on the page's translation: it is not decoded again for them."""
    build_tiny_checkpoint(tmp_path / "tiny", seed=3)
    monkeypatch.setenv("LAB_CHECKPOINT_ROOT", str(tmp_path))
    monkeypatch.setenv("LAB_CHECKPOINT", "tiny")
    torch.set_num_threads(1)
    cache.shared().clear()
    decoded: list[tuple[str, object, int]] = []
    real = core.Bundle.translate

    def counting(self, text, options=None, **kwargs):
        decoded.append((text, options, kwargs.get("beam_size", 1)))
        return real(self, text, options, **kwargs)

    monkeypatch.setattr(core.Bundle, "translate", counting)
    at = AppTest.from_file(str(APP), default_timeout=90).run(timeout=90)
    assert not at.exception and len(decoded) == 1
    for page in ("views/learn.py", "views/explain.py"):
        at.switch_page(page).run(timeout=90)
        assert not at.exception and not at.error
    shown = decoded[0]
    assert decoded.count(shown) == 1, decoded  # the others have other switches ("with only the top k heads")


def test_the_options_key_carries_every_switch_and_gives_the_options_back() -> None:
    import dataclasses

    from viz_app.session import runs

    base = core.InferenceOptions()
    changed = {
        "positional_encoding": False,
        "causal_mask": False,
        "padding_mask": False,
        "ablate": frozenset({("cross", 1, 2), ("encoder", 0, 1)}),
        "encoder_pe": False,
        "decoder_pe": False,
        "shortlist": True,
    }
    assert set(changed) == {f.name for f in dataclasses.fields(base)}  # a new switch must be added here too
    for name, value in changed.items():
        options = base.with_changes(**{name: value})
        key = runs.options_key(options)
        assert hash(key) != hash(runs.options_key(base)) and runs.options_from_key(key) == options, name
