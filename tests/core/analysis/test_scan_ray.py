"""The corpus scan on Ray (core.analysis.scan_ray): a local Ray instance, started and stopped by this file, writes
the same lines as the scan in this process, also when an actor's process or the driver is killed mid-scan; a missing
Ray or an address nobody answers at is said in one line."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core.analysis.scan import local_records, scan
from core.analysis.scan_ray import ScanWorker, ray_records
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


@pytest.fixture(scope="module")
def local_scan(tiny_checkpoint, pairs, tmp_path_factory) -> bytes:
    """The bytes the scan in this process writes, in batches of 2 as the Ray scans below: the same batches compute
    the same floats."""
    out = tmp_path_factory.mktemp("local-scan") / "local.jsonl"
    scan(tiny_checkpoint, pairs, out, runner=functools.partial(local_records, batch_size=2), progress=False)
    return out.read_bytes()


def killed_once_on(line: int, marker: Path, scored: Path) -> type[ScanWorker]:
    """A ``ScanWorker`` whose process kills itself (SIGKILL, as the kernel's OOM killer would) the first time an actor
    is handed the batch holding input ``line``, after writing its PID to ``marker`` (created exclusively: one actor
    dies, once). Every batch scored appends "PID LINE LINE..." to ``scored``. Made inside a function, so that Ray
    pickles the class by value: its workers never import this test file."""

    class KilledOnce(ScanWorker):
        def __call__(self, rows: dict[str, Any]) -> dict[str, list[str]]:
            lines = [fields["line"] for text in rows["batch"] for fields in json.loads(text)]
            if line in lines:
                try:
                    fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:  # killed once already: this is the batch run again
                    pass
                else:
                    os.write(fd, str(os.getpid()).encode())
                    os.close(fd)
                    os.kill(os.getpid(), signal.SIGKILL)
            records = super().__call__(rows)
            with open(scored, "a", encoding="utf-8") as f:
                f.write(" ".join(map(str, [os.getpid(), *lines])) + "\n")
            return records

    return KilledOnce


def test_an_actor_killed_mid_scan_is_restarted_and_its_batch_run_again(
    ray_instance, tiny_checkpoint, pairs, local_scan, tmp_path
) -> None:
    marker, scored = tmp_path / "killed.pid", tmp_path / "scored.txt"
    worker_class = killed_once_on(4, marker, scored)  # line 4: the second of the four batches of 2
    runner = functools.partial(ray_records, address="auto", workers=2, batch_size=2, worker_class=worker_class)
    on_ray = tmp_path / "ray.jsonl"
    summary = scan(tiny_checkpoint, pairs, on_ray, runner=runner, progress=False)
    assert (summary.written, summary.errors) == (len(PAIRS), 1)
    assert on_ray.read_bytes() == local_scan  # complete, in input order, the local scan's bytes
    killed = int(marker.read_text())  # the kill happened: the dying process wrote its PID
    scorers = [(int(n), int(pid)) for pid, *lines in map(str.split, scored.read_text().splitlines()) for n in lines]
    assert sorted(n for n, _ in scorers) == list(range(1, len(PAIRS) + 1))  # every line scored once, by a live process
    assert dict(scorers)[4] != killed  # the killed batch was run again, by another process (the actor restarted)


DRIVER = """
import functools, os, signal, sys
from core.analysis.scan import scan
from core.analysis.scan_ray import ray_records

def killed_after_three(n):
    if n == 3:
        os.kill(os.getpid(), signal.SIGKILL)

checkpoint, pairs, out, address = sys.argv[1:]
runner = functools.partial(ray_records, address=address, workers=2, batch_size=2)
scan(checkpoint, pairs, out, runner=runner, progress=False, on_record=killed_after_three)
"""


def test_a_ray_scan_whose_driver_was_killed_goes_on_on_ray(
    ray_instance, tiny_checkpoint, pairs, local_scan, tmp_path
) -> None:
    # a driver of its own, on this file's Ray instance, SIGKILLed after its third line, inside its second batch of
    # two: its actors, holding both of the instance's CPUs, must go with it, or the scan that goes on could not
    # start its own; that scan scores the batch holding line 4 whole again and writes from line 4 on
    on_ray = tmp_path / "ray.jsonl"
    address = ray_instance.get_runtime_context().gcs_address
    args = [sys.executable, "-c", DRIVER, str(tiny_checkpoint), str(pairs), str(on_ray), address]
    driver = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert driver.returncode == -signal.SIGKILL, driver.stderr
    assert on_ray.read_bytes().splitlines() == local_scan.splitlines()[:3]
    runner = functools.partial(ray_records, address="auto", workers=2, batch_size=2)
    summary = scan(tiny_checkpoint, pairs, on_ray, runner=runner, progress=False)
    assert (summary.resumed, summary.written, summary.errors) == (3, len(PAIRS) - 3, 1)
    assert on_ray.read_bytes() == local_scan


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
