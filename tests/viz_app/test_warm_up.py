"""The server's warm-up (``viz_app.session.server.warm_up``): after it and the first page, no page imports a module
on its first visit — a page that starts importing something lazily makes its first visit slower for every user
(Learn's first visit spent ~0.45 s in imports before the warm-up existed).

Runs in a fresh interpreter: this test process has imported everything already, so modules cannot be counted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import build_tiny_checkpoint

from viz_app.page_table import PAGE_ROWS

REPO = Path(__file__).resolve().parents[2]
PAGES = ["head", "masks", "positional", "steps", "heads", "learn", "explain", "overview", "map", "corpus", "compare"]
VIEWS = {row.key: row.view for row in PAGE_ROWS}  # page key -> its file under viz_app/views/

SCRIPT = r"""
import json, sys
from streamlit.testing.v1 import AppTest

def problems(at):
    return [e.message for e in at.exception] + [e.value for e in at.error]

# one session visits the pages in turn (a module imported is imported for the whole process, whichever session
# imports it): a fresh AppTest per page ran the app script twice per visit
at = AppTest.from_file(sys.argv[1], default_timeout=120)
at.query_params.update({"page": "overview", "text": "The cat sleeps on the warm chair."})
at.run(timeout=120)
found = {"first": problems(at), "warm": sorted(sys.modules), "pages": {}}
for page, view in json.loads(sys.argv[2]).items():
    before = set(sys.modules)
    at.switch_page(f"views/{view}.py").run(timeout=120)
    found["pages"][page] = {"new": sorted(set(sys.modules) - before), "problems": problems(at)}
print("RESULT " + json.dumps(found))
"""


def test_no_page_imports_a_module_on_its_first_visit(tmp_path: Path) -> None:
    build_tiny_checkpoint(tmp_path / "tiny", seed=3)
    env = {**os.environ, "LAB_CHECKPOINT_ROOT": str(tmp_path), "LAB_CHECKPOINT": "tiny", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(REPO / "viz_app" / "app.py"), json.dumps({p: VIEWS[p] for p in PAGES})],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
        check=False,
    )
    line = next((l for l in done.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line is not None, done.stderr[-3000:]
    found = json.loads(line[len("RESULT ") :])
    assert found["first"] == []
    from viz_app.session.server import LAZY_MODULES

    assert set(LAZY_MODULES) <= set(found["warm"])  # the warm-up ran in the first visit and imported them all
    assert set(found["pages"]) == set(PAGES)
    for page, seen in found["pages"].items():
        assert seen["problems"] == [], page
        assert seen["new"] == [], f"the {page} page imported {seen['new']} on its first visit: add them to LAZY_MODULES"
