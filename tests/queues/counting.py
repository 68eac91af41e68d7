"""Count the HTTP requests a command sends (tests/queues/test_scale.py, benchmarks/bench_scale.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def counting() -> Iterator[list[str]]:
    """Every HTTP request urllib3 sends (the REST client and the kubernetes package both use it)."""
    import urllib3.connectionpool as pool

    seen: list[str] = []
    original = pool.HTTPConnectionPool.urlopen

    def urlopen(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(f"{method} {url.split('?', maxsplit=1)[0]}")
        return original(self, method, url, *args, **kwargs)

    pool.HTTPConnectionPool.urlopen = urlopen  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        pool.HTTPConnectionPool.urlopen = original  # type: ignore[method-assign]
