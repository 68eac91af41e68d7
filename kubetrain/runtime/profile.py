"""train.profile: torch.profiler over optimizer steps, traces for TensorBoard/Perfetto and a summary.

Each cycle (wait, warmup, active steps; `repeat` cycles) ends with, under `<dir>/rank-<R>/`:

* `<host>_<pid>.<time>.pt.trace.json` from torch's tensorboard_trace_handler: a Chrome trace that
  `tensorboard --logdir <dir>` (torch-tb-profiler plugin) and https://ui.perfetto.dev both open;
* `summary-step-<N>.txt`: the top operators by self time, with their memory (profile_memory);
* a `profile` metrics line: step, trace directory, summary path, the top 5 operators (self ms, self MiB).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch.autograd.profiler_util import FunctionEventAvg
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

from kubetrain.runtime.distributed import DistEnv
from kubetrain.runtime.report import Reporter
from kubetrain.runtime.settings import Profile

TOP = 5


def sort_key(device_type: str) -> str:
    """The FunctionEventAvg attribute ranking ops by their own time. On GPUs it is self_device_time_total:
    key_averages()' events lost the self_cuda_time_total alias (torch 2.4+; only FunctionEvent keeps it), and
    the first profile on a real GPU crashed on it (H200, torch 2.11: docs/gpu.md)."""
    if device_type == "cpu":
        return "self_cpu_time_total"
    return next((k for k in ("self_device_time_total", "self_cuda_time_total") if hasattr(FunctionEventAvg(), k)),
                "self_cpu_time_total")


class StepProfiler:
    """Wraps torch.profiler.profile; `step()` after every optimizer step, `stop()` at the end."""

    def __init__(self, settings: Profile, env: DistEnv, reporter: Reporter) -> None:
        self.directory = Path(settings.dir) / f"rank-{env.rank}"
        self.reporter = reporter
        self.steps = 0
        self._write_trace = tensorboard_trace_handler(str(self.directory))
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if env.device.type == "cuda" else [])
        self.sort_key = sort_key(env.device.type)
        self.profiler = profile(activities=activities, profile_memory=True, on_trace_ready=self._ready,
                                schedule=schedule(wait=settings.wait, warmup=settings.warmup,
                                                  active=settings.active, repeat=settings.repeat))

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.profiler.start()

    def step(self) -> None:
        self.steps += 1
        self.profiler.step()

    def stop(self) -> None:
        self.profiler.stop()

    def _ready(self, prof: Any) -> None:
        self._write_trace(prof)
        averages = prof.key_averages()
        summary = self.directory / f"summary-step-{self.steps:06d}.txt"
        summary.write_text(averages.table(sort_by=self.sort_key, row_limit=20) + "\n")
        ranked = sorted(averages, key=lambda event: getattr(event, self.sort_key), reverse=True)[:TOP]
        top = [{"op": event.key, "self_ms": round(getattr(event, self.sort_key) / 1000, 3),
                "self_mem_mb": round(event.self_cpu_memory_usage / 2**20, 3)} for event in ranked]
        self.reporter.emit("profile", step=self.steps, trace_dir=str(self.directory), summary=str(summary),
                           top=top, force=True)


def make_profiler(settings: Profile | None, env: DistEnv, reporter: Reporter) -> StepProfiler | None:
    """A StepProfiler if this rank profiles, else None."""
    if settings is None or env.rank not in settings.ranks:
        return None
    return StepProfiler(settings, env, reporter)
