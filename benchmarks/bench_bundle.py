"""The code bundle's refusal of a too-large code directory: time and peak memory, A/B against another tree.

    .venv/bin/python benchmarks/bench_bundle.py                    # this tree only
    .venv/bin/python benchmarks/bench_bundle.py --base BASE   # interleaved with another checkout

Two directories that `spec.code` must refuse: one 2 GiB (sparse) file, and 100,000 one-byte files. Each
measurement runs `collect_code` in a fresh process (so peak RSS is that call's), alternating between the trees.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROBE = """
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from kubetrain.errors import RenderError
from kubetrain.render.code import collect_code
start = time.perf_counter()
try:
    collect_code(Path(sys.argv[2]))
    refused = False
except RenderError:
    refused = True
took = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": took, "rss_mb": rss, "refused": refused}))
"""


def make_cases(root: Path) -> dict[str, Path]:
    big = root / "big"
    big.mkdir()
    with (big / "weights.bin").open("wb") as out:
        out.truncate(2 << 30)  # sparse: costs no disk, but read_bytes() would read 2 GiB
    many = root / "many"
    many.mkdir()
    for i in range(100_000):
        sub = many / f"d{i // 1000}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{i}.py").write_bytes(b"x")
    return {"2 GiB file": big, "100,000 files": many}


def measure(tree: Path, case: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", PROBE, str(tree), str(case)], check=True, capture_output=True,
                         text=True, timeout=1800).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="another checkout to compare with (interleaved)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    trees = {"this tree": Path(__file__).resolve().parents[1]}
    if args.base:
        trees["base"] = args.base.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        cases = make_cases(Path(tmp))
        for label, case in cases.items():
            results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
            for _ in range(args.runs):
                for name, tree in trees.items():
                    results[name].append(measure(tree, case))
            for name, runs in results.items():
                seconds = statistics.median(r["seconds"] for r in runs)
                rss = max(r["rss_mb"] for r in runs)
                refused = all(r["refused"] for r in runs)
                print(f"{label:>14} | {name:>9} | median {seconds:7.2f} s | peak RSS {rss:7.0f} MB | "
                      f"refused: {refused}")


if __name__ == "__main__":
    main()
