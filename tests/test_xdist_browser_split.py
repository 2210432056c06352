"""make test's scheduling (tests/browser_last.py), run for real: pytest -n 2 --dist loadfile on files of its own.
(Not named test_browser*: that would make this file a browser file.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from browser_last import BROWSER_ORDER, is_browser_file

TESTS = Path(__file__).parent
# each test notes which worker ran it, in order; a unit file's tests take a while, so the workers overlap
RECORDER = """
import json, os, time
from pathlib import Path

def note(name, seconds):
    time.sleep(seconds)
    with open(os.environ["SPLIT_LOG"], "a") as f:
        f.write(json.dumps([os.environ["PYTEST_XDIST_WORKER"], name]) + "\\n")
"""


def _test_file(name: str, n: int, seconds: float, browser: bool) -> str:
    mark = "import pytest\npytestmark = pytest.mark.browser\n" if browser else ""
    tests = "".join(f"def test_{i}():\n    note('{name}', {seconds})\n\n" for i in range(n))
    return f"from recorder import note\n{mark}\n{tests}"


def test_the_browser_files_run_last_and_on_both_workers(pytester: pytest.Pytester, tmp_path: Path, monkeypatch) -> None:
    """The browser files and six unit files on two workers: each worker runs its unit files
    first, and the first two browser files run on different workers (xdist's loadfile gives the next file to the
    first worker with two tests or fewer left, here the one running a browser file)."""
    pytester.makeini("[pytest]\nmarkers =\n    browser: real Chromium end-to-end tests\n")
    pytester.makepyfile(recorder=RECORDER)
    # the first unit file holds one worker for 1.5 s: the other worker meanwhile runs the rest and reaches the
    # browser files; plain loadfile would give it the second one too, at its first finished browser test
    files = {"test_unit_0": _test_file("unit_0", 1, 1.5, False)}
    files |= {f"test_unit_{i}": _test_file(f"unit_{i}", 3, 0.03, False) for i in range(1, 6)}
    for name in BROWSER_ORDER:  # written first, collected after the unit files all the same
        files[name.removesuffix(".py")] = _test_file(name, 2, 0.25, True)
    pytester.makepyfile(**files)
    log = tmp_path / "split.jsonl"
    monkeypatch.setenv("SPLIT_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", f"{pytester.path}:{TESTS}")
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-p", "browser_last", "-p", "no:randomly")
    result.assert_outcomes(passed=1 + 5 * 3 + len(BROWSER_ORDER) * 2)
    ran = [json.loads(line) for line in log.read_text().splitlines()]
    by_worker: dict[str, list[str]] = {}
    for worker, name in ran:
        by_worker.setdefault(worker, []).append(name)
    assert len(by_worker) == 2, by_worker
    where = {name: worker for worker, name in ran if is_browser_file(name)}
    claims, journey = BROWSER_ORDER[:2]
    assert where[claims] != where[journey], where
    for names in by_worker.values():  # on each worker, no unit test after a browser test
        first = next(i for i, n in enumerate(names) if is_browser_file(n))
        assert not any(n.startswith("unit_") for n in names[first:]), names


def test_a_browser_test_outside_a_browser_file_is_refused(pytester: pytest.Pytester, monkeypatch) -> None:
    pytester.makeini("[pytest]\nmarkers =\n    browser: real Chromium end-to-end tests\n")
    pytester.makepyfile(test_pages="import pytest\n\n@pytest.mark.browser\ndef test_x():\n    pass\n")
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    result = pytester.runpytest_subprocess("-p", "browser_last")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*browser tests belong in tests/viz_app/test_browser*.py files*test_pages.py*"])
