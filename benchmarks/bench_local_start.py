"""Where a local run's CPU goes: each process `kubetrain run` starts, alone, and a whole two-node run.

    .venv/bin/python benchmarks/bench_local_start.py [--runs 5]

A two-node `kubetrain run` starts the CLI, one torchrun agent per node (kubetrain.runtime.launch), whose node
1 forks the rendezvous store's process, and one rank per node (python -m kubetrain.runtime). The agents and
the ranks import torch; the store, forked once torch is imported, does not import it again. This prints the
CPU seconds (user + system, median of --runs, interleaved) of each part started on its own, and of the whole
run of the fault-tolerance job of tests/runtime (16 steps), so a change to what a process imports, or to how
many processes a run starts, shows up here. No target: the runtime tests' cost is these numbers times the runs
they start (docs/testenv.md).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.runtime.helpers import JOBS, ft_train, quiet_env, write_spec  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36


def cpu_seconds(argv: list[str], env: dict[str, str]) -> float:
    """CPU of the command and every process below it (torchrun's agents wait for their ranks; the store's
    process, detached from its agent, is reparented to this subreaper and reaped here)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, cwd=REPO, check=True, capture_output=True)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def cases(work: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    checkpoint = work / "rank-ckpt"
    rank_env = quiet_env(KUBETRAIN_CONFIG=json.dumps({"train": ft_train(epochs=1),
                                                      "checkpoint": {"dir": str(checkpoint)}}),
                         PYTHONPATH=str(JOBS))
    spec = write_spec(work / "job.yaml", train=ft_train(epochs=1))
    python = sys.executable
    return {
        "the CLI's imports for `run`": ([python, "-c", "import kubetrain.cli.run_cmd"], quiet_env()),
        "import torch": ([python, "-c", "import torch"], quiet_env()),
        "an agent's imports (torchrun)": ([python, "-c", "import torch.distributed.run"], quiet_env()),
        "one rank: python -m kubetrain.runtime, 16 steps": ([python, "-m", "kubetrain.runtime"], rank_env),
        "kubetrain run, 2 nodes x 1 rank, 16 steps": ([python, "-m", "kubetrain", "run", "--raw", "-f", str(spec)],
                                                      quiet_env()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # Linux
    with tempfile.TemporaryDirectory(prefix="bench-local-start-") as tmp:
        work = Path(tmp)
        runs = cases(work)
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.runs):
            for name, (argv, env) in runs.items():
                shutil.rmtree(work / "rank-ckpt", ignore_errors=True)
                shutil.rmtree(work / "ckpt", ignore_errors=True)
                seconds[name].append(cpu_seconds(argv, env))
    print(f"CPU seconds, median of {args.runs} (min-max), load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")
    for name, values in seconds.items():
        print(f"{statistics.median(values):6.2f}  ({min(values):.2f}-{max(values):.2f})  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
