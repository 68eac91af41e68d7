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

On a loaded machine the step times swing far more than 1 %, so the wrapper's cost is also reported as CPU:
the wrapper process's own CPU time from the first to the last train record (/proc/PID/stat, read as each
record comes through it), per step, against the direct median step time (/proc counts in 10 ms ticks). With a
core to spare that CPU costs the step nothing; on a saturated machine it is at most what a step loses.

    .venv/bin/python benchmarks/bench_archive.py [--rounds 3] [--samples 16384] [--log-every 8]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
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


def run(side: str, samples: int, log_every: int, out: Path, wrap: list[str],
        env: dict[str, str], server: int | None = None) -> tuple[list[dict[str, Any]], float, float]:
    """(train records, CPU seconds the wrapper process alone spent between the first and the last train
    record: the steps, not its start-up (which imports the store's client) nor its exit; the same for the
    process `server`, the S3 server that shares this machine's cores, as a remote S3 would not)."""
    from kubetrain.metrics import parse_metrics_line

    argv, full_env = bench_runtime.launch_argv(side, samples, 1, log_every, out, wrapper=wrap, env=env)
    proc = subprocess.Popen(argv, env=full_env, cwd=bench_runtime.REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines, cpu, server_cpu = [], [], []
    for line in proc.stdout:
        lines.append(line)
        if wrap and (record := parse_metrics_line(line)) and record["kind"] == "train":
            cpu.append(_own_cpu(proc.pid))  # the wrapper has just passed this line on: it is running
            server_cpu.append(_own_cpu(server) if server else 0.0)
    output = "".join(lines)
    if proc.wait():
        raise SystemExit(f"{side} failed:\n{output[-4000:]}")
    spent = (cpu[-1] - cpu[0], server_cpu[-1] - server_cpu[0]) if cpu else (0.0, 0.0)
    return bench_runtime.train_records(output), *spent


def _own_cpu(pid: int) -> float:
    """utime + stime of a running process (its own, not its children's), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench(rounds: int, samples: int, log_every: int, workdir: Path, s3_url: str,
          s3_env: dict[str, str], s3_pid: int) -> dict[str, Any]:
    urls = {"archive-dir": str(workdir / "archive"), "archive-s3": s3_url}
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    cpu: dict[str, list[tuple[float, float, float]]] = {side: [] for side in SIDES[1:]}
    for index in range(rounds):
        for side in SIDES[index % 3:] + SIDES[:index % 3]:  # rotate the order between rounds
            wrap = wrapper(urls[side]) if side in urls else []
            records, own, server = run("trainer", samples, log_every, workdir / f"{side}-{index}.pt", wrap, s3_env,
                                       s3_pid if side == "archive-s3" else None)
            times[side] += step_times(records)
            steps = records[-1]["step"] - records[0]["step"]
            if wrap:
                cpu[side].append((own, steps, server))
            print(f"round {index + 1} {side}: median step {statistics.median(step_times(records)) * 1000:.2f} ms"
                  + (f", wrapper CPU during {steps} steps {own:.2f} s" if wrap else "")
                  + (f", S3 server CPU {server:.2f} s" if side == "archive-s3" else ""),
                  file=sys.stderr, flush=True)
    medians = {side: statistics.median(values) for side, values in times.items()}
    return {"medians": medians, "intervals": {side: len(v) for side, v in times.items()},
            "overhead": {side: medians[side] / medians["direct"] - 1 for side in SIDES[1:]},
            "cpu_per_step": {side: sum(o for o, _, _ in v) / sum(n for _, n, _ in v) for side, v in cpu.items()},
            "server_cpu_per_step": sum(s for _, _, s in cpu["archive-s3"]) / sum(n for _, n, _ in cpu["archive-s3"])}


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
                           server.env(), server.pid)
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
        per_step = result["cpu_per_step"][side]
        print(f"median step: {side} {result['medians'][side] * 1000:.2f} ms ({100 * overhead:+.2f} %; "
              f"target < {100 * TARGET:.0f} %: {verdict}); the wrapper's CPU per step {per_step * 1000:.3f} ms "
              f"= {100 * per_step / result['medians']['direct']:.2f} % of the direct step")
    server = result["server_cpu_per_step"]
    print(f"the S3 server (moto, on this machine's cores; a real S3 is remote) used {server * 1000:.3f} ms of CPU per "
          f"step = {100 * server / result['medians']['direct']:.2f} % of the direct step")


if __name__ == "__main__":
    main()
