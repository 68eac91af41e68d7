"""Experiment tracking on rank 0: the metrics stream goes to MLflow and/or TensorBoard as one run per job.

The run survives restarts: its IDs are kept in `tracking.json` beside the checkpoints (written as soon as the
run exists), so a restarted or resumed process logs into the same run, and points at steps the run already
has are skipped. Each checkpoint carries the points not yet sent when it was written, so a process killed
before sending them sends them after its resume (the steps after the checkpoint are trained, and so logged,
again). Trackers never stop training: the training thread only appends
to a bounded buffer; a thread of each tracker sends it, retrying while the tracker is unreachable, and what
was dropped is said in one line at the end. The trackers' clients are imported by kubetrain.runtime.trackers,
only for the trackers `spec.tracking` sets.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from kubetrain.podenv import RUN_KEY_ENV, TRACKING_ENV
from kubetrain.runtime.config import json_object

RUN_FILE = "tracking.json"
# metrics-line fields that become tracked metrics, by kind
METRIC_FIELDS = {"train": ("loss", "lr", "samples_per_s", "gpu_mem_mb"), "eval": ("eval_loss", "eval_accuracy")}
FLUSH_SECONDS = 30.0  # the most the end of training waits for a tracker
STOP_FLUSH_SECONDS = 5.0  # the same after a stop signal or an error
RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0)
SEND_SECONDS = 1.0


class Point(NamedTuple):
    """One record's metrics, stamped when recorded: a batch sent again after its answer was lost (a request
    that timed out after the server applied it) carries the same timestamps, and MLflow keeps one copy of a
    metric it already has (same key, step, value and timestamp)."""

    step: int
    values: dict[str, float]
    time_ms: int


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class TrackingConfig:
    """KUBETRAIN_TRACKING (rendered from spec.tracking) and the run's key."""

    data: dict[str, Any]
    key: str

    @property
    def run_name(self) -> str:
        return str(self.data.get("runName") or "kubetrain")

    @property
    def tags(self) -> dict[str, str]:
        tags = {str(k): str(v) for k, v in (self.data.get("tags") or {}).items() if v}
        return {**tags, "kubetrain.run-key": self.key}

    @property
    def buffer_points(self) -> int:
        return int(self.data.get("bufferPoints") or 100_000)

    def params(self) -> dict[str, str]:
        """The spec's training fields (flattened: train.lr, train.ddp.bucketCapMb, nodes...) and the user's."""
        spec = (self.data.get("spec") or {}).get("spec") or {}
        found = {name: spec[name] for name in ("nodes", "procsPerNode", "gpusPerNode", "image") if name in spec}
        found.update(_flatten("train", spec.get("train") or {}))
        found.update({str(k): v for k, v in (self.data.get("params") or {}).items()})
        return {key: str(value) for key, value in found.items() if value is not None}


def _flatten(prefix: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(f"{prefix}.{key}", item))
        return flat
    return {prefix: json.dumps(value) if isinstance(value, list) else value}


def load_tracking(environ: dict[str, str] | os._Environ[str] | None = None) -> TrackingConfig | None:
    """The tracking configuration, or None when the job tracks nothing."""
    environ = os.environ if environ is None else environ
    raw = environ.get(TRACKING_ENV)
    if not raw:
        return None
    return TrackingConfig(json_object(TRACKING_ENV, raw), environ.get(RUN_KEY_ENV) or "")


