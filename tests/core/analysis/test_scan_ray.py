"""The corpus scan on Ray (core.analysis.scan_ray): a local Ray instance, started and stopped by this file, writes
the same lines as the scan in this process; a missing Ray or an address nobody answers at is said in one line."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest

from core.analysis.scan import local_records, scan
from core.analysis.scan_ray import ray_records
from core.errors import LabError

PAIRS = [
    "the cat sleeps\tthe cat sleeps",
    "a dog runs in the park",
    "",  # an error line travels through Ray too
    "the house is red\tthe the the",
    "we eat bread",
    "it rains today\tit rains",
    "the bird sings",
]


@pytest.fixture(scope="module")
def ray_instance():
    """A local Ray instance for this file's tests (2 CPUs, no dashboard), shut down after them."""
    ray = pytest.importorskip("ray", reason="Ray (the scale extra) is not installed: make test installs it")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ray-scan") / "pairs.tsv"
    path.write_text("".join(line + "\n" for line in PAIRS), encoding="utf-8")
    return path


def test_a_ray_scan_writes_the_local_scans_lines_and_resumes_as_it_does(
    ray_instance, tiny_checkpoint, pairs, tmp_path
) -> None:
    local = tmp_path / "local.jsonl"
    # in batches of 2, as Ray's below: the same batches (the two lines resumed are one) compute the same floats
    scan(tiny_checkpoint, pairs, local, runner=functools.partial(local_records, batch_size=2), progress=False)
    # a scan stopped after two lines (written here by the local scan), gone on with on Ray: the five other lines,
    # an error line among them, in three batches over two actors (one start of the actors: they are slow to start)
    on_ray = tmp_path / "ray.jsonl"
    on_ray.write_bytes(b"".join(local.read_bytes().splitlines(keepends=True)[:2]))
    runner = functools.partial(ray_records, address="auto", workers=2, batch_size=2)
    summary = scan(tiny_checkpoint, pairs, on_ray, runner=runner, progress=False)
    assert (summary.resumed, summary.written, summary.errors) == (2, len(PAIRS) - 2, 1)
    assert on_ray.read_bytes() == local.read_bytes()


def test_more_workers_than_the_cluster_has_is_said(ray_instance, tiny_checkpoint, pairs, tmp_path) -> None:
    runner = functools.partial(ray_records, address="auto", workers=3)
    with pytest.raises(LabError, match="3 workers asked for, but the Ray cluster has 2 CPUs"):
        scan(tiny_checkpoint, pairs, tmp_path / "out.jsonl", runner=runner, progress=False)


def test_an_address_nobody_answers_at_is_named_at_once(tiny_checkpoint, pairs, tmp_path, capsys) -> None:
    from core.cli import main

    for address, message in [
        ("127.0.0.1:1", "--ray 127.0.0.1:1: no Ray cluster answers there"),
        ("nonsense", "--ray 'nonsense' is not an address"),
    ]:
        out = tmp_path / "out.jsonl"
        code = main(["scan", "--checkpoint", str(tiny_checkpoint), "--pairs", str(pairs), "--out", str(out),
                     "--ray", address, "--no-progress"])  # fmt: skip
        assert code == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_without_ray_installed_the_scan_says_how_to_get_it(tiny_checkpoint, pairs, tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    runner = functools.partial(ray_records, address="local")
    with pytest.raises(LabError, match=r"needs Ray, an optional extra .*\.\[scale\]"):
        scan(tiny_checkpoint, pairs, tmp_path / "out.jsonl", runner=runner, progress=False)


def test_core_and_the_scan_command_never_import_ray_unless_asked() -> None:
    code = "import sys, core, core.cli.scan, core.analysis.scan_ray; print('ray' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
