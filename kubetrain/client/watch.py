"""List-then-watch, like client-go's reflector: list for the state and a resourceVersion, watch from it.

* A watch that ends (server timeout) or drops (connection reset) resumes from the last resourceVersion seen
  (bookmarks included), so no event is lost.
* 410 Gone (the resourceVersion fell out of the server's window, as an HTTP status or an ERROR event)
  re-lists and emits a SYNC with the full current state, then watches from the new version.

`list_fn` is any list method of the kubernetes client (CoreV1Api.list_namespaced_pod,
CustomObjectsApi.list_namespaced_custom_object, ...) with its arguments bound in `kwargs`. Objects are
plain dicts (the API's JSON), whatever the method's model type. Unit tests pass a fake `list_fn`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines
from urllib3.exceptions import TimeoutError as ReadTimeout

from kubetrain.client.retry import is_connection_reset
from kubetrain.errors import ClusterError

T = TypeVar("T")
ListFn = Callable[..., Any]
MAX_WATCH_SECONDS = 60  # each watch request asks the server to end it after this; we then resume
GONE = 410


@dataclass(frozen=True)
class Event:
    """ADDED/MODIFIED/DELETED with `obj`, or SYNC (after a list) with `objects`: the whole current state."""

    type: str
    obj: dict[str, Any] = field(default_factory=dict)
    objects: tuple[dict[str, Any], ...] = ()


class WaitTimeout(ClusterError):
    """wait_for ran out of time."""


class _Gone(Exception):
    pass


def list_objects(list_fn: ListFn, **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
    """(items as dicts, the list's resourceVersion)."""
    response = list_fn(_preload_content=False, **kwargs)
    body = json.loads(response.data)
    return list(body.get("items") or []), str((body.get("metadata") or {}).get("resourceVersion", ""))


def stream(list_fn: ListFn, timeout: float | None = None, clock: Callable[[], float] = time.monotonic,
           **kwargs: Any) -> Iterator[Event]:
    """SYNC, then changes, until `timeout` seconds (None: forever) or the caller stops iterating."""
    deadline = None if timeout is None else clock() + timeout
    version: str | None = None
    while deadline is None or clock() < deadline:
        if version is None:
            items, version = list_objects(list_fn, **kwargs)
            yield Event("SYNC", objects=tuple(items))
        remaining = MAX_WATCH_SECONDS if deadline is None else deadline - clock()
        seconds = max(1, min(MAX_WATCH_SECONDS, int(remaining + 0.999)))
        try:
            for event in _watch_once(list_fn, version, seconds, kwargs):
                version = _version_of(event["object"]) or version
                if event["type"] != "BOOKMARK":
                    yield Event(event["type"], obj=event["object"])
        except _Gone:
            version = None


def _watch_once(list_fn: ListFn, version: str, seconds: int, kwargs: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One watch request's events. Raises _Gone on 410; returns quietly when the connection drops."""
    try:
        response = list_fn(watch=True, resource_version=version, timeout_seconds=seconds,
                           allow_watch_bookmarks=True, _preload_content=False,
                           _request_timeout=seconds + 15, **kwargs)
    except ApiException as exc:
        if exc.status == GONE:
            raise _Gone from None
        raise
    try:
        for line in iter_resp_lines(response):
            if not line.strip():
                continue
            event = json.loads(line)
            if event.get("type") == "ERROR":
                _raise_error(event.get("object") or {})
            yield event
    except Exception as exc:
        if not is_connection_reset(exc) and not isinstance(exc, ReadTimeout | TimeoutError):
            raise
    finally:
        response.close()
        response.release_conn()


def _raise_error(status: dict[str, Any]) -> None:
    if status.get("code") == GONE:
        raise _Gone
    raise ApiException(status=status.get("code"), reason=f"{status.get('reason')}: {status.get('message')}")


def _version_of(obj: dict[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


def key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def wait_for(list_fn: ListFn, check: Callable[[dict[tuple[str, str], dict[str, Any]]], T | None], *,
             timeout: float | None, what: str, **kwargs: Any) -> T:
    """Keep a (namespace, name) → object cache of the listed objects current; return check(cache) once truthy."""
    cache: dict[tuple[str, str], dict[str, Any]] = {}
    for event in stream(list_fn, timeout=timeout, **kwargs):
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