class RunFile:
    """`tracking.json` beside the checkpoints: each tracker's run ID, so every restart joins the same run. A
    checkpoint directory on an object store (or none) keeps no file: the run is then found by its key."""

    def __init__(self, checkpoint_dir: str | None) -> None:
        local = checkpoint_dir and "://" not in checkpoint_dir
        self.path = Path(checkpoint_dir) / RUN_FILE if local and checkpoint_dir else None
        self._lock = threading.Lock()

    def read(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def update(self, key: str, values: Any) -> None:
        """Record one tracker's run (atomically: a reader sees the old file or the new one)."""
        if self.path is None:
            return
        with self._lock:
            data = self.read()
            data[key] = values
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temp = self.path.with_name(f".{RUN_FILE}.{os.getpid()}")
            temp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
            os.replace(temp, self.path)


@dataclass
class Outcome:
    """What the end of training tells the trackers."""

    status: str  # completed, stopped, or failed (an exception)
    step: int
    checkpoint: str | None


class Connection:
    """A tracker's blocking side, called from its own thread: open (or join) the run, send points, close."""

    name = "tracker"
    link: str | None = None  # the run's page, once open

    def __init__(self, config: TrackingConfig, run_file: RunFile, section: dict[str, Any]) -> None:
        raise NotImplementedError

    def open(self) -> dict[str, int]:
        """Join or create the run; the last logged step per metric (points at or before it are skipped)."""
        raise NotImplementedError

    def send(self, points: list[Point]) -> None:
        raise NotImplementedError

    def close(self, outcome: Outcome) -> None:
        raise NotImplementedError


@dataclass
class Buffered:
    """A Connection behind a bounded buffer and a thread: `add` never blocks and never raises."""

    connection: Connection
    capacity: int
    points: deque[Point] = field(default_factory=deque)
    dropped: int = 0
    error: str | None = None
    last_steps: dict[str, int] | None = None
    outcome: Outcome | None = None
    _wake: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"kubetrain-{self.connection.name}", daemon=True)
        self._thread.start()

    def add(self, step: int, values: dict[str, float]) -> None:
        with self._lock:
            if len(self.points) >= self.capacity:
                self.points.popleft()  # the oldest goes: the newest say where training is
                self.dropped += 1
            self.points.append(Point(step, values, _now_ms()))

    def unsent(self) -> list[list[Any]]:
        """The points not sent yet (or being sent), for a checkpoint."""
        with self._lock:
            return [[step, values, time_ms] for step, values, time_ms in self.points]

    def restore(self, saved: list[list[Any]]) -> None:
        """A resumed process: first the points its predecessor had not sent at the checkpoint."""
        restored = [Point(int(point[0]), {str(k): float(v) for k, v in point[1].items()},
                          int(point[2]) if len(point) > 2 else _now_ms())  # older checkpoints: no timestamp
                    for point in saved]
        with self._lock:
            self.points.extendleft(reversed(restored))

    def finish(self, outcome: Outcome, timeout: float) -> str | None:
        """Send what is left and close the run, waiting at most `timeout`; a line about what was lost."""
        self.outcome = outcome
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        # still inside a request: a server that stopped answering holds it up to the client's own timeout
        hung = self._thread is not None and self._thread.is_alive()
        with self._lock:
            unsent = len(self.points) + self.dropped
        why = f" ({self.error})" if self.error else ""
        if not unsent:
            if hung:
                return (f"kubetrain.runtime: tracking: {self.connection.name}: the run was not closed within "
                        f"{timeout:g} s{why or ' (its last request had no answer)'}")
            return f"kubetrain.runtime: tracking: {self.connection.name}: the run was not closed{why}" if why else None
        return (f"kubetrain.runtime: tracking: {self.connection.name}: {unsent} points not logged "
                f"({self.dropped} dropped from a full buffer of {self.capacity}){why}")

    def _run(self) -> None:
        failures = 0
        while True:
            self._wake.clear()  # set by `finish` only: the last round starts at once
            try:
                done = self._step()
                failures = 0
                self.error = None
                if done:
                    return
            except Exception as exc:  # a tracker's failure is never training's
                self.error = " ".join(str(exc).split())[:300] or type(exc).__name__
                if self.outcome is not None and failures >= 2:
                    return
                self._wake.wait(RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)])
                failures += 1
                continue
            if self.outcome is None:
                self._wake.wait(SEND_SECONDS)  # points go in batches: one request a second, not one a step

    def _step(self) -> bool:
        """One round: open, send the buffer, close at the end; True when done."""
        if self.last_steps is None:
            self.last_steps = self.connection.open()
        with self._lock:
            batch = list(self.points)
        fresh = self._new_points(batch)
        if fresh:
            self.connection.send(fresh)
        assert self.last_steps is not None
        for step, values, _ in fresh:
            self.last_steps.update(dict.fromkeys(values, step))
        sent = {id(point) for point in batch}  # `add` may have dropped some of them meanwhile
        with self._lock:
            while self.points and id(self.points[0]) in sent:
                self.points.popleft()
        if self.outcome is not None and not self.points:
            self.connection.close(self.outcome)
            return True
        return False

    def _new_points(self, batch: list[Point]) -> list[Point]:
        """The points at steps after those the run has (a resumed run repeats the steps since its checkpoint)."""
        assert self.last_steps is not None
        last = dict(self.last_steps)
        fresh = []
        for step, values, time_ms in batch:
            kept = {k: v for k, v in values.items() if step > last.get(k, -1)}
            last.update(dict.fromkeys(kept, step))
            if kept:
                fresh.append(Point(step, kept, time_ms))
        return fresh


class Tracker:
    """Rank 0's trackers: fed every metrics record by the Reporter, closed by the Trainer."""

    def __init__(self, trackers: list[Buffered], config: TrackingConfig) -> None:
        self.trackers = trackers
        self.config = config
        self.checkpoint: str | None = None
        self.step = 0
        self.ended: Outcome | None = None
        self.announced: set[str] = set()

    def new_links(self, again: bool = False) -> dict[str, str]:
        """The runs' pages not announced yet (each tracker's thread sets its link once the run is open); all of
        them `again` (the operator reads only the tail of the log)."""
        links = {t.connection.name: t.connection.link for t in self.trackers
                 if t.connection.link and (again or t.connection.name not in self.announced)}
        self.announced.update(links)
        return links

    def record(self, kind: str, fields: dict[str, Any]) -> None:
        """One metrics record (the training thread: appends only)."""
        step = fields.get("step")
        if isinstance(step, int):
            self.step = step
        if kind == "checkpoint":
            self.checkpoint = str(fields.get("path"))
        elif kind == "end":
            self.ended = Outcome(str(fields.get("status")), self.step, self.checkpoint)
        names = METRIC_FIELDS.get(kind, ())
        values = {name: float(fields[name]) for name in names if isinstance(fields.get(name), int | float)
                  and not isinstance(fields.get(name), bool)}
        if values and isinstance(step, int):
            for tracker in self.trackers:
                tracker.add(step, values)

    def unsent(self) -> dict[str, list[list[Any]]]:
        """Each tracker's points not sent yet: saved in a checkpoint, sent after a resume from it."""
        return {tracker.connection.name: tracker.unsent() for tracker in self.trackers}

    def restore(self, saved: dict[str, list[list[Any]]]) -> None:
        for tracker in self.trackers:
            tracker.restore(saved.get(tracker.connection.name) or [])

    def close(self) -> None:
        """Flush and close every tracker (at most FLUSH_SECONDS each); one line per tracker that lost points."""
        outcome = self.ended or Outcome("failed", self.step, self.checkpoint)
        # a stopped job has its grace period to spend on the stop checkpoint, not on trackers
        timeout = FLUSH_SECONDS if outcome.status == "completed" else STOP_FLUSH_SECONDS
        for tracker in self.trackers:
            if line := tracker.finish(outcome, timeout):
                print(line, file=sys.stderr, flush=True)

