"""Each rank's heartbeat (its step and phase, written to a record file), and stacks on demand, for hang and
straggler detection (docs/hangs.md). The training progress users see is kubetrain.observe.progress.

With KUBETRAIN_PROGRESS_DIR set (by `kubetrain run`), every rank of the Trainer API:

* keeps its step, phase (start, data, train, eval, checkpoint, done), its recent step times, the part of each
  step spent outside the collectives, and its recent eval/checkpoint durations in memory - a few attribute
  writes per step on the training thread;
* has a daemon thread replace `rank-R.json` in that directory atomically every WRITE_SECONDS. The thread
  keeps writing while the training thread waits in a collective (that releases the GIL), so a stale file
  means the process itself does not run (stopped, or stuck holding the GIL);
* answers a stacks request (an asker replaces `stacks.request` in that directory) from the same thread within
  REQUEST_SECONDS: every thread's Python stack appended to `stacks-rank-R.txt` by faulthandler, called from
  this thread while it holds the GIL, between two marker lines that carry the request's id;
* registers faulthandler on SIGUSR2 as the fallback for a rank whose writer thread cannot run (another thread
  holds the GIL): `kill -USR2 PID` appends the same stacks. faulthandler's signal handler reads the other
  threads' frames without the GIL, which can crash the rank while one of them runs Python; the askers
  (kubetrain.observe.probe) signal only a rank that did not answer its request. Nothing needs ptrace or extra
  privileges.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, Any

from kubetrain.podenv import (
    FR_NONE,
    FR_REQUEST,
    NODE_ENV,
    PROGRESS_DIR_ENV,
    STACKS_ANSWER,
    STACKS_ANSWERED,
    STACKS_REQUEST,
    flight_record_path,
    record_path,
    stacks_path,
)

STACK_SIGNAL = signal.SIGUSR2
WRITE_SECONDS = 2.0
REQUEST_SECONDS = 0.2  # how often the writer thread looks for a stacks or flight-recorder request
WINDOW = 256  # step times kept (the judge's history)
PHASE_RUNS = 16  # durations kept per timed phase
TIMED_PHASES = ("start", "eval", "checkpoint")


def _flight_recorder() -> bytes | None:
    """torch's flight recorder as JSON (TORCH_FR_BUFFER_SIZE > 0; gloo and nccl), None when off or absent.
    Safe from another thread while the training thread waits in a collective."""
    if "torch.distributed" not in sys.modules:  # never imported: no process group (and no torch import here)
        return None
    try:
        # torch's private c10d may be absent: the recorder is then off
        import torch.distributed as dist
        from torch._C import _distributed_c10d as c10d

        if not dist.is_initialized():
            return None
        return bytes(c10d._dump_fr_trace_json(True, False, dist.get_backend()))
    except Exception:  # a private torch API: any failure means no record, never a crash
        return None


def _replace(target: Path, data: bytes) -> None:
    """Write atomically: a reader sees the old file or the new one, never a part."""
    temp = target.with_name(f".{target.name}.{os.getpid()}")
    with contextlib.suppress(OSError):
        temp.write_bytes(data)
        os.replace(temp, target)


def _request_key(path: Path) -> tuple[int, int] | None:
    """A request file's (inode, mtime in ns), None without one. Askers replace the file (a new inode), so two
    requests within one tick of the file system's clock still differ."""
    try:
        status = path.stat()
    except OSError:
        return None
    return status.st_ino, status.st_mtime_ns


def _percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))], 6)


def _compact(values: Any) -> list[float]:
    """Four significant digits: the history stays a few kilobytes per record."""
    return [float(f"{v:.4g}") for v in values]


def _node() -> int:
    raw = os.environ.get(NODE_ENV) or str(int(os.environ.get("GROUP_RANK", "0") or 0) + 1)
    try:
        return int(raw)
    except ValueError:
        return 0


