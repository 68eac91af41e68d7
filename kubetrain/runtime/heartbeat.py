"""Each rank's heartbeat (its step and phase, written to a record file), and stacks on demand, for hang and
straggler detection (docs/hangs.md). The training progress users see is kubetrain.observe.progress.

With KUBETRAIN_PROGRESS_DIR set (by `kubetrain run`), every rank of the Trainer API:

* keeps its step, phase (start, data, train, eval, checkpoint, done), its recent step times, the part of each
  step spent outside the collectives, and its recent eval/checkpoint durations in memory - a few attribute
  writes per step on the training thread;
* has a daemon thread replace `rank-R.json` in that directory atomically every WRITE_SECONDS. The thread
  keeps writing while the training thread waits in a collective (that releases the GIL), so a stale file
  means the process itself does not run (stopped, or stuck holding the GIL);
* registers faulthandler on SIGUSR2: `kill -USR2 PID` appends every thread's Python stack to
  `stacks-rank-R.txt`, even while the training thread is blocked in C++ (faulthandler writes from the
  signal handler, without the GIL). Nothing needs ptrace or extra privileges.
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

from kubetrain.podenv import FR_REQUEST, NODE_ENV, PROGRESS_DIR_ENV, flight_record_path, record_path, stacks_path

STACK_SIGNAL = signal.SIGUSR2
WRITE_SECONDS = 2.0
WINDOW = 256  # step times kept (the judge's history)
PHASE_RUNS = 16  # durations kept per timed phase
TIMED_PHASES = ("start", "eval", "checkpoint")


def _flight_recorder() -> bytes | None:
    """torch's flight recorder as JSON (TORCH_FR_BUFFER_SIZE > 0; gloo and nccl), None when off or absent.
    Safe from another thread while the training thread waits in a collective."""
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
        with contextlib.suppress(ValueError, RuntimeError):  # not the main thread: no signal handlers
            faulthandler.register(STACK_SIGNAL, file=self._stacks, all_threads=True, chain=False)
        self.write()
        self._thread = threading.Thread(target=self._run, name="kubetrain-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(WRITE_SECONDS):
            self.write()
            self._answer_flight_recorder_request()

    def _answer_flight_recorder_request(self) -> None:
        assert self.directory is not None
        try:
            requested = (self.directory / FR_REQUEST).stat().st_mtime
        except OSError:
            return
        if requested <= self._fr_handled:
            return
        self._fr_handled = requested
        data = _flight_recorder()
        if data:
            _replace(flight_record_path(self.directory, self.rank), data)

    def stop(self) -> None:
        """Final record (phase done) and stop the thread; the stack signal stays registered."""
        if self.directory is None:
            return
        self.phase("done")
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.write()
