"""SIGTERM/SIGINT handling: every rank agrees on the step at which to checkpoint and stop.

Kubernetes sends SIGTERM to torchrun (pod eviction, preemption, `kubectl delete`), which forwards it to its
workers; another pod's ranks may not get a signal at all. Each optimizer step every rank starts a small
asynchronous all_reduce(MAX) of its "signal received" flag and reads the previous step's result, so the
decision is identical on all ranks, one step after the signal, without stalling the training step.

Exit codes (see docs/runtime.md): 128+signal after the stop checkpoint (143 for SIGTERM, 130 for SIGINT);
EXIT_STOP_TIMEOUT (144) if the checkpoint is not done within `sigtermTimeoutSeconds`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from kubetrain.runtime.distributed import DistEnv

EXIT_STOP_TIMEOUT = 144
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
        timer = threading.Timer(self.timeout_seconds, self._expire)
        timer.daemon = True
        timer.start()
        if not self.checkpointing:
            raise SystemExit(128 + signum)

    def _expire(self) -> None:
        print(f"kubetrain.runtime: rank {self.env.rank}: stopping took over {self.timeout_seconds:g}s "
              f"(sigtermTimeoutSeconds); exiting with {EXIT_STOP_TIMEOUT}", file=sys.stderr, flush=True)
        os._exit(EXIT_STOP_TIMEOUT)

    def poll(self) -> int:
        """Call once per optimizer step on every rank: the agreed signal number (0 = keep training).
        Without checkpointing there is nothing to agree on (the handler exits at once): no collective."""
        if self.env.world_size == 1 or not self.checkpointing:
            return self.signum
        agreed = 0
        if self._work is not None and self._flag is not None:
            self._work.wait()
            agreed = int(self._flag.item())
        self._flag = torch.tensor([self.signum], dtype=torch.int32, device=self.env.device)
        self._work = dist.all_reduce(self._flag, op=dist.ReduceOp.MAX, async_op=True)
        return agreed

    def drain(self) -> None:
        """Wait for the in-flight agreement (before the process group goes away)."""
        if self._work is not None:
            self._work.wait()
            self._work = None
