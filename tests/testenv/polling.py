"""The suite's one polling loop: call a check until it returns something truthy, or time out.

Every "wait until the cluster/a process/a file is ready" in the harness and the tests goes through
`wait_for`, so timeouts, intervals and failure messages look the same everywhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class TimedOut(AssertionError):
    """The awaited state did not come in time (an AssertionError, so pytest reports a plain failure)."""


def wait_for(
    fn: Callable[[], T | None],
    what: str,
    timeout: float = 60,
    interval: float = 0.2,
    *,
    tolerate: tuple[type[BaseException], ...] = (),
    guard: Callable[[], None] | None = None,
) -> T:
    """Call `fn` every `interval` seconds until it returns something truthy, and return that.

    `tolerate`: exceptions that mean "not yet" (e.g. connection refused while a server starts).
    `guard`: called before each try; it raises to stop waiting early (e.g. the awaited process died).
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        if guard is not None:
            guard()
        try:
            value = fn()
            if value:
                return value
            last = value
        except tolerate as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise TimedOut(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")
        time.sleep(interval)