class Heartbeat:
    """This rank's progress; `step()`, `phase()` and `own_time()` are called by the training loop."""

    def __init__(self, rank: int, world_size: int, directory: str | None) -> None:
        self.rank = rank
        self.world_size = world_size
        self.directory = Path(directory) if directory else None
        self.current = "start"
        self.phase_since = time.time()
        self.step_no = 0
        self.step_at = self.phase_since
        self.last_step_mono = time.monotonic()
        self.stepped = False
        self.step_times: deque[float] = deque(maxlen=WINDOW)  # seconds per step, eval and checkpoints excluded
        self.own_times: deque[float] = deque(maxlen=WINDOW)  # the same steps' time outside the collectives
        self.phase_runs: dict[str, deque[float]] = {}
        self.phase_spent = 0.0  # seconds in timed phases since the last step
        self.in_collective = 0.0  # seconds in collectives since the last step
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stacks: IO[str] | None = None
        self._fr_handled = time.time()
        self._stacks_handled: tuple[int, int] | None = None

    @classmethod
    def from_env(cls, rank: int, world_size: int) -> Heartbeat:
        return cls(rank, world_size, os.environ.get(PROGRESS_DIR_ENV) or None)

    # --- the training thread ----------------------------------------------------------------------------
    def phase(self, name: str) -> None:
        """Enter phase `name`; the durations of start/eval/checkpoint runs are kept (the last PHASE_RUNS of
        each) and left out of the step time they fall into."""
        if name == self.current:
            return
        now = time.time()
        if self.current in TIMED_PHASES:
            spent = now - self.phase_since
            self.phase_runs.setdefault(self.current, deque(maxlen=PHASE_RUNS)).append(spent)
            self.phase_spent += spent
        self.current, self.phase_since = name, now

    def step(self, step: int) -> None:
        """An optimizer step finished."""
        mono = time.monotonic()
        self.step_no = step
        self.step_at = time.time()
        took = max(0.0, mono - self.last_step_mono - self.phase_spent)
        first = not self.stepped
        if not first:
            self.step_times.append(took)
            self.own_times.append(max(0.0, took - self.in_collective))
        self.stepped, self.last_step_mono, self.phase_spent, self.in_collective = True, mono, 0.0, 0.0
        if first:  # the first step includes warm-up and resume (not a step time); say at once that start-up is over
            self.write()

    def collective(self, seconds: float) -> None:
        """Seconds of this step spent where the ranks wait for each other (the backward pass, in which DDP
        all-reduces the gradients; an explicit collective). The rest of the step is the rank's own time:
        the straggler signal. Step times are equal on every rank of a synchronous job; this part is not."""
        self.in_collective += seconds

    # --- the record ------------------------------------------------------------------------------------
    def record(self) -> dict[str, Any]:
        # the writer thread reads what the training thread appends to: copy each container in one C call
        steps, own = list(self.step_times), list(self.own_times)
        runs = {phase: list(times) for phase, times in list(self.phase_runs.items())}
        return {
            "rank": self.rank, "world_size": self.world_size, "node": _node(), "host": socket.gethostname(),
            "pid": os.getpid(), "step": self.step_no, "phase": self.current,
            "phase_since": round(self.phase_since, 3), "step_at": round(self.step_at, 3),
            "written_at": round(time.time(), 3), "monotonic": round(time.monotonic(), 3),
            "step_p50": _percentile(steps, 0.5), "step_p99": _percentile(steps, 0.99), "steps_timed": len(steps),
            "own_p50": _percentile(own, 0.5), "own_timed": len(own),
            "phase_max": {k: round(max(v), 3) for k, v in runs.items()},
            "step_times": _compact(steps), "own_times": _compact(own),
            "phase_runs": {k: _compact(v) for k, v in runs.items()},
        }

    def write(self) -> None:
        if self.directory is None:
            return
        _replace(record_path(self.directory, self.rank), json.dumps(self.record(), separators=(",", ":")).encode())

    # --- lifetime --------------------------------------------------------------------------------------
    def start(self) -> None:
        """Create the directory, register the stack signal, start the writer thread."""
        if self.directory is None:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._stacks = open(stacks_path(self.directory, self.rank), "a")  # noqa: SIM115 - open for life
        except OSError as exc:
            print(f"kubetrain.runtime: progress directory {self.directory}: {exc.strerror}; no hang "
                  "detection for this rank", file=sys.stderr, flush=True)
            self.directory = None
            return
        self._stacks_handled = _request_key(self.directory / STACKS_REQUEST)  # an earlier run's: not answered
        with contextlib.suppress(ValueError, RuntimeError):  # not the main thread: no signal handlers
            faulthandler.register(STACK_SIGNAL, file=self._stacks, all_threads=True, chain=False)
        self.write()
        self._thread = threading.Thread(target=self._run, name="kubetrain-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """Requests every REQUEST_SECONDS (a stat each), the record every WRITE_SECONDS."""
        next_write = time.monotonic() + WRITE_SECONDS
        while not self._stop.wait(REQUEST_SECONDS):
            self._answer_stacks_request()
            self._answer_flight_recorder_request()
            if time.monotonic() >= next_write:
                next_write = time.monotonic() + WRITE_SECONDS
                self.write()

    def _answer_stacks_request(self) -> None:
        """Every thread's stack, dumped from this thread: it holds the GIL, so no other thread runs Python while
        faulthandler reads their frames (from the SIGUSR2 handler it reads them without the GIL)."""
        assert self.directory is not None and self._stacks is not None
        key = _request_key(self.directory / STACKS_REQUEST)
        if key is None or key == self._stacks_handled:
            return
        self._stacks_handled = key
        with contextlib.suppress(OSError, ValueError):
            self._stacks.write(f"{STACKS_ANSWER}{key[1]}\n")
            faulthandler.dump_traceback(self._stacks, all_threads=True)  # flushes the line above first
            self._stacks.write(f"{STACKS_ANSWERED}{key[1]}\n")
            self._stacks.flush()

    def _answer_flight_recorder_request(self) -> None:
        assert self.directory is not None
        try:
            requested = (self.directory / FR_REQUEST).stat().st_mtime
        except OSError:
            return
        if requested <= self._fr_handled:
            return
        self._fr_handled = requested
        _replace(flight_record_path(self.directory, self.rank), _flight_recorder() or FR_NONE)

    def stop(self) -> None:
        """Final record (phase done) and stop the thread; the stack signal stays registered."""
        if self.directory is None:
            return
        self.phase("done")
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.write()
