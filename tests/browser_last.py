"""make test's scheduling, a pytest plugin (tests/conftest.py loads it): ``--dist loadfile`` (a file's tests on one
worker, sharing its fixtures) with the browser files (tests/viz_app/test_browser*.py) last, in BROWSER_ORDER, and
never two of them on one worker while another worker has none. Each worker then runs its own app server and Chromium
(``lab_server``, ``chromium``) for its share of the browser tests, side by side at the end of the run.

Why: beside unit tests on 2 cores the server and Chromium slowed to a crawl (fresh-clone runs: 6.6 min of tests with
them last, 7.4-8.4 min with them first, even with the other worker at nice 10); all on one worker after the others,
they took about 150 s of the run's 400 with the other core idle. (pytest-xdist 3.8's loadgroup does not group on
pytest 9: it renames ``item._nodeid``, which pytest 9 no longer reads.)
Imports nothing heavy: tests/test_xdist_browser_split.py runs it in pytest processes of their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

BROWSER_FILES = "test_browser"  # every browser test lives in a file named so (marked browser too)
# the browser files, longest first: the first worker done with its other files takes the claims sweep, the other the
# rest (a name not listed runs after these)
BROWSER_ORDER = (
    "test_browser_claims.py",
    "test_browser.py",
    "test_browser_widths.py",
    "test_browser_corpus.py",
    "test_browser_guard.py",
)


def is_browser_file(scope: str) -> bool:
    """Whether a node id or xdist scope (``path::name`` or ``path``) is in a browser file."""
    return Path(scope.split("::")[0]).name.startswith(BROWSER_FILES)


class BrowserFilesApart(LoadFileScheduling):
    """--dist loadfile, except that a worker holding an unfinished browser file is not given the next one while
    another worker holds none: that worker takes it when it next asks (at its next finished test)."""

    def _holds_browser_file(self, node: Any) -> bool:
        return any(
            is_browser_file(scope) and not all(done.values())
            for scope, done in self.assigned_work.get(node, {}).items()
        )

    def _reschedule(self, node: Any) -> None:
        if self.workqueue and not node.shutting_down and is_browser_file(next(iter(self.workqueue))):
            others = [n for n in self.nodes if n is not node and not n.shutting_down]
            if self._holds_browser_file(node) and any(not self._holds_browser_file(n) for n in others):
                return
        super()._reschedule(node)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadFileScheduling | None:
    if config.getvalue("dist") != "loadfile":
        return None
    config.option.loadscopereorder = False  # the collection's order (browser files last), not the most tests first
    return BrowserFilesApart(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The browser files last, in BROWSER_ORDER (files keep their order otherwise). A browser test outside a
    test_browser* file would run among the unit tests: refused."""
    stray = [i.nodeid for i in items if i.get_closest_marker("browser") and not is_browser_file(i.nodeid)]
    if stray:
        raise pytest.UsageError(f"browser tests belong in tests/viz_app/{BROWSER_FILES}*.py files: {stray}")

    def order(item: pytest.Item) -> tuple[int, int]:
        if not is_browser_file(item.nodeid):
            return (0, 0)
        name = item.path.name
        return (1, BROWSER_ORDER.index(name) if name in BROWSER_ORDER else len(BROWSER_ORDER))

    items.sort(key=order)
