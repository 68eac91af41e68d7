"""Benchmark: what `spec.archive` adds to a training step, measured with the runtime benchmark's training.

The same real training as benchmarks/bench_runtime.py (the kubetrain Trainer, 2 processes under torchrun,
gloo, CPU, its MLP and data) runs three ways, in rotating order, `--rounds` times:

* direct: torchrun as `kubetrain run` / a pod without spec.archive starts it;
* archive in a directory: under the archive wrapper (python -m kubetrain.observe.archive), as the pod's
  command is with `spec.archive: /some/volume`;
* archive in S3: the same, to a real S3 server (moto, started here as the test suite starts it).

A step's time comes from the Trainer's own metrics lines: (time of record n - time of record n-1) / steps
between them, after the first record (warm-up). The reported step time of each side is the median over
every interval of every round; the overhead is the ratio of the medians (target < 1 %).

    .venv/bin/python benchmarks/bench_archive.py [--rounds 3] [--samples 16384] [--log-every 8]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # bench_runtime (its workload) and tests.testenv.s3 (moto)

import bench_runtime  # noqa: E402

SIDES = ("direct", "archive-dir", "archive-s3")
TARGET = 0.01


def step_times(records: list[dict[str, Any]]) -> list[float]:
    """Seconds per step between consecutive train records (the first record ends the warm-up)."""
    return [(b["time"] - a["time"]) / (b["step"] - a["step"]) for a, b in itertools.pairwise(records)
            if b["step"] > a["step"]]


def wrapper(url: str) -> list[str]:
    return [sys.executable, "-m", "kubetrain.observe.archive", "--url", url, "--job", "bench", "--replica",
            "master-0", "--"]


def bench(rounds: int, samples: int, log_every: int, workdir: Path, s3_url: str,
          s3_env: dict[str, str]) -> dict[str, Any]:
    urls = {"archive-dir": str(workdir / "archive"), "archive-s3": s3_url}
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for index in range(rounds):
        for side in SIDES[index % 3:] + SIDES[:index % 3]:  # rotate the order between rounds
            wrap = wrapper(urls[side]) if side in urls else []
            records = bench_runtime.launch("trainer", samples, 1, log_every, workdir / f"{side}-{index}.pt",
                                           wrapper=wrap, env=s3_env)
            times[side] += step_times(records)
            print(f"round {index + 1} {side}: median step {statistics.median(step_times(records)) * 1000:.2f} ms",
                  file=sys.stderr, flush=True)
    medians = {side: statistics.median(values) for side, values in times.items()}
    return {"medians": medians, "intervals": {side: len(v) for side, v in times.items()},
            "overhead": {side: medians[side] / medians["direct"] - 1 for side in SIDES[1:]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=16384, help="training samples (one epoch)")
    parser.add_argument("--log-every", type=int, default=8, help="the Trainer's logEvery (a metrics line each)")
    args = parser.parse_args()
    from tests.testenv.s3 import S3Server

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        server = S3Server(Path(tmp)).start()
        try:
            result = bench(args.rounds, args.samples, args.log_every, Path(tmp), server.bucket("bench") + "/runs",
                           server.env())
        finally:
            server.stop()
    load_after = os.getloadavg()
    steps = args.samples // (2 * bench_runtime.BATCH)
    print(f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after (1 min) on {os.cpu_count()} CPUs; "
          f"{args.rounds} rounds x 3 sides in rotating order; {steps} steps per run, a metrics line every "
          f"{args.log_every}; medians over {result['intervals']['direct']} intervals per side")
    print(f"median step: direct {result['medians']['direct'] * 1000:.2f} ms")
    for side in SIDES[1:]:
        overhead = result["overhead"][side]
        verdict = "within" if overhead < TARGET else "OVER"
        print(f"median step: {side} {result['medians'][side] * 1000:.2f} ms ({100 * overhead:+.2f} %; "
              f"target < {100 * TARGET:.0f} %: {verdict})")


if __name__ == "__main__":
    main()
