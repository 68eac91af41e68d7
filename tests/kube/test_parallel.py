"""kubetrain.kube.parallel: results in order, a call's exception in the caller, at most N calls at once."""

from __future__ import annotations

import threading

import pytest

from kubetrain.kube.parallel import map_parallel, start


def test_map_parallel_keeps_the_order_and_runs_at_most_n_at_once() -> None:
    running, most, lock = [0], [0], threading.Lock()
    both_started = threading.Barrier(2, timeout=30)

    def slow_square(x: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        both_started.wait()  # two calls are in flight together before either returns
        with lock:
            running[0] -= 1
        return x * x

    assert map_parallel(slow_square, range(6), 2) == [0, 1, 4, 9, 16, 25]
    assert most[0] == 2


def test_map_parallel_raises_the_first_failing_items_exception_after_all_calls() -> None:
    seen: list[int] = []

    def check(x: int) -> int:
        seen.append(x)
        if x in (2, 4):
            raise ValueError(f"bad {x}")
        return x

    with pytest.raises(ValueError, match="bad 2"):
        map_parallel(check, range(6), 3)
    assert sorted(seen) == list(range(6))


def test_start_returns_or_raises_what_the_call_did() -> None:
    assert start(lambda a, b: a + b, 2, b=3).result() == 5

    def fail() -> None:
        raise KeyError("gone")

    with pytest.raises(KeyError, match="gone"):
        start(fail).result()
