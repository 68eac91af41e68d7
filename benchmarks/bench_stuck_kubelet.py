"""The CLI's worst case with a stuck kubelet: how long `status`, `logs --tail` and `stacks` take when the
kubelet behind the job's pods holds the connection and never answers (target: --request-timeout + 1 s).

    .venv/bin/python benchmarks/bench_stuck_kubelet.py [--runs 3] [--timeouts 2,5]

On the kwok test cluster (tests/testenv): one 2-pod PyTorchJob serving log lines. kwok is the kubelet that
serves these pods' logs and execs (the API server proxies to it as to a kubelet); it is SIGSTOPped for the
length of one command, then SIGCONTed, so its nodes stay Ready (the node controller waits 40 s): only the
command's own deadline ends its wait. Every (command, --request-timeout) pair is timed --runs times,
interleaved, as fresh processes; and each command once with kwok running, for reference. Needs `make testenv`.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
KUBETRAIN = [str(Path(sys.executable).parent / "kubetrain")]
COMMANDS = {"status": ["status", "bench"], "logs --tail 5": ["logs", "bench", "--tail", "5"],
            "stacks": ["stacks", "bench"], "status --hang": ["status", "bench", "--hang"]}


def timed(argv: list[str], env: dict[str, str], stop_pid: int | None) -> tuple[float, str]:
    """Seconds to exit, and the last line on stderr/stdout naming the kubelet."""
    if stop_pid:
        os.kill(stop_pid, signal.SIGSTOP)
    try:
        began = time.perf_counter()
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
        took = time.perf_counter() - began
    finally:
        if stop_pid:
            os.kill(stop_pid, signal.SIGCONT)
    said = [line for line in (result.stdout + result.stderr).splitlines() if "did not answer" in line]
    return took, said[-1].strip() if said else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeouts", default="2,5")
    args = parser.parse_args()
    timeouts = [float(t) for t in args.timeouts.split(",")]

    from benchmarks.bench_cli import ensure_bytecode, load_average
    from benchmarks.bench_status import bench_job
    from tests.testenv.controlplane import ControlPlane

    ensure_bytecode()
    with ControlPlane() as cp, tempfile.TemporaryDirectory() as tmp:
        _, env = bench_job(cp, Path(tmp), 0)
        kwok = next(c for c in cp.sup.children if c.name == "kwok").pid
        print(f"load average before: {load_average()}")
        for label, argv in COMMANDS.items():
            took, _ = timed([*KUBETRAIN, *argv], env, None)
            print(f"kwok running: `kubetrain {label}` {took:.2f} s")
        times: dict[tuple[str, float], list[float]] = {}
        lines: dict[str, str] = {}
        for _ in range(args.runs):
            for timeout in timeouts:
                for label, argv in COMMANDS.items():
                    took, line = timed([*KUBETRAIN, *argv, "--request-timeout", f"{timeout:g}s"], env, kwok)
                    times.setdefault((label, timeout), []).append(took)
                    lines[label] = line
                    time.sleep(1)  # kwok catches up (node leases, pod status) before the next stop
        print(f"load average after: {load_average()}\n")
        print("| command | --request-timeout | median | max | target (timeout + 1 s) |")
        print("|---|---|---|---|---|")
        for (label, timeout), found in times.items():
            worst = max(found)
            mark = "met" if worst <= timeout + 1 else "missed"
            print(f"| `kubetrain {label}` | {timeout:g} s | {statistics.median(found):.2f} s | {worst:.2f} s | "
                  f"{mark} |")
        print()
        for label, line in lines.items():
            print(f"{label}: {line}")


if __name__ == "__main__":
    main()
