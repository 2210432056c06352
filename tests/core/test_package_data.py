"""The data core reads at run time ships inside the package: it is under core/, matched by pyproject.toml's
package-data, and read through importlib.resources (a pip-installed lab has no tests/ folder)."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

from core.analysis.survey import GOLD_DIR, gold_pairs, gold_source

REPO = Path(__file__).resolve().parents[2]


def test_every_data_file_is_package_data() -> None:
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"
    ]["core"]
    data = sorted(p for p in (REPO / "core" / "data").iterdir() if p.is_file())
    assert data, "core/data is empty"
    for path in data:
        assert any(path.match(f"core/{pattern}") for pattern in patterns), f"{path.name} would not be installed"


def test_the_gold_alignments_are_read_from_the_package() -> None:
    assert GOLD_DIR == Path(str(resources.files("core") / "data")) and GOLD_DIR.is_relative_to(REPO / "core")
    assert (
        gold_source("en", "pt") == "align_en_pt.tsv" and gold_source("pt", "en") == "align_en_pt.tsv, read in reverse"
    )
    forward, reverse = gold_pairs("en", "pt"), gold_pairs("pt", "en")
    assert forward and reverse and len(forward) == len(reverse) >= 50
    assert (reverse[0].source, reverse[0].target) == (forward[0].target, forward[0].source)
    assert gold_pairs("en", "de") and gold_pairs("fr", "ja") is None
