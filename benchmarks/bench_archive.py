"""Benchmark: what the archive wrapper (python -m kubetrain.observe.archive) adds to a training step.

A stand-in training process does `--steps` steps of fixed CPU work (`--work-ms` each) and prints, per step,
a metrics line and a log line (far more output than the runtime's one line per `logEvery` steps). It runs
directly and under the wrapper (archive in a temporary directory, a part every second), in alternating
order, `--rounds` times; the reported step time is the median over each side's steps (from the process's
own clock), and the overhead the ratio of the medians.

    .venv/bin/python benchmarks/bench_archive.py [--steps 400] [--work-ms 20] [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

PROGRAM = r"""
import sys, time
from kubetrain.metrics import format_metrics
steps, work = int(sys.argv[1]), float(sys.argv[2]) / 1000
times = []
for step in range(1, steps + 1):
    began = time.perf_counter()
    deadline = began + work
    while time.perf_counter() < deadline:  # the step's compute
        pass
    print(format_metrics("train", rank=0, step=step, total_steps=steps, loss=1.0 / step, samples_per_s=1e3), flush=True)
    print(f"step {step} done", flush=True)
    times.append(time.perf_counter() - began)
print("STEP_TIMES " + ",".join(f"{t:.6f}" for t in times), file=sys.stderr, flush=True)
"""


def run(wrapped: bool, steps: int, work_ms: float, archive: str) -> list[float]:
    command = [sys.executable, "-c", PROGRAM, str(steps), str(work_ms)]
    if wrapped:
        command = [sys.executable, "-m", "kubetrain.observe.archive", "--url", archive, "--job", "bench",
                   "--replica", "master-0", "--flush-seconds", "1", "--", *command]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    line = next(x for x in (result.stderr + result.stdout).splitlines() if x.startswith("STEP_TIMES "))
    return [float(t) for t in line.split(" ", 1)[1].split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--work-ms", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    times: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as archive:
        for round_ in range(args.rounds):
            for wrapped in ((False, True) if round_ % 2 == 0 else (True, False)):
                times[wrapped] += run(wrapped, args.steps, args.work_ms, archive)
    direct, wrapped = statistics.median(times[False]), statistics.median(times[True])
    print(f"load average {os.getloadavg()[0]:.1f}; {args.rounds} rounds x {args.steps} steps of {args.work_ms:g} ms")
    print(f"median step: direct {direct * 1000:.3f} ms, under the archive wrapper {wrapped * 1000:.3f} ms "
          f"({100 * (wrapped / direct - 1):+.2f} %)")


if __name__ == "__main__":
    main()
