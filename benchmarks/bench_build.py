"""Benchmark: `kubetrain build`'s context assembly + content hash on a realistic context.

Generates a project of 2,000 files / ~50 MB (1,900 small source files, 100 larger data files, a .git
directory and a .dockerignore) and times `assemble()` — walk with .dockerignore, stage (hard links, or
copies with --copy), add the kubetrain runtime, sha256 everything — which is the work `kubetrain build`
does before it calls the builder.

    .venv/bin/python benchmarks/bench_build.py [--files 2000] [--mb 50] [--repeat 5] [--copy]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from kubetrain.imagebuild.image import staging_dir
from kubetrain.imagebuild.plan import assemble, plan_build
from kubetrain.jobspec.load import load_spec

SPEC = """\
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: bench}
spec:
  image: ghcr.io/acme/bench:latest
  command: [python, train.py]
  build: {context: .}
"""


def make_project(root: Path, files: int, megabytes: int) -> tuple[int, int]:
    """Write the project; returns (files in the context after .dockerignore, their bytes)."""
    big_count = max(1, files // 20)
    small_count = files - big_count
    small_size = 2048
    big_size = (megabytes * 2**20 - small_count * small_size) // big_count
    for i in range(small_count):
        path = root / f"src/pkg{i % 40}/mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(small_size // 2).hex().encode())
    for i in range(big_count):
        path = root / f"assets/shard{i:03d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(big_size))
    for i in range(200):  # ignored: must cost (almost) nothing
        path = root / f".git/objects/{i:02x}/obj"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(4096))
    (root / ".dockerignore").write_text(".git\n**/__pycache__\n*.log\n")
    (root / "kubetrain.yaml").write_text(SPEC)
    (root / "requirements.txt").write_text("numpy\n")
    return files + 3, small_count * small_size + big_count * big_size


def time_once(spec: Path) -> float:
    loaded = load_spec(str(spec))
    start = time.perf_counter()
    plan = plan_build(loaded)
    with staging_dir(plan.context) as staging:
        assemble(plan, staging)
    return time.perf_counter() - start


def _no_links(src: object, dst: object) -> None:
    raise OSError("hard links disabled by --copy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--copy", action="store_true",
                        help="copy instead of hard-linking (as when the context is on another filesystem)")
    args = parser.parse_args()
    if args.copy:
        os.link = _no_links  # type: ignore[assignment]
    root = Path(tempfile.mkdtemp(prefix="kubetrain-bench-"))
    try:
        count, size = make_project(root, args.files, args.mb)
        times = [time_once(root / "kubetrain.yaml") for _ in range(args.repeat)]
        mode = "copies" if args.copy else "hard links"
        print(f"context: {count} files, {size / 2**20:.1f} MiB (+200 ignored .git files); "
              f"staging with {mode}")
        print(f"assemble + hash: min {min(times):.3f}s  median {statistics.median(times):.3f}s  "
              f"max {max(times):.3f}s  over {args.repeat} runs; {size / 2**20 / min(times):.0f} MiB/s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
