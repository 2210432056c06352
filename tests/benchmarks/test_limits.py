"""The benchmark's floors: what it says of the machine's caches comes from what the kernel reports."""

from __future__ import annotations

from pathlib import Path

from benchmarks.limits import last_level_cache


def cache_tree(root: Path, sizes: dict[str, str]) -> Path:
    for index, size in sizes.items():
        (root / index).mkdir(parents=True)
        (root / index / "size").write_text(size + "\n")
    return root


def test_last_level_cache_is_the_largest_size_reported(tmp_path: Path) -> None:
    root = cache_tree(tmp_path, {"index0": "48K", "index1": "32K", "index2": "2048K", "index3": "491520K"})
    assert last_level_cache(root) == 491520 << 10


def test_last_level_cache_reads_megabytes_and_skips_what_it_cannot_read(tmp_path: Path) -> None:
    root = cache_tree(tmp_path, {"index0": "32K", "index2": "32M", "index3": "n/a"})
    (root / "index4").mkdir()  # no size file
    assert last_level_cache(root) == 32 << 20


def test_no_cache_reported_is_none(tmp_path: Path) -> None:
    assert last_level_cache(tmp_path / "missing") is None
