"""A work queue like client-go's: keys, not events; one worker per key at a time; per-key backoff.

* `add(key)` while the key waits is a no-op (many events, one reconcile); while it is being processed it
  is marked dirty and handed out again after `done(key)`.
* `retry(key)` re-adds after an exponential per-key delay (base · 2^failures, capped): a bad object backs
  off alone and never blocks the others. `forget(key)` resets its failures after a success.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Hashable

BASE_DELAY = 0.5
MAX_DELAY = 300.0


class WorkQueue:
    def __init__(self, base: float = BASE_DELAY, cap: float = MAX_DELAY) -> None:
        self._ready: deque[Hashable] = deque()
        self._queued: set[Hashable] = set()
        self._active: set[Hashable] = set()
        self._dirty: set[Hashable] = set()
        self._later: list[tuple[float, int, Hashable]] = []
        self._failures: dict[Hashable, int] = {}
        self._seq = 0
        self._cond = threading.Condition()
        self._closed = False
        self.base, self.cap = base, cap

    def add(self, key: Hashable) -> None:
        with self._cond:
            self._push(key)

    def _push(self, key: Hashable) -> None:
        """Hand `key` out next, or after its current processing (caller holds the lock)."""
        if key in self._active:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._ready.append(key)
            self._cond.notify()

    def add_after(self, key: Hashable, delay: float) -> None:
        with self._cond:
            self._seq += 1
            heapq.heappush(self._later, (time.monotonic() + delay, self._seq, key))
            self._cond.notify()

    def retry(self, key: Hashable) -> float:
        """Re-add after this key's backoff; returns the delay."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = float(min(self.cap, self.base * 2.0 ** failures))
        self.add_after(key, delay)
        return delay

    def forget(self, key: Hashable) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def get(self, timeout: float | None = None) -> Hashable | None:
        """The next key (now being processed), or None on timeout or close."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._closed:
                self._promote()
                if self._ready:
                    key = self._ready.popleft()
                    self._queued.discard(key)
                    self._active.add(key)
                    return key
                wait = self._later[0][0] - time.monotonic() if self._later else None
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)
            return None

    def done(self, key: Hashable) -> None:
        with self._cond:
            self._active.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._push(key)

    def _promote(self) -> None:
        now = time.monotonic()
        while self._later and self._later[0][0] <= now:
            _, _, key = heapq.heappop(self._later)
            self._push(key)

    def __len__(self) -> int:
        with self._cond:
            return len(self._ready) + len(self._later)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
