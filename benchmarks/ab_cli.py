"""A/B of CLI start-up under the same load: another tree (e.g. `git archive BASE | tar -x -C BASE`)
against this one, interleaved, wall and CPU (user + sys) of fresh processes, medians.

    python benchmarks/ab_cli.py --base BASE [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HELP = "import sys; sys.argv=['kubetrain','--help']; from kubetrain.cli.entry import main; sys.exit(main())"
RENDER_VALIDATE = """
import contextlib, io, sys
from kubetrain.cli.main import main
buf = io.StringIO()
with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
    main(['render', '-f', 'tests/render/specs/gke-h100.yaml'])
from kubetrain.cli.validate_cmd import build_store
from kubetrain.validate import validate_sources
store = build_store(tuple(sys.argv[1:]), False, None, '1.36')
assert not validate_sources([('-', buf.getvalue())], store).failed()
"""


def once(tree: str, argv: list[str]) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": tree}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, capture_output=True, check=True, cwd=tree)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall * 1000, cpu * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from benchmarks.bench_cli import schema_args

    schemas = schema_args(None)[1::2]
    cases = {"python -c pass": [sys.executable, "-c", "pass"], "kubetrain --help": [sys.executable, "-c", HELP],
             "render + validate, one process": [sys.executable, "-c", RENDER_VALIDATE, *schemas]}
    trees = {"base": args.base, "branch": str(REPO)}
    from benchmarks.bench_cli import ensure_bytecode

    for tree in trees.values():  # both sides with .pyc files, as installed packages have them
        ensure_bytecode(Path(tree))
    samples = interleaved(cases, trees, args.runs)
    print(f"load average {os.getloadavg()[0]:.1f}; medians of {args.runs}")
    print_table("measurement", cases, trees, samples)


Samples = dict[tuple[str, str], list[tuple[float, float]]]  # (case, tree label) -> [(wall ms, CPU ms)]


def interleaved(cases: dict[str, list[str]], trees: dict[str, str], runs: int, warmup: int = 0) -> Samples:
    """Each case in each tree, round after round (so both sides see the same load); `warmup` rounds untimed."""
    samples: Samples = {(c, t): [] for c in cases for t in trees}
    for run in range(warmup + runs):
        for case, argv in cases.items():
            for label, tree in trees.items():
                sample = once(tree, argv)
                if run >= warmup:
                    samples[(case, label)].append(sample)
    return samples


def print_table(header: str, cases: dict[str, list[str]], trees: dict[str, str], samples: Samples) -> None:
    print(f"| {header} | base wall | branch wall | base CPU | branch CPU |\n|---|---|---|---|---|")
    for case in cases:
        cells = [statistics.median(s[i] for s in samples[(case, label)]) for i in (0, 1) for label in trees]
        print(f"| {case} | " + " | ".join(f"{value:.0f} ms" for value in cells) + " |")


if __name__ == "__main__":
    main()
