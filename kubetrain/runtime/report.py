"""Metrics lines on stdout (format: kubetrain.metrics). Rank 0 prints; other ranks only when asked."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

import torch
import torch.distributed as dist

from kubetrain.metrics import format_metrics
from kubetrain.runtime.distributed import DistEnv
from kubetrain.runtime.tracking import Tracker

ALL_RANKS_ENV = "KUBETRAIN_LOG_ALL_RANKS"
# A checkpoint and the end in the same moment announce the runs' pages once: two identical lines (same time
# to the millisecond) would read as a line repeated by `logs -f`, and the tail holds the first anyway.
REANNOUNCE_S = 1.0


def gpu_memory_mb(device: torch.device) -> float | None:
    """Peak GPU memory allocated by this process, in MiB (None on CPU)."""
    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)


class Reporter:
    """Prints metrics lines. Set KUBETRAIN_LOG_ALL_RANKS=1 to hear from every rank."""

    def __init__(self, env: DistEnv, stream: TextIO | None = None, tracker: Tracker | None = None) -> None:
        self.env = env
        self.stream = stream
        self.tracker = tracker  # rank 0's experiment trackers (spec.tracking), fed every record
        self.enabled = env.is_main or os.environ.get(ALL_RANKS_ENV, "") not in ("", "0", "false")
        self._announced_at = float("-inf")

    def emit(self, kind: str, *, force: bool = False, **fields: Any) -> None:
        """Print one metrics line (on rank 0, or every rank when asked; `force`: from this rank anyway)."""
        if self.tracker is not None:
            self.tracker.record(kind, fields)
            # the runs' pages, for `status`, `list` and the operator: once open, and with every checkpoint
            again = kind in ("checkpoint", "end") and time.monotonic() - self._announced_at >= REANNOUNCE_S
            if links := self.tracker.new_links(again=again):
                self._announced_at = time.monotonic()
                self._write(format_metrics("tracking", rank=self.env.rank, runs=links))
        if self.enabled or force:
            self._write(format_metrics(kind, rank=self.env.rank, **fields))

    def close_tracker(self) -> None:
        """Flush and close the trackers, then announce a run page that opened only after the last record (a
        resumed run with few steps left can end before its tracker's thread has opened the run)."""
        if self.tracker is None:
            return
        self.tracker.close()
        if links := self.tracker.new_links():
            self._write(format_metrics("tracking", rank=self.env.rank, runs=links))

    def _write(self, line: str) -> None:
        stream = self.stream or sys.stdout
        # One write per line: with PYTHONUNBUFFERED (set in every pod) print() writes the text and the
        # newline separately, and ranks sharing torchrun's stdout pipe then splice each other's lines.
        stream.write(line + "\n")
        stream.flush()


class Window:
    """Loss and sample counts since the last metrics line; the loss is averaged over all ranks when read.
    Micro-batches are added to the current optimizer step (`pending`) and enter the window when that step
    is applied (`commit`), or leave with it when it is skipped (`discard`, spec.divergence.policy skip)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.reset()
        self.discard()

    def reset(self) -> None:
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.batches = 0
        self.samples = 0
        self.started = time.perf_counter()

    def add(self, loss: torch.Tensor, samples: int) -> None:
        self.pending.add_(loss.detach())  # accumulates in float64
        self.pending_batches += 1
        self.pending_samples += samples

    def commit(self) -> None:
        self.loss_sum.add_(self.pending)
        self.batches += self.pending_batches
        self.samples += self.pending_samples
        self.discard()

    def discard(self) -> None:
        self.pending = torch.zeros((), dtype=torch.float64, device=self.device)
        self.pending_batches = 0
        self.pending_samples = 0

    def read(self, env: DistEnv) -> tuple[float | None, float]:
        """(mean loss over ranks and micro-batches, samples/s across all ranks); a collective. The loss is
        None when every step of the window was skipped.

        The clock is read after the values reach the host: on a GPU the loop only queues kernels, and that
        copy is the first point that waits for the window's steps to finish (read before it, the rate counted
        the launches alone: 15-28 % too fast for a GPT-2-small-sized model on an H100)."""
        stats = torch.stack([self.loss_sum, torch.tensor(float(self.batches), dtype=torch.float64,
                                                         device=self.device)])
        if env.world_size > 1:
            dist.all_reduce(stats)
        loss_sum, batches = stats.tolist()
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        return (loss_sum / batches if batches else None), self.samples * env.world_size / elapsed
