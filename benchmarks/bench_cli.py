"""CLI performance: cold start, render + validate of one job, and validating 1,000 rendered jobs.

    .venv/bin/python benchmarks/bench_cli.py [--schema DIR] [--runs 15]

Targets: `kubetrain --help` cold start within 2x of `python -c "import sys"` (median ratio);
render + validate of one job under 0.3 s wall; 1,000 rendered jobs validated in one process under 5 s.
The input limits (depth, aliases, expanded nodes, sizes) cost nothing measurable on normal files.
Schemas: --schema, else the upstream CRDs `make testenv` copies from the pinned Go modules
(tests/testenv/reference.py), else the `kubetrain schemas fetch` cache.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SPEC = REPO / "tests" / "render" / "specs" / "gke-h100.yaml"
KUBETRAIN = Path(sys.executable).parent / "kubetrain"


def ensure_bytecode(tree: Path = REPO) -> None:
    """Write kubetrain's .pyc files before timing, as `pip install` does for an installed package. With
    PYTHONDONTWRITEBYTECODE=1 (set on the team's machines) a checkout never gets them, and every timed process
    compiled each kubetrain module it imports from source: ~0.1 s that no installed user pays."""
    import compileall

    compileall.compile_dir(str(tree / "kubetrain"), quiet=1)


def load_average() -> str:
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"


def median_wall(argv: list[str], runs: int, stdin: bytes | None = None) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, input=stdin, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def schema_args(schema: str | None) -> list[str]:
    if schema:
        return ["--schema", schema]
    from tests.testenv import reference

    root = reference.reference_dir()
    if root.is_dir():
        return ["--schema", str(reference.operator_dir(root)), "--schema", str(reference.trainer_dir(root))]
    return []


def bench_cold_start(runs: int) -> tuple[float, float]:
    baseline = median_wall([sys.executable, "-c", "import sys"], runs)
    help_time = median_wall([str(KUBETRAIN), "--help"], runs)
    return baseline, help_time


def bench_render_validate(runs: int, schemas: list[str]) -> tuple[float, tuple[float, float]]:
    """Wall time of `kubetrain render` piped into `kubetrain validate`, and of both done in one process."""
    cli_times = []
    for _ in range(runs):
        start = time.perf_counter()
        rendered = subprocess.run([str(KUBETRAIN), "render", "-f", str(SPEC)], capture_output=True, check=True)
        subprocess.run([str(KUBETRAIN), "validate", *schemas, "-"], input=rendered.stdout, capture_output=True,
                       check=True)
        cli_times.append(time.perf_counter() - start)
    code = ("import time; t=time.perf_counter()\n"
            "from kubetrain.cli.entry import tune_gc, without_pydantic_plugins; tune_gc(); without_pydantic_plugins()\n"
            "from kubetrain.cli.main import main\n"
            "import sys, io, contextlib\n"
            "buf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf):\n"
            "    try: main(['render', '-f', sys.argv[1]])\n"
            "    except SystemExit: pass\n"
            "from kubetrain.validate import validate_sources\n"
            "from kubetrain.cli.validate_cmd import build_store\n"
            "store = build_store(tuple(sys.argv[3::2]), False, None, '1.36')\n"
            "report = validate_sources([('-', buf.getvalue())], store)\n"
            "assert not report.failed(), report.issues\n"
            "print(time.perf_counter()-t, time.process_time())")
    samples = [subprocess.run([sys.executable, "-c", code, str(SPEC), *schemas], capture_output=True, text=True,
                              check=True).stdout.split() for _ in range(runs)]
    # wall from the first import to the verdict, and the process's whole CPU time (start-up included), which
    # a loaded machine distorts far less than wall time
    one_process = (statistics.median(float(w) for w, _ in samples), statistics.median(float(c) for _, c in samples))
    return statistics.median(cli_times), one_process


def bench_bulk(count: int, schemas: list[str]) -> tuple[float, float]:
    from kubetrain.cli.common import render_loaded
    from kubetrain.cli.validate_cmd import build_store
    from kubetrain.jobspec.load import load_spec
    from kubetrain.validate import validate_objects

    loaded = load_spec(str(SPEC))
    store = build_store(tuple(schemas[1::2]), False, None, "1.36")
    objects = [obj for _ in range(count) for obj in render_loaded(loaded)]
    start, cpu = time.perf_counter(), time.process_time()
    report = validate_objects(objects, store)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert not report.failed(), report.issues[:3]
    return elapsed, cpu


def bench_limits(runs: int) -> tuple[float, float, float, float]:
    """The input limits on a normal file: composing the rendered manifests with the bounded loader against
    PyYAML's SafeLoader, the same limits over libyaml's events (what parse_documents uses), and the whole
    parse_documents (limits, line index, construction)."""
    import yaml

    from kubetrain.cli.common import render_loaded
    from kubetrain.jobspec.load import load_spec
    from kubetrain.render.yamlout import dump_yaml
    from kubetrain.yamlsrc import _FAST_LOADER, _BoundedLoader, parse_documents

    text = dump_yaml(render_loaded(load_spec(str(SPEC))))

    def timed(func: Callable[[], object]) -> float:
        start = time.perf_counter()
        func()
        return time.perf_counter() - start

    # Interleaved and best-of, so other load on the machine hits both sides alike.
    samples: dict[str, list[float]] = {"plain": [], "bounded": [], "fast": [], "whole": []}
    for _ in range(runs):
        samples["plain"].append(timed(lambda: list(yaml.compose_all(text, Loader=yaml.SafeLoader))))
        samples["bounded"].append(timed(lambda: list(yaml.compose_all(text, Loader=_BoundedLoader))))
        samples["fast"].append(timed(lambda: list(yaml.compose_all(text, Loader=_FAST_LOADER or _BoundedLoader))))
        samples["whole"].append(timed(lambda: parse_documents(text, "bench")))
    plain, bounded, fast, whole = (min(samples[k]) for k in ("plain", "bounded", "fast", "whole"))
    return plain, bounded, fast, whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schema", default=None)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--jobs", type=int, default=1000)
    args = parser.parse_args()
    schemas = schema_args(args.schema)
    ensure_bytecode()
    print(f"before: {load_average()}", file=sys.stderr)
    baseline, help_time = bench_cold_start(args.runs)
    cli_pipeline, (one_process, one_process_cpu) = bench_render_validate(max(5, args.runs // 3), schemas)
    bulk, bulk_cpu = bench_bulk(args.jobs, schemas)
    plain, bounded, fast, whole = bench_limits(args.runs)
    print(f"after: {load_average()}", file=sys.stderr)
    print("| measurement | result | target |")
    print("|---|---|---|")
    print(f"| `python -c 'import sys'` (median of {args.runs}) | {baseline * 1000:.0f} ms | |")
    print(f"| `kubetrain --help` (median of {args.runs}) | {help_time * 1000:.0f} ms | |")
    print(f"| cold-start ratio | {help_time / baseline:.2f}x | <= 2x |")
    print(f"| render + validate, one process (import to verdict) | {one_process * 1000:.0f} ms | < 300 ms |")
    print(f"| the same, CPU time of the whole process | {one_process_cpu * 1000:.0f} ms | |")
    print(f"| `kubetrain render \\| kubetrain validate -` (two processes) | {cli_pipeline * 1000:.0f} ms | |")
    print(f"| validate {args.jobs} rendered jobs in one process | {bulk:.2f} s (CPU {bulk_cpu:.2f} s) | < 5 s |")
    print(f"| compose the rendered job, PyYAML SafeLoader (best of {args.runs}) | {plain * 1000:.2f} ms | |")
    print(f"| compose it with the input limits (best of {args.runs}) | {bounded * 1000:.2f} ms "
          f"({(bounded / plain - 1) * 100:+.0f}%) | ~0 |")
    print(f"| compose it with the limits over libyaml's events (best of {args.runs}) | {fast * 1000:.2f} ms | |")
    print(f"| parse_documents: limits + line index + objects (best of {args.runs}) | {whole * 1000:.2f} ms | |")


if __name__ == "__main__":
    main()
