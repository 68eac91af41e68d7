"""Exit-code soak test: N consecutive two-node `kubetrain run`s of a job while other processes load the CPUs.

Proves "a completed run exits 0, always" (docs/runtime.md, "Exits"): every run must exit 0 and print its
final metrics; any other exit code (e.g. -6/134 from an abort in process teardown) is a failure, and the
run's whole output is kept for diagnosis. Workers run with PYTHONFAULTHANDLER=1, so an abort prints the
Python stack of every thread.

    python benchmarks/exit_loop.py --runs 50              # about 15 min on 2 loaded cores
    python benchmarks/exit_loop.py --runs 5 --load 0      # quick check, no extra load
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SPEC = REPO / "examples" / "digits" / "kubetrain.yaml"
BURNER = "import itertools\nfor _ in itertools.count():\n    pass\n"


def start_load(processes: int) -> list[subprocess.Popen[bytes]]:
    """Busy-loop processes at the lowest priority difference (nice 0): they compete with the run."""
    return [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(processes)]


def stop_load(burners: list[subprocess.Popen[bytes]]) -> None:
    for proc in burners:
        proc.kill()
        proc.wait()


def one_run(spec: Path, index: int, keep: Path) -> tuple[int, float, bool]:
    """(exit code, seconds, saw the 'end completed' metrics line) of one fresh run."""
    env = {**os.environ, "PYTHONFAULTHANDLER": "1", "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryDirectory() as volume:
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "kubetrain", "run", "-f", str(spec),
                                 "--volume", f"ckpt={volume}"], env=env, cwd=REPO, capture_output=True,
                                text=True, timeout=600, check=False)
        seconds = time.monotonic() - started
    completed = '"status":"completed"' in result.stdout
    if result.returncode != 0 or not completed:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / f"run-{index:03d}.log").write_text(f"exit {result.returncode}\n--- stdout\n{result.stdout}\n"
                                                   f"--- stderr\n{result.stderr}\n")
    return result.returncode, seconds, completed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--load", type=int, default=os.cpu_count() or 2, help="busy-loop processes (default: cores)")
    parser.add_argument("-f", "--spec", type=Path, default=DEFAULT_SPEC)
    parser.add_argument("--keep", type=Path, default=Path(tempfile.gettempdir()) / "kubetrain-exit-loop",
                        help="directory for the output of failed runs")
    args = parser.parse_args()
    burners = start_load(args.load)
    codes: collections.Counter[int] = collections.Counter()
    durations: list[float] = []
    incomplete = 0
    try:
        for index in range(1, args.runs + 1):
            code, seconds, completed = one_run(args.spec, index, args.keep)
            codes[code] += 1
            durations.append(seconds)
            incomplete += not completed
            print(f"run {index}/{args.runs}: exit {code}, {seconds:.1f}s"
                  + ("" if completed else ", NOT completed"), file=sys.stderr, flush=True)
    finally:
        stop_load(burners)
    summary = {"runs": args.runs, "load_processes": args.load, "exit_codes": dict(codes),
               "incomplete": incomplete, "median_seconds": sorted(durations)[len(durations) // 2],
               "failed_logs": str(args.keep) if codes[0] != args.runs or incomplete else None}
    print(json.dumps(summary))
    return 0 if codes[0] == args.runs and not incomplete else 1


if __name__ == "__main__":
    sys.exit(main())
