"""List-then-watch, like client-go's reflector: list for the state and a resourceVersion, watch from it.

* A watch that ends (server timeout) or drops (connection reset) resumes from the last resourceVersion seen
  (bookmarks included), so no event is lost.
* 410 Gone (the resourceVersion fell out of the server's window, as an HTTP status or an ERROR event)
  re-lists and emits a SYNC with the full current state, then watches from the new version.

* A refused connection or a server that stopped answering (`Unreachable`: an apiserver restart) is
  retried with backoff until the caller's `timeout` (then `WaitTimeout`, exit 4) or, without one, for
  RECONNECT_WINDOW seconds of no contact (then the `Unreachable`, exit 3). `on_retry` hears about it.
* `persist=True` (the controller's informers): every failure is backed off here, forever, and any failure
  but a lost server re-lists; with `rest_list(..., retry=False)` this is the only backoff around the watch.

`list_fn` is `rest_list(api, path)` (kubetrain's REST client), or any list method of the kubernetes
client (CoreV1Api.list_namespaced_pod, ...) with its arguments bound in `kwargs`: both take the same
keyword arguments. Objects are plain dicts (the API's JSON). Unit tests pass a fake `list_fn`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from kubetrain.errors import ClusterError
from kubetrain.kube.errors import ApiError, Gone, NotFound, ServerError, TooManyRequests, Unreachable, is_timeout
from kubetrain.kube.objects import meta_of
from kubetrain.kube.rest import Rest
from kubetrain.kube.retry import DEFAULT_POLICY, backoff, is_connection_reset

T = TypeVar("T")
ListFn = Callable[..., Any]
MAX_WATCH_SECONDS = 60  # each watch request asks the server to end it after this; we then resume
GONE = 410
RECONNECT_WINDOW = 300.0  # without a deadline, how long a follower keeps trying to reach a lost server


@dataclass(frozen=True)
class Event:
    """ADDED/MODIFIED/DELETED with `obj`, or SYNC (after a list) with `objects`: the whole current state."""

    type: str
    obj: dict[str, Any] = field(default_factory=dict)
    objects: tuple[dict[str, Any], ...] = ()


class WaitTimeout(ClusterError):
    """wait_for (or a follower) ran out of its --timeout: exit 4, not the 1 of a failed job."""

    exit_code = 4


def rest_list(rest: Rest, path: str, retry: bool = True) -> ListFn:
    """A list function over kubetrain's REST client taking the kubernetes client's keyword arguments
    (retry=False: no retries of the client's own, for stream(persist=True), which backs off itself)."""

    def list_fn(_preload_content: bool = True, _request_timeout: float | None = None, **kwargs: Any) -> Any:
        query = {_CAMEL.get(k, k): v for k, v in kwargs.items()}
        timeout = -1 if _request_timeout is None else _request_timeout
        return rest.request("GET", path, query, stream=True, read_timeout=timeout, retry=retry)

    return list_fn


_CAMEL = {"resource_version": "resourceVersion", "timeout_seconds": "timeoutSeconds",
          "allow_watch_bookmarks": "allowWatchBookmarks", "field_selector": "fieldSelector",
          "label_selector": "labelSelector", "watch": "watch", "limit": "limit"}


class _Gone(Exception):
    pass


def list_objects(list_fn: ListFn, **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
    """(items as dicts, the list's resourceVersion)."""
    response = list_fn(_preload_content=False, **kwargs)
    body = orjson.loads(response.data)
    getattr(response, "release_conn", lambda: None)()  # back to the pool: the next request reuses the TLS session
    return list(body.get("items") or []), str(meta_of(body).get("resourceVersion", ""))


def stream(list_fn: ListFn, timeout: float | None = None, clock: Callable[[], float] = time.monotonic,
           on_retry: Callable[[str], None] | None = None, sleep: Callable[[float], None] = time.sleep,
           persist: bool = False, **kwargs: Any) -> Iterator[Event]:
    """SYNC, then changes, until `timeout` seconds (None: forever) or the caller stops iterating."""
    deadline = None if timeout is None else clock() + timeout
    version: str | None = None
    lost = _Lost(clock, deadline, timeout, on_retry, sleep, window=None if persist else RECONNECT_WINDOW)
    while deadline is None or clock() < deadline:
        try:
            if version is None:
                items, version = list_objects(list_fn, **kwargs)
                lost.found()
                yield Event("SYNC", objects=tuple(items))
            remaining = MAX_WATCH_SECONDS if deadline is None else deadline - clock()
            seconds = max(1, min(MAX_WATCH_SECONDS, int(remaining + 0.999)))
            for event in _watch_once(list_fn, version, seconds, kwargs):
                lost.found()
                version = _version_of(event["object"]) or version
                if event["type"] != "BOOKMARK":
                    yield Event(event["type"], obj=event["object"])
        except _Gone:
            version = None
        except Exception as exc:
            if not (isinstance(exc, Unreachable) or (lost.seen and _restarting(exc))):
                if not persist:
                    raise
                version = None  # refused, unreadable...: start again from a fresh list
            lost.wait(exc)


def _restarting(exc: BaseException) -> bool:
    """What a restarting API server answers for a while after it listens again: 5xx/429 beyond the retries,
    and 404 for a custom resource until its CRD is loaded (only taken as such once the list has worked)."""
    return isinstance(exc, NotFound | TooManyRequests | ServerError)


class _Lost:
    """Backoff while the API server cannot be reached; gives up at the deadline or after the window."""

    def __init__(self, clock: Callable[[], float], deadline: float | None, timeout: float | None,
                 on_retry: Callable[[str], None] | None, sleep: Callable[[float], None],
                 window: float | None = RECONNECT_WINDOW) -> None:
        self.clock, self.deadline, self.timeout, self.on_retry, self.sleep = clock, deadline, timeout, on_retry, sleep
        self.window = window  # None: never give up
        self.since: float | None = None
        self.attempt = 0
        self.seen = False  # the API answered at least once

    def found(self) -> None:
        self.seen = True
        if self.since is not None and self.on_retry:
            self.on_retry("reconnected to the API server")
        self.since, self.attempt = None, 0

    def wait(self, exc: Exception) -> None:
        now = self.clock()
        if self.since is None:
            self.since = now
            if self.on_retry:
                self.on_retry(f"{exc}; retrying")
        if self.deadline is not None and now >= self.deadline:
            raise WaitTimeout(f"timed out after {self.timeout:g}s (the API server was unreachable: {exc})")
        if self.deadline is None and self.window is not None and now - self.since > self.window:
            raise exc
        self.attempt += 1
        delay = backoff(min(self.attempt, 6), DEFAULT_POLICY)
        self.sleep(delay if self.deadline is None else max(0.0, min(delay, self.deadline - now)))


def _watch_once(list_fn: ListFn, version: str, seconds: int, kwargs: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One watch request's events. Raises _Gone on 410; returns quietly when the connection drops."""
    try:
        response = list_fn(watch=True, resource_version=version, timeout_seconds=seconds,
                           allow_watch_bookmarks=True, _preload_content=False,
                           _request_timeout=seconds + 15, **kwargs)
    except Gone:
        raise _Gone from None
    try:
        for line in iter_lines(response):
            if not line.strip():
                continue
            event = orjson.loads(line)
            if event.get("type") == "ERROR":
                _raise_error(event.get("object") or {})
            yield event
    except Exception as exc:
        if not is_connection_reset(exc) and not is_timeout(exc):
            raise
    finally:
        response.close()
        response.release_conn()


def _raise_error(status: dict[str, Any]) -> None:
    if status.get("code") == GONE:
        raise _Gone
    raise ApiError(int(status.get("code") or 500), f"{status.get('reason')}: {status.get('message')}",
                   json.dumps(status))


def iter_lines(response: Any) -> Iterator[str]:
    """A streamed response's lines as they arrive (watch events are one JSON object per line)."""
    pending = b""
    for chunk in response.stream(65536, decode_content=False):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.decode("utf-8", "replace")
    if pending:
        yield pending.decode("utf-8", "replace")


def _version_of(obj: dict[str, Any]) -> str | None:
    return meta_of(obj).get("resourceVersion")


def key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = meta_of(obj)
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def wait_for(list_fn: ListFn, check: Callable[[dict[tuple[str, str], dict[str, Any]]], T | None], *,
             timeout: float | None, what: str, on_retry: Callable[[str], None] | None = None, **kwargs: Any) -> T:
    """Keep a (namespace, name) → object cache of the listed objects current; return check(cache) once truthy."""
    cache: dict[tuple[str, str], dict[str, Any]] = {}
    for event in stream(list_fn, timeout=timeout, on_retry=on_retry, **kwargs):
        if event.type == "SYNC":
            cache = {key(o): o for o in event.objects}
        elif event.type == "DELETED":
            cache.pop(key(event.obj), None)
        else:
            cache[key(event.obj)] = event.obj
        result = check(cache)
        if result:
            return result
    raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what}")
