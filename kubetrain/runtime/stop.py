"""SIGTERM/SIGINT handling: every rank agrees on the step at which to checkpoint and stop.

Kubernetes sends SIGTERM to torchrun (pod eviction, preemption, `kubectl delete`), which forwards it to its
workers; another pod's ranks may not get a signal at all. So the ranks agree: at poll steps every rank
starts a small asynchronous all_reduce(MAX) of [signal received, seconds per step] and reads the previous
poll's result, which is identical on all ranks. From it they also derive the same next poll step, about
POLL_SECONDS later (at least every step, at most every MAX_POLL_EVERY steps), so stopping takes at most
two poll intervals plus a step while the agreement costs one tiny collective per ~0.2 s, off the
critical path.

Exit codes (see docs/runtime.md): 128+signal after the stop checkpoint (143 for SIGTERM, 130 for SIGINT);
EXIT_STOP_TIMEOUT (144) if the checkpoint is not done within `sigtermTimeoutSeconds`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from kubetrain.runtime.distributed import DistEnv

EXIT_STOP_TIMEOUT = 144
POLL_SECONDS = 0.2
MAX_POLL_EVERY = 100
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class TrainingStopped(Exception):
    """Training stopped on a signal; a checkpoint was written (if configured). `exit_code` is 128+signal."""

    def __init__(self, signum: int, checkpoint: str | None) -> None:
        self.signum = signum
        self.checkpoint = checkpoint
        self.exit_code = 128 + signum
        super().__init__(f"stopped by {signal.Signals(signum).name} at a step boundary"
                         + (f"; checkpoint {checkpoint}" if checkpoint else ""))


class StopSignal:
    """Records SIGTERM/SIGINT and arms a watchdog that ends the process if stopping takes too long."""

    def __init__(self, env: DistEnv, timeout_seconds: float, checkpointing: bool) -> None:
        self.env = env
        self.timeout_seconds = timeout_seconds
        self.checkpointing = checkpointing
        self.signum = 0
        self._previous: dict[int, Any] = {}
        self._flag: torch.Tensor | None = None
        self._work: Any = None
        self._next_poll = 0
        self._last_poll = (0, time.perf_counter())  # (step, time) of the previous poll
        self._watchdog: threading.Timer | None = None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum:
            return  # already stopping (torchrun forwards the signal again on shutdown)
        self.signum = signum
        name = signal.Signals(signum).name
        print(f"kubetrain.runtime: rank {self.env.rank} got {name}; stopping at the next step boundary"
              + (" after a checkpoint" if self.checkpointing else ""), file=sys.stderr, flush=True)
        self._watchdog = threading.Timer(self.timeout_seconds, self._expire)
        self._watchdog.daemon = True
        self._watchdog.start()
        if not self.checkpointing:
            raise SystemExit(128 + signum)

    def cancel(self) -> None:
        """Stopping is done (or training ended): disarm the watchdog, so a caller that catches
        TrainingStopped and carries on is not killed later."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def _expire(self) -> None:
        print(f"kubetrain.runtime: rank {self.env.rank}: stopping took over {self.timeout_seconds:g}s "
              f"(sigtermTimeoutSeconds); exiting with {EXIT_STOP_TIMEOUT}", file=sys.stderr, flush=True)
        os._exit(EXIT_STOP_TIMEOUT)

    def poll(self, step: int) -> int:
        """Call after every optimizer step on every rank: the agreed signal number (0 = keep training).
        Without checkpointing there is nothing to agree on (the handler exits at once): no collective."""
        if self.env.world_size == 1 or not self.checkpointing:
            return self.signum
        if step < self._next_poll:
            return 0
        agreed, step_seconds = 0, 0.0
        if self._work is not None and self._flag is not None:
            self._work.wait()
            agreed, step_seconds = int(self._flag[0]), float(self._flag[1])
        last_step, last_time = self._last_poll
        now = time.perf_counter()
        self._last_poll = (step, now)
        local = (now - last_time) / max(step - last_step, 1)
        self._flag = torch.tensor([float(self.signum), local], dtype=torch.float64, device=self.env.device)
        self._work = dist.all_reduce(self._flag, op=dist.ReduceOp.MAX, async_op=True)
        every = int(POLL_SECONDS / step_seconds) if step_seconds > 0 else 1
        self._next_poll = step + min(max(every, 1), MAX_POLL_EVERY)
        return agreed

    def drain(self) -> None:
        """Wait for the in-flight agreement (before the process group goes away)."""
        if self._work is not None:
            self._work.wait()
            self._work = None
