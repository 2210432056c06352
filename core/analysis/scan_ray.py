"""The corpus scan on a Ray cluster: the pairs in batches over a pool of actors, each loading the checkpoint once.

``ray_records`` is a ``scan.Runner``: it yields the same records as ``scan.local_records``, in input order (each
actor scores a batch as the local scan does, ``scan.score_pairs``; batches go out round-robin, at most ``IN_FLIGHT``
per actor, and come back in the order they went out), so ``scan.scan`` writes, flushes and resumes them the same
way. The checkpoint's files travel through Ray's object store, so the cluster's machines need the lab installed but
not the checkpoint. Each actor asks for one GPU when the cluster has GPUs, else for one CPU (and then runs torch on
one thread).

Ray is an optional extra (``pip install -c constraints.txt -e '.[scale]'``): it is imported inside ``ray_records``
only, so ``core`` and a scan without ``--ray`` never need it.
"""

from __future__ import annotations

import socket
import tempfile
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from ..bundle import load
from ..errors import LabError
from .scan import DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TOKENS, Pair, ScanSettings, model_id, score_pairs

IN_FLIGHT = 2  # batches queued per actor: one running, one ready to start
PROBE_SECONDS = 5.0  # ray.init retries an address nobody answers at for minutes; a socket says so at once
INSTALL = "pip install -c constraints.txt -e '.[scale]'"


class ScanWorker:
    """One actor: the checkpoint loaded once (from the files the driver sent), then batches of pairs scored."""

    def __init__(
        self,
        files: dict[str, bytes],
        folder: str,
        settings: ScanSettings,
        model: str,
        device: str,
        threads: int,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
    ) -> None:
        torch.set_num_threads(threads)  # this process is the actor's own: as many threads as CPUs it asked for
        with tempfile.TemporaryDirectory(prefix="scan-checkpoint-") as tmp:
            path = Path(tmp) / folder
            path.mkdir()
            for name, data in files.items():
                (path / name).write_bytes(data)
            self.bundle = load(path, device=device)  # weights, tokenizer and shortlist are in memory after this
        self.settings, self.model, self.batch_tokens = settings, model, batch_tokens

    def score(self, pairs: Sequence[Pair]) -> list[dict[str, Any]]:
        """The pairs sent (one batch of ``--batch-size``) scored by ``score_batch`` within the token budget."""
        return score_pairs(
            self.bundle, pairs, self.settings, self.model, batch_size=len(pairs), batch_tokens=self.batch_tokens
        )


def checkpoint_files(checkpoint: Path) -> dict[str, bytes]:
    """The files of a checkpoint folder (not its sub-folders), by name."""
    return {p.name: p.read_bytes() for p in sorted(checkpoint.iterdir()) if p.is_file()}


def ray_records(
    checkpoint: Path,
    pairs: Sequence[Pair],
    settings: ScanSettings,
    *,
    address: str,
    workers: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
) -> Iterator[dict[str, Any]]:
    """Score ``pairs`` on the Ray cluster at ``address`` (``host:port``, ``ray://host:port``, ``auto`` for the one
    running here or named by ``RAY_ADDRESS``, ``local`` to start one in this process) with ``workers`` actors
    (default: one per GPU of the cluster, else one per CPU). In a process where Ray is already initialised, that
    instance is used as it is. Each batch of ``batch_size`` pairs goes to one actor, which scores it as the local
    scan scores a batch (``scan.score_batch``, split where it is over ``batch_tokens``). Records come in input
    order."""
    if batch_size < 1 or batch_tokens < 1 or (workers is not None and workers < 1):
        raise LabError(
            f"the batch size, batch tokens and number of workers are at least 1 (got {batch_size}, {batch_tokens}, "
            f"{workers})"
        )
    try:
        import ray  # the optional extra: only a scan on Ray needs it (see the module's docstring)
    except ImportError:
        raise LabError(f"--ray needs Ray, an optional extra that is not installed here: {INSTALL}") from None
    if not pairs:
        return
    started = connect(ray, address)
    actors: list[Any] = []
    try:
        gpus, cpus = int(ray.cluster_resources().get("GPU", 0)), int(ray.cluster_resources().get("CPU", 0))
        unit, have = ("GPU", gpus) if gpus else ("CPU", cpus)
        n = workers or max(1, have)
        if n > have:
            raise LabError(f"{n} workers asked for, but the Ray cluster has {have} {unit}s (one worker takes one)")
        remote = ray.remote(num_gpus=1, num_cpus=1)(ScanWorker) if gpus else ray.remote(num_cpus=1)(ScanWorker)
        files = ray.put(checkpoint_files(checkpoint))
        folder, model = checkpoint.resolve().name, model_id(checkpoint)
        device = "cuda" if gpus else "cpu"
        actors = [remote.remote(files, folder, settings, model, device, 1, batch_tokens) for _ in range(n)]
        batches = [pairs[i : i + batch_size] for i in range(0, len(pairs), batch_size)]
        pending: deque[Any] = deque()
        sent = 0
        while sent < len(batches) or pending:
            while sent < len(batches) and len(pending) < IN_FLIGHT * n:
                pending.append(actors[sent % n].score.remote(batches[sent]))
                sent += 1
            try:
                records = ray.get(pending.popleft())
            except ray.exceptions.RayTaskError as exc:  # a worker's own exception, without Ray's traceback text
                cause = exc.cause
                if isinstance(cause, LabError):
                    raise LabError(str(cause)) from None
                raise LabError(f"a Ray worker failed: {type(cause).__name__}: {cause}") from None
            except ray.exceptions.RayActorError as exc:
                raise LabError(f"a Ray worker stopped (could it load the checkpoint?): {exc}") from None
            yield from records
    finally:
        for actor in actors:
            ray.kill(actor)
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
