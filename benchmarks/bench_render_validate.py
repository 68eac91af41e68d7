"""Render + validate of one job in one process, measured from the end of importing its libraries.

    .venv/bin/python benchmarks/bench_render_validate.py [--runs 21] [--base DIR] [--schema DIR]

Target: render + validate of one job in one process stays within 100 ms of importing the
libraries kubetrain is built on. Each fresh process first imports those libraries (pydantic's models and
fields, click, jinja2, PyYAML, jsonschema_rs: timed as "libraries"), then runs what the CLI runs: kubetrain's
modules, `render -f` of tests/render/specs/gke-h100.yaml (a PyTorchJob) and `validate` of its output with the
pinned CRDs (timed as "kubetrain", the figure the target is about). Wall and CPU time of each part: on the
shared machine, CPU time is what load distorts least, so the target is judged on it. `--base DIR`: a checkout
of another commit, run interleaved with this one (A/B), so load on the shared machine hits both alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_cli import SPEC, ensure_bytecode, load_average, schema_args  # noqa: E402

TARGET_MS = 100
CODE = """
import time, sys, io, contextlib, gc
t0, c0 = time.perf_counter(), time.process_time()
import pydantic.main, pydantic.fields, click, jinja2, yaml, jsonschema_rs
t1, c1 = time.perf_counter(), time.process_time()
from kubetrain.cli.entry import tune_gc, without_pydantic_plugins
tune_gc(); without_pydantic_plugins()
from kubetrain.cli.main import main
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    try: main(['render', '-f', sys.argv[1]])
    except SystemExit as exit: assert not exit.code, exit.code
from kubetrain.validate import validate_sources
from kubetrain.cli.validate_cmd import build_store
store = build_store(tuple(sys.argv[3::2]), False, None, '1.36')
report = validate_sources([('-', buf.getvalue())], store)
assert not report.failed(), report.issues
t2, c2 = time.perf_counter(), time.process_time()
print(t1 - t0, t2 - t1, c1 - c0, c2 - c1)
"""


def sample(tree: Path, schemas: list[str]) -> tuple[float, ...]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", CODE, str(SPEC), *schemas], capture_output=True, text=True,
                         check=True, env=env, cwd=tree).stdout.split()
    return tuple(float(value) for value in out)  # wall: libraries, kubetrain; CPU: libraries, kubetrain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--base", type=Path, default=None, help="another checkout, measured interleaved")
    parser.add_argument("--schema", default=None)
    args = parser.parse_args()
    schemas = schema_args(args.schema)
    trees = {"this": REPO} | ({"base": args.base.resolve()} if args.base else {})
    for tree in trees.values():
        ensure_bytecode(tree)
        sample(tree, schemas)  # warm the page cache and the parsed-CRD cache
    print(f"before: {load_average()}", file=sys.stderr)
    results: dict[str, list[tuple[float, ...]]] = {name: [] for name in trees}
    for _ in range(args.runs):
        for name, tree in trees.items():
            results[name].append(sample(tree, schemas))
    print(f"after: {load_average()}", file=sys.stderr)
    print(f"| tree | libraries' import, wall / CPU (median of {args.runs}) | kubetrain: render + validate after "
          "it, wall / CPU | target (CPU) |")
    print("|---|---|---|---|")
    for name, values in results.items():
        lib_wall, own_wall, lib_cpu, own_cpu = (statistics.median(v[i] for v in values) * 1000 for i in range(4))
        low, high = min(v[3] for v in values) * 1000, max(v[3] for v in values) * 1000
        verdict = "met" if own_cpu < TARGET_MS else "**missed**"
        print(f"| {name} ({trees[name]}) | {lib_wall:.0f} / {lib_cpu:.0f} ms | {own_wall:.0f} / {own_cpu:.0f} ms "
              f"(CPU {low:.0f}-{high:.0f}) | < {TARGET_MS} ms: {verdict} |")


if __name__ == "__main__":
    main()
