"""One process-wide cache of translations and analyses, bounded by bytes rather than by entry count.

A 255-piece trace with q/k/v is about 43 MB and a short one a few hundred kB, so a count bound says nothing
about memory. Every cached result is weighed (numpy arrays, tensors and traces by their bytes) and the least
recently used results are dropped until the total is within the budget: ``LAB_CACHE_MB`` (default 512) for all
sessions together. A result larger than the budget is returned but not kept. Concurrent calls for the same key
compute once; different keys compute in parallel.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, ParamSpec, TypeVar

import numpy as np
import streamlit as st
import torch

from core.recording.trace import Trace

DEFAULT_MB = 512
P = ParamSpec("P")
R = TypeVar("R")


def budget_bytes() -> int:
    """``LAB_CACHE_MB`` (a positive number of megabytes) or the default, in bytes."""
    raw = os.environ.get("LAB_CACHE_MB", "").strip()
    try:
        mb = float(raw) if raw else DEFAULT_MB
    except ValueError:
        mb = DEFAULT_MB
    return int((mb if mb > 0 else DEFAULT_MB) * 1e6)


def weigh(obj: Any, _seen: set[int] | None = None) -> int:
    """Bytes ``obj`` holds: arrays and tensors by their data, containers and dataclasses by their parts (each
    object counted once), anything else by ``sys.getsizeof``."""
    seen = set() if _seen is None else _seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, Trace):
        return obj.nbytes + weigh(obj.meta, seen) + weigh(obj.vocab, seen)
    if isinstance(obj, dict):
        return sum(weigh(k, seen) + weigh(v, seen) for k, v in obj.items())
    if isinstance(obj, list | tuple | set | frozenset):
        return sum(weigh(v, seen) for v in obj) + sys.getsizeof(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(weigh(getattr(obj, f.name), seen) for f in dataclasses.fields(obj))
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return weigh(vars(obj), seen)
    return sys.getsizeof(obj)


class ByteBudgetCache:
    """Least-recently-used results, at most ``budget`` bytes in all (by ``weigh``)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.total = 0
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._computing: dict[Hashable, threading.Lock] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def get(self, key: Hashable, compute: Callable[[], R]) -> R:
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key][0]
            key_lock = self._computing.setdefault(key, threading.Lock())
        with key_lock:  # one computation per key; the others wait for it and then find it cached
            with self._lock:
                if key in self._entries:
                    self._entries.move_to_end(key)
                    return self._entries[key][0]
            try:
                value = compute()
            finally:
                with self._lock:
                    self._computing.pop(key, None)
            self.put(key, value)
            return value

    def put(self, key: Hashable, value: Any) -> None:
        size = weigh(value)
        with self._lock:
            if key in self._entries:
                self.total -= self._entries.pop(key)[1]
            if size > self.budget:
                return  # larger than the whole budget: handed out, never kept
            self._entries[key] = (value, size)
            self.total += size
            while self.total > self.budget:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.total -= dropped

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.total = 0


@st.cache_resource
def shared() -> ByteBudgetCache:
    """The one cache of this server process (``st.cache_resource`` keeps it across reruns and sessions)."""
    return ByteBudgetCache(budget_bytes())


@functools.cache
def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(fn)  # once per cached function, not at every call of every rerun


def _key(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Hashable:
    """The cache key of ``fn(*args, **kwargs)``: its name and every argument by name, defaults filled in, so
    ``f(a)``, ``f(a, False)`` and ``f(a, flag=False)`` are one entry."""
    bound = _signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return (fn.__qualname__, tuple(bound.arguments.items()))


def peek(fn: Callable[..., R], *args: Any) -> R | None:
    """What ``fn(*args)`` (a ``cached`` function) returned before, without computing it; None if not cached."""
    entry = shared()._entries.get(_key(fn, args, {}))
    return None if entry is None else entry[0]


def cached(spinner: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Cache a function's results in the shared budget, keyed on its name and (hashable) arguments; shows
    ``spinner`` while computing. Exceptions are not cached."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def inner(*args: P.args, **kwargs: P.kwargs) -> R:
            cache = shared()
            key = _key(fn, args, kwargs)
            if key in cache:
                return cache.get(key, lambda: fn(*args, **kwargs))
            with st.spinner(spinner):
                return cache.get(key, lambda: fn(*args, **kwargs))

        return inner

    return wrap
