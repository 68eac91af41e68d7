"""An informer: a list-then-watch cache of one resource, calling back on every change.

Built on `kubetrain.kube.watch.stream` (the CLI's reflector), which resumes dropped watches from the last
resourceVersion and answers 410 Gone with a fresh list (a SYNC event): watches survive 410. With
`persist=True` it is also the one backoff around the watch: a lost API server is waited for (resuming from
the last resourceVersion), any other failure re-lists after the same backoff; the list function does not
retry underneath it (kubetrain.controller.kube.custom_list_fn).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubetrain.kube import watch

log = logging.getLogger("kubetrain.controller")
Key = tuple[str, str]
Handler = Callable[[dict[str, Any]], None]


class _Stopped(Exception):
    """`stop` was set while the informer waited to list or watch again."""


class Informer:
    def __init__(self, name: str, list_fn: watch.ListFn, on_change: Handler, **kwargs: Any) -> None:
        self.name, self.list_fn, self.kwargs, self.on_change = name, list_fn, kwargs, on_change
        self.cache: dict[Key, dict[str, Any]] = {}
        self.synced = threading.Event()
        self.lists = 0  # list requests made (the first, then one per 410 or failure)
        self._lock = threading.Lock()

    def get(self, key: Key) -> dict[str, Any] | None:
        with self._lock:
            return self.cache.get(key)

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.cache.values())

    def run(self, stop: threading.Event) -> None:
        """List and watch until `stop`; failures are backed off by watch.stream (see the module docstring)."""

        def sleep(seconds: float) -> None:
            if stop.wait(seconds):
                raise _Stopped

        def said(message: str) -> None:
            log.warning("%s: %s", self.name, message)

        try:
            for event in watch.stream(self.list_fn, on_retry=said, sleep=sleep, persist=True, **self.kwargs):
                if stop.is_set():
                    return
                try:
                    self._apply(event)
                except Exception:  # a handler's bug must not end the informer: the cache is already updated
                    log.exception("%s: handling a %s event failed", self.name, event.type)
        except _Stopped:
            return

    def _apply(self, event: watch.Event) -> None:
        if event.type == "SYNC":
            self.lists += 1
            fresh = {watch.key(o): o for o in event.objects}
            with self._lock:
                gone = [o for k, o in self.cache.items() if k not in fresh]
                self.cache = fresh
            self.synced.set()
            for obj in [*event.objects, *gone]:
                self.on_change(obj)
            return
        with self._lock:
            if event.type == "DELETED":
                self.cache.pop(watch.key(event.obj), None)
            else:
                self.cache[watch.key(event.obj)] = event.obj
        self.on_change(event.obj)


def wait_synced(informers: list[Informer], stop: threading.Event) -> None:
    while not stop.is_set() and not all(i.synced.is_set() for i in informers):
        time.sleep(0.05)
