"""A/B of the cluster commands' start-up on one test control plane: another tree (e.g. `git archive BASE |
tar -x -C BASE`) against this one, interleaved, wall and CPU (user + sys) of fresh `kubetrain status`,
`list` and `logs --tail 5` processes (the console script of this venv; PYTHONPATH picks the tree), medians.
The job is bench_status.py's (2 Running pods on kwok nodes, serving log lines).

    .venv/bin/python benchmarks/ab_status.py --base BASE [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KUBETRAIN = str(Path(sys.executable).parent / "kubetrain")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from benchmarks.ab_cli import interleaved, print_table
    from benchmarks.bench_cli import ensure_bytecode, load_average
    from benchmarks.bench_status import bench_job
    from tests.testenv.controlplane import ControlPlane

    trees = {"base": args.base, "branch": str(REPO)}
    for tree in trees.values():  # both sides with .pyc files, as installed packages have them
        ensure_bytecode(Path(tree))
    cases = {"status": [KUBETRAIN, "status", "bench"], "list": [KUBETRAIN, "list"],
             "logs --tail 5": [KUBETRAIN, "logs", "bench", "--tail", "5"]}
    with ControlPlane() as cp, tempfile.TemporaryDirectory() as tmp:
        _, env = bench_job(cp, Path(tmp))
        os.environ["KUBECONFIG"] = env["KUBECONFIG"]  # once() passes os.environ on
        before = load_average()
        samples = interleaved(cases, trees, args.runs, warmup=1)  # the warm-up round fills the page cache
    print(f"medians of {args.runs}, interleaved; {before} before, {load_average()} after")
    print_table("`kubetrain ...`", cases, trees, samples)


if __name__ == "__main__":
    main()
