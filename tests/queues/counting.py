"""Count the HTTP requests a command sends (tests/queues/test_scale.py, benchmarks/bench_scale.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def counting() -> Iterator[list[str]]:
    """Every HTTP request sent: by the REST client (kubetrain.kube.transport) and by the kubernetes
    package's client (urllib3)."""
    import urllib3.connectionpool as pool

    from kubetrain.kube import transport

    seen: list[str] = []
    original, original_rest = pool.HTTPConnectionPool.urlopen, transport.Pool.request

    def urlopen(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(f"{method} {url.split('?', maxsplit=1)[0]}")
        return original(self, method, url, *args, **kwargs)

    def request(self: Any, method: str, target: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(f"{method} {self.prefix}{target.split('?', maxsplit=1)[0]}")
        return original_rest(self, method, target, *args, **kwargs)

    pool.HTTPConnectionPool.urlopen = urlopen  # type: ignore[method-assign]
    transport.Pool.request = request  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        pool.HTTPConnectionPool.urlopen = original  # type: ignore[method-assign]
        transport.Pool.request = original_rest  # type: ignore[method-assign]
