"""Following one pod's log across reconnects and container restarts, without repeating or dropping a line.

A `PodFollower` is a thread per pod. It always asks for timestamps and remembers the last one written
(`Dedup`), so:

* a stream cut while the container still runs is re-opened a little earlier (sinceSeconds) and the lines
  already written are skipped;
* when the container restarts, the end of the previous instance is read back (``previous=true``) before
  the new instance is followed from its start;
* a partial line at a cut is dropped: the re-opened stream sends it whole.

The kubelet ends a follow stream when its container stops; some (kwok, old kubelets) never do, so the
monitor's `tick()` closes the stream of a stopped container once it has been quiet for a moment, and the
follower then re-reads the end without `follow` (so closing early can never lose a line).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from kubetrain.jobs.logmerge import NO_TIME, Dedup, LineAssembler, split_timestamp, text_lines
from kubetrain.jobs.pods import Replica
from kubetrain.kube.errors import NETWORK_ERRORS, ApiError, BadRequest, NotFound, Unreachable
from kubetrain.kube.retry import backoff

Emit = Callable[[str, str, str], None]  # (label, timestamp text, line)
Notice = Callable[[str], None]
Opener = Callable[..., Any]  # (pod, container, *, follow, previous, since_seconds, tail_lines) -> a streamed response
READ_SIZE = 65536
RESUME_MARGIN = 60  # seconds re-read before the last line seen, to absorb clock skew with the node
DRAIN_IDLE = 0.5  # a stopped container's stream is closed after this long without data (then re-read)...
DRAIN_MAX = 3.0  # ...or this long after it stopped, even if data still flows (the re-read gets the rest)


def stream_errors() -> tuple[type[BaseException], ...]:
    """What opening or reading a log stream raises when it fails or is cut (network errors, a read after
    `shutdown()`); Unreachable: the API server went away (a restart), retried until the job's end is known."""
    return (ApiError, Unreachable, ValueError, *NETWORK_ERRORS)


