"""Calls side by side on threads, for the reads of `status` and `logs`.

Why not concurrent.futures: importing it loads `logging` (and traceback, textwrap, string, queue), about 3 ms
of CPU, a tenth of the 25 ms by which `kubetrain status` missed its target of 1.5x kubectl's CPU
(docs/performance.md). These commands need two shapes: one call beside the caller's own work (`start`), and
a function over a few items on at most N threads (`map_parallel`). Either re-raises a call's exception in the
caller.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Later(Generic[T]):
    """A call running on its own (daemon) thread; `result()` waits for it and returns or raises what it did."""

    def __init__(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> None:
        self._fn, self._args, self._kwargs = fn, args, kwargs
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn(*self._args, **self._kwargs)
        except BaseException as exc:  # handed to the caller by result()
            self._error = exc

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def start(fn: Callable[..., T], *args: Any, **kwargs: Any) -> Later[T]:
    """Run fn(*args, **kwargs) beside the caller."""
    return Later(fn, *args, **kwargs)


def map_parallel(fn: Callable[[T], R], items: Iterable[T], workers: int) -> list[R]:
    """[fn(item) for item in items], on at most `workers` threads; the first item's exception (in order) is
    raised once every call has ended."""
    todo = list(items)
    if workers <= 1 or len(todo) <= 1:
        return [fn(item) for item in todo]
    outcomes: list[tuple[bool, Any]] = [(False, None)] * len(todo)
    lock = threading.Lock()
    next_index = iter(range(len(todo)))

    def work() -> None:
        while True:
            with lock:
                index = next(next_index, None)
            if index is None:
                return
            try:
                outcomes[index] = (True, fn(todo[index]))
            except BaseException as exc:  # raised in the caller below
                outcomes[index] = (False, exc)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(min(workers, len(todo)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for ok, value in outcomes:
        if not ok:
            raise value
    return [value for _, value in outcomes]
