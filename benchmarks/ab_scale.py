"""A/B of `status big` and `list` at bench_scale's size: another tree (e.g. `git archive BASE | tar -x -C
BASE`) against this one, interleaved, wall and CPU (user + sys) of fresh processes, medians. The cluster is
bench_scale.py's (200 tainted 8-GPU nodes, 1,000 jobs, `big` = 64 running pods), measured once it has settled.

    .venv/bin/python benchmarks/ab_scale.py --base BASE [--runs 21] [--nodes 200] [--jobs 1000] [--replicas 64]
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
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=64)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_scale import populate, settle

    from benchmarks.ab_cli import interleaved, print_table
    from benchmarks.bench_cli import ensure_bytecode, load_average
    from tests.testenv.controlplane import ControlPlane

    trees = {"base": args.base, "branch": str(REPO)}
    for tree in trees.values():  # both sides with .pyc files, as installed packages have them
        ensure_bytecode(Path(tree))
    cases = {"status big": [KUBETRAIN, "status", "big"], "list": [KUBETRAIN, "list"]}
    with ControlPlane() as cp, tempfile.TemporaryDirectory() as tmp:
        populate(cp, Path(tmp), args)
        settle()
        os.environ["KUBECONFIG"] = str(cp.kubeconfig)  # once() passes os.environ on
        before = load_average()
        samples = interleaved(cases, trees, args.runs, warmup=1)
    print(f"medians of {args.runs}, interleaved; {before} before, {load_average()} after")
    print_table("`kubetrain ...`", cases, trees, samples)


if __name__ == "__main__":
    main()
