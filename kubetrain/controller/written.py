"""The status the reconcile last wrote, per TrainingJob UID, until the informer's cache holds it.

The cache lags behind a write by a watch event: until it delivers the write's resourceVersion, the
reconcile works from what it wrote (no second write of the same status, no duplicate Event). Once the cache
holds that version it is the truth again, so a status someone else overwrote later is written back.
"""

from __future__ import annotations

import threading
from typing import Any


class WrittenStatus:
    def __init__(self) -> None:
        self._status: dict[str, dict[str, Any]] = {}
        self._version: dict[str, str] = {}
        self._delivered: dict[str, str] = {}  # uid → resourceVersion of the informer's latest event
        self._lock = threading.Lock()

    def get(self, uid: str) -> dict[str, Any] | None:
        with self._lock:
            return self._status.get(uid)

    def wrote(self, uid: str, status: dict[str, Any], version: str | None) -> None:
        """We patched the status to `status`; the API server answered with `version`."""
        with self._lock:
            if version and self._delivered.get(uid) == version:  # the watch was quicker than our bookkeeping
                self._forget(uid)
                return
            self._status[uid] = status
            self._version[uid] = version or ""

    def delivered(self, uid: str, version: str, gone: bool = False) -> None:
        """The informer's event for `uid` at `version` (or its deletion)."""
        with self._lock:
            if gone:
                self._forget(uid)
                self._delivered.pop(uid, None)
                return
            self._delivered[uid] = version
            if self._version.get(uid) == version:
                self._forget(uid)

    def _forget(self, uid: str) -> None:
        self._status.pop(uid, None)
        self._version.pop(uid, None)
