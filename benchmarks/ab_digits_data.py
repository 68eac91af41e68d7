"""A/B: the CPU a digits rank spends importing torch and reading the data, by the example's reader (scikit-learn's
bundled file, read directly) against `sklearn.datasets.load_digits()` (which imports SciPy too).

    python benchmarks/ab_digits_data.py --pairs 5

Each side runs in a fresh interpreter (as a rank starts), interleaved; prints the medians of CPU seconds
(user + system, from the child's rusage) and checks that both give the same arrays.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "digits"
SIDES = {
    "the example's reader": "import torch, digits_task; digits_task.read_digits()",
    "sklearn.datasets.load_digits": "import torch; from sklearn.datasets import load_digits; load_digits()",
}
SAME = """
import numpy as np, digits_task
from sklearn.datasets import load_digits
pixels, labels = digits_task.read_digits()
d = load_digits()
assert np.array_equal(pixels, d.data) and np.array_equal(labels, d.target) and labels.dtype == d.target.dtype
"""


def cpu_of(code: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], cwd=EXAMPLE, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    subprocess.run([sys.executable, "-c", SAME], cwd=EXAMPLE, check=True)
    for code in SIDES.values():  # warm the bytecode caches of both sides
        cpu_of(code)
    seconds: dict[str, list[float]] = {name: [] for name in SIDES}
    for _ in range(args.pairs):
        for name, code in SIDES.items():
            seconds[name].append(cpu_of(code))
    print("same arrays: yes")
    for name, values in seconds.items():
        print(f"{name}: {statistics.median(values):.2f} s CPU (median of {len(values)}; "
              f"{min(values):.2f}-{max(values):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
