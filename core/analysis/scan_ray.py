"""The corpus scan on a Ray cluster with Ray Data: the local scan's batches mapped over a pool of actors, each
loading the checkpoint once.

``ray_records`` is a ``scan.Runner``: it yields the same records as ``scan.local_records``, in input order. The
driver forms the local scan's batches (``scan.batches``, with the checkpoint's tokenizer), and each becomes one row
of a ``ray.data`` dataset; ``map_batches`` hands one row at a time to a ``ScanWorker`` of an actor pool, which scores
it as the local scan scores a batch (``scan.score_batch``; ``score_pair`` of each at ``--batch-size 1``), and the
rows come back in input order (``preserve_order``), one record each, streamed, so ``scan.scan`` writes, flushes and
resumes them the same way. The checkpoint's files travel through Ray's object store, so the cluster's machines need
the lab installed but not the checkpoint. Each actor asks for one GPU when the cluster has GPUs, else for one CPU
(and then runs torch on one thread). An actor that dies is restarted and its batch run again (Ray Data's actor
pool's ``max_restarts=-1`` and ``max_task_retries=-1``, unlimited: its defaults, passed all the same; tested by
killing an actor's process mid-batch).

Ray is an optional extra (``pip install -c constraints.txt -e '.[scale]'``): it is imported inside ``ray_records``
only, so ``core`` and a scan without ``--ray`` never need it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import socket
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from ..bundle import load
from ..errors import LabError
from .scan import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BATCH_TOKENS,
    Pair,
    ScanSettings,
    batches,
    from_batch,
    model_id,
    score_batch,
    score_pair,
)

PROBE_SECONDS = 5.0  # ray.init retries an address nobody answers at for minutes; a socket says so at once
INSTALL = "pip install -c constraints.txt -e '.[scale]'"


class ScanWorker:
    """One actor of the pool: the checkpoint loaded once (from the files the driver sent), then batches scored.

    Called by ``map_batches`` with one dataset row at a time: ``{"batch": [JSON of a batch's pairs]}``; returns
    ``{"record": [JSON of each record]}``, one row per pair, in order."""

    def __init__(
        self, files: Any, folder: str, settings: ScanSettings, model: str, device: str, one_by_one: bool
    ) -> None:
        torch.set_num_threads(1)  # this process is the actor's own, and it asked for one CPU (or one GPU)
        if not isinstance(files, dict):  # the object ref the driver put, resolved here
            import ray  # only ever run inside a Ray worker

            files = ray.get(files)
        with tempfile.TemporaryDirectory(prefix="scan-checkpoint-") as tmp:
            path = Path(tmp) / folder
            path.mkdir()
            for name, data in files.items():
                (path / name).write_bytes(data)
            self.bundle = load(path, device=device)  # weights, tokenizer and shortlist are in memory after this
        self.settings, self.model, self.one_by_one = settings, model, one_by_one

    def __call__(self, rows: dict[str, Any]) -> dict[str, list[str]]:
        records: list[dict[str, Any]] = []
        for text in rows["batch"]:
            pairs = [Pair(**fields) for fields in json.loads(text)]
            if self.one_by_one:
                records += [score_pair(self.bundle, pair, self.settings, self.model) for pair in pairs]
            else:
                records += score_batch(self.bundle, pairs, self.settings, self.model)
        return {"record": [json.dumps(record, ensure_ascii=False) for record in records]}


def checkpoint_files(checkpoint: Path) -> dict[str, bytes]:
    """The files of a checkpoint folder (not its sub-folders), by name."""
    return {p.name: p.read_bytes() for p in sorted(checkpoint.iterdir()) if p.is_file()}


def local_batches(checkpoint: Path, pairs: Sequence[Pair], batch_size: int, batch_tokens: int) -> list[list[Pair]]:
    """The batches the local scan forms of ``pairs`` (``scan.batches`` with the checkpoint's tokenizer, loaded on
    the CPU here; at batch size 1, each pair alone): the same batches compute the same floats."""
    if batch_size == 1:
        return [[pair] for pair in pairs]
    return list(batches(load(checkpoint, device="cpu"), pairs, batch_size, batch_tokens))


def ray_records(
    checkpoint: Path,
    pairs: Sequence[Pair],
    settings: ScanSettings,
    *,
    start: int = 0,
    address: str,
    workers: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    worker_class: type[ScanWorker] = ScanWorker,
) -> Iterator[dict[str, Any]]:
    """Score ``pairs`` on the Ray cluster at ``address`` (``host:port``, ``ray://host:port``, ``auto`` for the one
    running here or named by ``RAY_ADDRESS``, ``local`` to start one in this process) with a pool of ``workers``
    actors (default: one per GPU of the cluster, else one per CPU). In a process where Ray is already initialised,
    that instance is used as it is. The pairs are cut into the local scan's batches (``batch_size`` pairs within
    ``batch_tokens``), each scored by one actor as the local scan scores it; from ``start`` on, as the local scan
    resumes (``scan.from_batch``). Records come in input order.
    ``worker_class`` is the actors' class: ``ScanWorker`` or a subclass (the fault test's kills its process once)."""
    if batch_size < 1 or batch_tokens < 1 or (workers is not None and workers < 1):
        raise LabError(
            f"the batch size, batch tokens and number of workers are at least 1 (got {batch_size}, {batch_tokens}, "
            f"{workers})"
        )
    try:
        import ray  # the optional extra: only a scan on Ray needs it (see the module's docstring)
        import ray.data
    except ImportError:
        raise LabError(f"--ray needs Ray, an optional extra that is not installed here: {INSTALL}") from None
    if start >= len(pairs):
        return
    started = connect(ray, address)
    context = ray.data.DataContext.get_current()
    log = logging.getLogger("ray.data")  # its INFO and WARNING lines about the execution, not wanted in a scan's
    level = log.level
    saved = context.execution_options.preserve_order, context.enable_progress_bars, context.print_on_execution_start
    try:
        gpus, cpus = int(ray.cluster_resources().get("GPU", 0)), int(ray.cluster_resources().get("CPU", 0))
        unit, have = ("GPU", gpus) if gpus else ("CPU", cpus)
        n = workers or max(1, have)
        if n > have:
            raise LabError(f"{n} workers asked for, but the Ray cluster has {have} {unit}s (one worker takes one)")
        groups = list(from_batch(local_batches(checkpoint, pairs, batch_size, batch_tokens), start))
        written = groups[0][1]  # records of the first batch written already: scored again, not yielded
        rows = [{"batch": json.dumps([dataclasses.asdict(pair) for pair in group])} for group, _ in groups]
        arguments = {
            "files": ray.put(checkpoint_files(checkpoint)),
            "folder": checkpoint.resolve().name,
            "settings": settings,
            "model": model_id(checkpoint),
            "device": "cuda" if gpus else "cpu",
            "one_by_one": batch_size == 1,
        }
        context.execution_options.preserve_order = True  # rows come back in input order
        context.enable_progress_bars = context.print_on_execution_start = False  # scan.scan says what it does
        log.setLevel(logging.ERROR)
        scored = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
            worker_class,
            fn_constructor_kwargs=arguments,
            batch_size=1,  # one row, one of the local scan's batches
            compute=ray.data.ActorPoolStrategy(size=n),
            num_cpus=0 if gpus else 1,
            num_gpus=1 if gpus else 0,
            max_restarts=-1,  # a dead actor is restarted (Ray Data's default, said here: the scan counts on it)
            max_task_retries=-1,  # and the batch it held run again, on it or another
        )
        try:
            for row in itertools.islice(scored.iter_rows(), written, None):
                yield json.loads(row["record"])
        except ray.exceptions.RayTaskError as exc:  # a worker's own exception, without Ray's traceback text
            cause = exc.cause
            while isinstance(cause, ray.exceptions.UserCodeException) and cause.__cause__ is not None:
                cause = cause.__cause__  # Ray Data's wrapper around the worker's own exception
            if isinstance(cause, LabError):
                raise LabError(str(cause)) from None
            raise LabError(f"a Ray worker failed: {type(cause).__name__}: {cause}") from None
        except ray.exceptions.RayActorError as exc:
            raise LabError(f"a Ray worker stopped (could it load the checkpoint?): {exc}") from None
    finally:
        log.setLevel(level)
        context.execution_options.preserve_order, context.enable_progress_bars, context.print_on_execution_start = saved
        if started:
            ray.shutdown()


def connect(ray: Any, address: str) -> bool:
    """``ray.init`` for ``address`` with a clear ``LabError`` when no cluster answers there; True when this call
    started or joined Ray (and the caller shuts it down), False when Ray was already initialised here."""
    if address not in ("auto", "local"):
        probe(address)
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"include_dashboard": False} if address == "local" else {}
    try:
        ray.init(address=address, logging_level="WARNING", **kwargs)
    except ConnectionError as exc:
        raise LabError(
            f"--ray {address}: no Ray cluster found ({exc}). Start one with `ray start --head` (then --ray auto), "
            "give its address (host:port), or --ray local to start one in this process"
        ) from None
    except ValueError as exc:
        raise LabError(f"--ray {address}: {exc}") from None
    return True


def probe(address: str) -> None:
    """LabError unless something accepts a TCP connection at ``address`` (``host:port`` or ``ray://host:port``)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise LabError(f"--ray {address!r} is not an address: give host:port (e.g. 10.0.0.5:6379), auto or local")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_SECONDS):
            pass
    except OSError as exc:
        raise LabError(
            f"--ray {address}: no Ray cluster answers there ({exc.strerror or exc}). Is `ray start --head` running "
            "on that machine, and is the port open from here?"
        ) from None
