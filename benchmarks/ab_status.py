"""A/B of the cluster commands' start-up on one test control plane: another tree (e.g. `git archive BASE |
tar -x -C /tmp/base`) against this one, interleaved, wall and CPU (user + sys) of fresh `kubetrain status`,
`list` and `logs --tail 5` processes (the console script of this venv; PYTHONPATH picks the tree), medians.
The job is bench_status.py's (2 Running pods on kwok nodes, serving log lines).

    .venv/bin/python benchmarks/ab_status.py --base /tmp/base [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
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
    from benchmarks.ab_cli import once
    from benchmarks.bench_cli import ensure_bytecode, load_average
    from benchmarks.bench_status import bench_job
    from tests.testenv.controlplane import ControlPlane

    trees = {"base": args.base, "branch": str(REPO)}
    for tree in trees.values():  # both sides with .pyc files, as installed packages have them
        ensure_bytecode(Path(tree))
    cases = {"status": ["status", "bench"], "list": ["list"], "logs --tail 5": ["logs", "bench", "--tail", "5"]}
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {(c, t): [] for c in cases for t in trees}
    with ControlPlane() as cp, tempfile.TemporaryDirectory() as tmp:
        _, env = bench_job(cp, Path(tmp))
        os.environ["KUBECONFIG"] = env["KUBECONFIG"]
        before = load_average()
        for run in range(args.runs + 1):
            for case, argv in cases.items():
                for label, tree in trees.items():
                    sample = once(tree, [KUBETRAIN, *argv])
                    if run:  # the first round warms the page cache
                        samples[(case, label)].append(sample)
    print(f"medians of {args.runs}, interleaved; {before} before, {load_average()} after")
    print("| `kubetrain ...` | base wall | branch wall | base CPU | branch CPU |\n|---|---|---|---|---|")
    for case in cases:
        cells = [statistics.median(s[i] for s in samples[(case, label)]) for i in (0, 1) for label in trees]
        print(f"| {case} | " + " | ".join(f"{value:.0f} ms" for value in cells) + " |")


if __name__ == "__main__":
    main()