class PodFollower(threading.Thread):
    """Writes one pod's lines through `emit` until the pod is done or `stop()` ends it."""

    def __init__(self, opener: Opener, namespace: str, replica: Replica, emit: Emit, notice: Notice,
                 since_seconds: int | None = None, tail: int | None = None) -> None:
        super().__init__(name=f"logs-{replica.pod}", daemon=True)
        self.open, self.namespace, self.emit, self.notice = opener, namespace, emit, notice
        self.replica = replica
        self.first = (since_seconds, tail)  # --since/--tail apply to the instance running when we start
        self.instance: int | None = None  # restartCount of the container instance being followed
        self.instance_done = False  # its stream ended with the container stopped
        self.dedup = Dedup()
        self.assembler = LineAssembler()
        self.failures = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._response: Any = None
        self._last_data = time.monotonic()
        self._interrupted = False
        self._over_since = 0.0
        self._stopping = False

    # ---- called by the monitor thread -------------------------------------------------------------------
    def update(self, replica: Replica) -> None:
        with self._lock:
            self.replica = replica
        self._wake.set()

    def stop(self) -> None:
        """End the thread once the current stream has gone quiet (the job is over or the pod is gone)."""
        self._stopping = True
        self._wake.set()

    def tick(self, now: float) -> None:
        """Close a stream whose container has stopped or restarted, once it has been quiet for DRAIN_IDLE."""
        with self._lock:
            replica, response = self.replica, self._response
            over = (self._stopping or replica.finished or replica.deleting or replica.state != "running"
                    or replica.restarts != self.instance)
            if response is None or not over:
                return
            self._over_since = self._over_since or now
            if now - self._last_data < DRAIN_IDLE and now - self._over_since < DRAIN_MAX:
                return
            self._response, self._interrupted = None, True
        _interrupt(response)

    # ---- the thread -------------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while self._step():
                pass
        except Exception as exc:  # never die silently: say why this pod's logs stopped
            self.notice(f"[{self.replica.label}] log stream stopped: {type(exc).__name__}: {exc}")
        finally:
            for line in self.assembler.flush():
                self._write(line)

    def _step(self) -> bool:
        """One round: wait, or switch instance, or stream. False when this pod is done."""
        replica = self.replica
        waiting = not replica.started or (self.instance_done and replica.restarts == self.instance)
        if waiting and (self._stopping or replica.finished or replica.deleting):
            return False
        if waiting:
            self._wait()
            return True
        if self.instance is not None and replica.restarts > self.instance:
            self._restarted(replica)
        elif self.instance is None:
            self.instance = replica.restarts
        self._stream(replica)
        return not self._stopping

    def _wait(self) -> None:
        self._wake.wait(0.5)
        self._wake.clear()

    def _restarted(self, replica: Replica) -> None:
        assert self.instance is not None
        self.assembler.discard()
        skipped = replica.restarts - self.instance - 1
        self.notice(f"[{replica.label}] container {replica.container} restarted (restart {replica.restarts})"
                    + (f"; {skipped} earlier restart(s) not shown" if skipped > 0 else ""))
        self._catch_up(replica, previous=True)
        self.instance, self.instance_done, self.first = replica.restarts, False, (None, None)

    def _catch_up(self, replica: Replica, previous: bool) -> None:
        """Write what a non-follow read has beyond the last line written (the end of a stopped container)."""
        since, tail = self._resume_point()
        try:
            response = self.open(replica.pod, replica.container, previous=previous,
                                 since_seconds=None if previous else since, tail_lines=tail)
            text = _body(response)
        except stream_errors() as exc:
            which = "previous container's" if previous else "container's"
            self.notice(f"[{replica.label}] cannot read the {which} last lines: {_short(exc)}")
            return
        self.dedup.begin_replay()
        for line in text_lines(text):
            self._write(line)

    def _stream(self, replica: Replica) -> None:
        since, tail = self._resume_point()
        self.dedup.begin_replay()
        try:
            response = self.open(replica.pod, replica.container, follow=True, since_seconds=since, tail_lines=tail)
        except stream_errors() as exc:
            self._failed(exc)
            return
        with self._lock:
            self._response, self._last_data, self._interrupted = response, time.monotonic(), False
            self._over_since = 0.0
        cut = self._pump(response)
        with self._lock:
            self._response = None
        self._after_stream(cut)

    def _resume_point(self) -> tuple[int | None, int | None]:
        if self.dedup.last == NO_TIME:
            return self.first
        age = time.time() - self.dedup.last / 1e9
        return max(1, int(age) + RESUME_MARGIN), None

    def _pump(self, response: Any) -> bool:
        """Read until the stream ends; True if it was cut (an error) rather than ended by the server."""
        try:
            while chunk := response.read1(READ_SIZE):
                self._last_data = time.monotonic()
                self._write_lines(self.assembler.feed(chunk))
            return False
        except Exception as exc:  # a read racing `_interrupt` from the monitor thread may raise anything
            if self._interrupted or isinstance(exc, stream_errors()):
                return True
            raise
        finally:
            _interrupt(response)

    def _after_stream(self, cut: bool) -> None:
        """What the end of a stream means, from the latest pod status."""
        replica = self.replica
        self.assembler.discard()  # a partial line comes back whole from the next read
        if replica.restarts != self.instance:
            return  # restarted: the next round reads the previous instance's end, then follows the new one
        if self._interrupted or replica.state != "running" or self._stopping:
            self._catch_up(replica, previous=False)  # we closed it, or the server did: nothing may be missing
            self.instance_done = replica.state != "running" or replica.finished
            return
        if cut:  # dropped while the container runs: back off, then resume where we were
            self.failures += 1
            time.sleep(backoff(min(self.failures, 6)))
            return
        # Ended by the server while the status still says running: the kubelet closes the stream when the
        # container stops, and the status follows a moment later.
        self.failures = 0
        self._wait()
        replica = self.replica
        if replica.restarts == self.instance and replica.state != "running":
            self._catch_up(replica, previous=False)
            self.instance_done = True

    def _failed(self, exc: BaseException) -> None:
        # BadRequest: the container has not started yet; NotFound: the pod is gone. Wait for news.
        if isinstance(exc, BadRequest | NotFound) or self._stopping:
            self._wait()
            return
        self.failures += 1
        if self.failures in (1, 5):
            self.notice(f"[{self.replica.label}] cannot read logs ({_short(exc)}); retrying")
        time.sleep(backoff(min(self.failures, 6)))

    def _write_lines(self, lines: list[str]) -> None:
        for line in lines:
            self._write(line)

    def _write(self, line: str) -> None:
        key, stamp, text = split_timestamp(line)
        if self.dedup.accept(key):
            self.emit(self.replica.label, stamp, text)


def _interrupt(response: Any) -> None:
    """Unblock a read in another thread (transport.Response.shutdown: the socket's), then drop the connection."""
    for method in ("shutdown", "close", "release_conn"):
        with contextlib.suppress(Exception):  # best effort on a connection being thrown away
            getattr(response, method, lambda: None)()


def _body(response: Any) -> str:
    """The text of a `_preload_content=False` response (the client's own decoding would choke on bad UTF-8)."""
    return bytes(response.data).decode("utf-8", errors="replace")


def _short(exc: BaseException) -> str:
    if isinstance(exc, ApiError):
        return f"{exc.status} {exc.reason}"
    return (str(exc).splitlines() or [type(exc).__name__])[0][:160]
