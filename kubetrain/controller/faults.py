"""The controller's per-job failures: classified, counted for /metrics, logged, and never fatal.

Every loop (reconcile, progress, hang) works on many TrainingJobs. A failure on one of them (the job was
deleted between the informer's snapshot and the write, a stale resourceVersion, an RBAC refusal, a kubelet
that does not answer) is that job's alone: it is counted here by loop and kind, logged once, and the loop
goes on; the job is tried again on its next round (the reconcile: with the work queue's backoff).

`Fanout` runs one call per job of a round concurrently (a bounded thread pool), so one stuck pod never
delays the others; each call also has its own deadline (its requests' timeouts, kubetrain.controller.kube).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Generic, TypeVar

from kubetrain.kube.errors import ApiError, ServerError, TimedOut, Unreachable

log = logging.getLogger("kubetrain.controller")
T = TypeVar("T")
Key = tuple[str, str]
ROUTINE = {"NotFound", "Conflict"}  # races with a delete or another writer: retried, logged at INFO


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and what it was raised from (kube.errors.translate raises `from None`: the API error
    is still the context)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def kind_of(exc: BaseException) -> str:
    """NotFound, Conflict, Forbidden, Timeout, Unreachable, ServerError... or the exception's type name."""
    for error in _chain(exc):
        if isinstance(error, ServerError):
            return "ServerError"
        if isinstance(error, ApiError):
            return f"HTTP{error.status}" if type(error) is ApiError else type(error).__name__
        if isinstance(error, TimedOut | TimeoutError):
            return "Timeout"
        if isinstance(error, Unreachable):
            return "Unreachable"
    return type(exc).__name__


class ErrorCounter:
    """Failures by (loop, kind); thread-safe."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def record(self, loop: str, key: Key, exc: BaseException, retry: str = "next round") -> str:
        """Count and log one job's failure; returns its kind."""
        kind = kind_of(exc)
        self.count(loop, kind)
        level = logging.INFO if kind in ROUTINE else logging.WARNING
        log.log(level, "%s of %s/%s failed (%s: %s); retrying %s", loop, key[0], key[1], kind,
                " ".join(str(exc).split())[:300], retry)
        return kind

    def count(self, loop: str, kind: str) -> None:
        with self._lock:
            self._counts[(loop, kind)] += 1

    def counts(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)

    def total(self, loop: str) -> int:
        with self._lock:
            return sum(n for (where, _), n in self._counts.items() if where == loop)

    def metrics(self) -> dict[str, float]:
        """Prometheus series: errors_total{loop="progress",kind="NotFound"} 3."""
        return {f'errors_total{{loop="{loop}",kind="{kind}"}}': float(n)
                for (loop, kind), n in sorted(self.counts().items())}


class Fanout(Generic[T]):
    """One call per job, at most `parallel` at once. A round waits at most `deadline` seconds: a call still
    running then is counted as a Timeout and left to end on its own (its requests time out), and its job is
    skipped by later rounds until it has."""

    def __init__(self, loop: str, errors: ErrorCounter, parallel: int = 8, deadline: float = 60.0) -> None:
        self.loop, self.errors, self.deadline = loop, errors, deadline
        self._pool = ThreadPoolExecutor(parallel, thread_name_prefix=loop)
        self._busy: set[Key] = set()
        self._lock = threading.Lock()

    def run(self, calls: Sequence[tuple[Key, Callable[[], T]]]) -> list[T]:
        """The results of the calls that ended in time without an error, in no particular order."""
        futures: dict[Future[T], Key] = {}
        for key, call in calls:
            with self._lock:
                if key in self._busy:
                    continue  # its previous call has not ended: one call per job at a time
                self._busy.add(key)
            future = self._pool.submit(call)
            future.add_done_callback(lambda _, key=key: self._release(key))  # type: ignore[misc]
            futures[future] = key
        done, late = wait(futures, timeout=self.deadline)
        for future in late:
            key = futures[future]
            self.errors.count(self.loop, "Timeout")
            log.warning("%s of %s/%s still running after %.0f s; not waiting for it", self.loop, key[0], key[1],
                        self.deadline)
        results = []
        for future in done:
            try:
                results.append(future.result())
            except Exception as exc:
                self.errors.record(self.loop, futures[future], exc)
        return results

    def _release(self, key: Key) -> None:
        with self._lock:
            self._busy.discard(key)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def guarded(loop: str, errors: ErrorCounter, call: Callable[[], Any]) -> None:
    """One whole round of a loop: whatever it raises is counted and logged, and the loop goes on."""
    try:
        call()
    except Exception as exc:
        errors.record(loop, ("*", "round"), exc)
