"""Benchmark: hang detection latency, and what the progress signal costs a training step (docs/hangs.md).

* latency: one `kubetrain run` of the fault-tolerance job (tests/runtime/jobs/ft_task.py, 2 nodes x 1
  process, gloo) with `spec.hang: {policy: restart, maxRestarts: DRILLS-1, timeoutSeconds: T}`. Each drill
  waits for training to run, SIGSTOPs rank 1 and times until `kubetrain run` prints its `hung since` verdict;
  the restart (from the last checkpoint) starts the next drill. Target: latency <= T + 30 s.
* overhead: the Trainer API in one process (world of 1, gloo, CPU, one thread) on bench_runtime's MLP,
  with and without KUBETRAIN_PROGRESS_DIR, A/B interleaved for --rounds rounds; and the per-step cost of the
  Progress calls alone (the calls the loop makes per micro-step), timed in a tight loop. Target: < 1 %.

    python benchmarks/bench_hang.py latency --drills 10 --timeout 10
    python benchmarks/bench_hang.py overhead --rounds 6 --steps 300

Not a test: numbers depend on the machine. torch is needed.
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import timeit
import uuid
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
JOBS = REPO / "tests" / "runtime" / "jobs"
sys.path.insert(0, str(REPO / "benchmarks"))


# --- latency ------------------------------------------------------------------------------------------------
def _spec(directory: Path, drills: int, timeout: int) -> Path:
    spec = {"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "drill"}, "spec": {
        "image": "example.com/bench:1", "nodes": 2, "procsPerNode": 1, "code": {"path": str(JOBS)},
        "volumes": [{"name": "ckpt", "claim": "ckpt", "mountPath": "/ckpt", "localPath": str(directory / "ckpt")}],
        "env": {"OMP_NUM_THREADS": "1"}, "checkpoint": {"dir": "/ckpt/drill", "everySteps": 20},
        "hang": {"timeoutSeconds": timeout, "policy": "restart", "maxRestarts": drills - 1},
        "train": {"model": "ft_task:build_model", "dataset": "ft_task:build_datasets", "epochs": 100_000,
                  "batchSize": 16, "lr": 0.05, "seed": 7, "logEvery": 2}}}
    path = directory / "kubetrain.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _rank_pid(marker: str, rank: int) -> int | None:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if f"BENCH_MARKER={marker}".encode() in environ and f"RANK={rank}".encode() in environ \
                and b"kubetrain.runtime.launch" not in cmdline and b"torch.distributed.run" not in cmdline:
            return int(entry)
    return None


def _pump(stream: Any, name: str, lines: queue.Queue[tuple[float, str, str]]) -> None:
    for line in iter(stream.readline, ""):
        lines.put((time.monotonic(), name, line.rstrip("\n")))


def _next(lines: queue.Queue[tuple[float, str, str]], want: Any, limit: float) -> tuple[float, str]:
    deadline = time.monotonic() + limit
    while True:
        at, name, line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        if want(name, line):
            return at, line


def latency(drills: int, timeout: int) -> list[float]:
    marker = uuid.uuid4().hex
    with tempfile.TemporaryDirectory() as tmp:
        spec = _spec(Path(tmp), drills, timeout)
        env = {**os.environ, "BENCH_MARKER": marker, "FT_SLEEP": "0.001", "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "kubetrain", "run", "--raw", "-f", str(spec)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        lines: queue.Queue[tuple[float, str, str]] = queue.Queue()
        for stream, name in ((proc.stdout, "out"), (proc.stderr, "err")):
            threading.Thread(target=_pump, args=(stream, name, lines), daemon=True).start()
        results = []
        try:
            for drill in range(drills):
                _next(lines, lambda n, text: n == "out" and '"kind":"train"' in text, 300)
                pid = _rank_pid(marker, 1)
                assert pid is not None, "no rank 1"
                os.kill(pid, signal.SIGSTOP)
                stopped = time.monotonic()
                found, verdict = _next(lines, lambda n, text: n == "err" and "hung since" in text, timeout + 300)
                results.append(found - stopped)
                print(f"drill {drill + 1}: detected after {found - stopped:.1f} s: {verdict[:160]}", flush=True)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return results


# --- overhead -----------------------------------------------------------------------------------------------
def _fit(steps: int, progress_dir: str | None) -> float:
    """Seconds per optimizer step of a Trainer run of `steps` steps (after 20 warm-up steps)."""
    import torch
    from bench_runtime import BATCH, make_data, make_model

    from kubetrain.jobspec.sections import Train
    from kubetrain.runtime.trainer import Factories, Trainer

    torch.set_num_threads(1)
    if progress_dir:
        os.environ["KUBETRAIN_PROGRESS_DIR"] = progress_dir
    else:
        os.environ.pop("KUBETRAIN_PROGRESS_DIR", None)
    train = Train(model="bench:model", dataset="bench:data", epochs=1, batchSize=BATCH, logEvery=10_000)
    timings: list[float] = []

    class Timed(torch.utils.data.Dataset[Any]):
        def __init__(self) -> None:
            self.inner = make_data((steps + 20) * BATCH)

        def __len__(self) -> int:
            return len(self.inner)

        def __getitem__(self, index: int) -> Any:
            if index == 20 * BATCH:
                timings.append(time.perf_counter())
            return self.inner[index]

    with open(os.devnull, "w") as quiet:
        Trainer(train, factories=Factories(model=make_model, dataset=lambda: (Timed(), None)), stream=quiet).fit()
    return (time.perf_counter() - timings[0]) / steps


def _calls_per_step() -> float:
    """Seconds the Progress calls of one micro-step take (phase data, phase train, own_time, step)."""
    from kubetrain.runtime.progress import Progress

    progress = Progress(0, 1, None)
    number = 200_000

    def one() -> None:
        progress.phase("data")
        progress.phase("train")
        progress.own_time(0.001)
        progress.step(1)

    return min(timeit.repeat(one, number=number, repeat=5)) / number


def overhead(rounds: int, steps: int) -> None:
    sides: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as directory:
        for index in range(rounds):
            order = ("off", "on") if index % 2 == 0 else ("on", "off")
            for side in order:
                sides[side].append(_fit(steps, directory if side == "on" else None))
    off, on = statistics.median(sides["off"]), statistics.median(sides["on"])
    calls = _calls_per_step()
    print(f"step time, median of {rounds} interleaved runs of {steps} steps: off {off * 1000:.2f} ms, on "
          f"{on * 1000:.2f} ms ({(on / off - 1) * 100:+.2f} %)")
    print(f"   runs off: {' '.join(f'{s * 1000:.2f}' for s in sides['off'])} ms")
    print(f"   runs on:  {' '.join(f'{s * 1000:.2f}' for s in sides['on'])} ms")
    print(f"Progress calls per micro-step: {calls * 1e6:.2f} us = {calls / off * 100:.3f} % of this step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    lat = sub.add_parser("latency")
    lat.add_argument("--drills", type=int, default=10)
    lat.add_argument("--timeout", type=int, default=10, help="spec.hang.timeoutSeconds")
    over = sub.add_parser("overhead")
    over.add_argument("--rounds", type=int, default=6)
    over.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    if args.what == "latency":
        results = latency(args.drills, args.timeout)
        print(f"{len(results)} drills, threshold {args.timeout} s: detection latency median "
              f"{statistics.median(results):.1f} s, max {max(results):.1f} s (target <= {args.timeout + 30} s)")
    else:
        overhead(args.rounds, args.steps)


if __name__ == "__main__":
    main()
