"""`kubetrain validate --exact`: cold start of the local kube-apiserver and the time per file once it is warm.

    .venv/bin/python benchmarks/bench_validate_exact.py [--files 20] [--rounds 3] [--server-binaries DIR]
    .venv/bin/python benchmarks/bench_validate_exact.py --lean-ab [--rounds 5]
    .venv/bin/python benchmarks/bench_validate_exact.py --webhooks-ab [--rounds 4]

Each round stops the local server, then times (wall clock, one `kubetrain validate --exact` process each):
the cold run (etcd + kube-apiserver start, pinned CRDs installed, one file checked), then --files warm runs of
one file each (a PyTorchJob with its pods and Services dry-run), and one warm run of all the files at once
(the per-file cost without the process start). Targets (docs/performance.md): cold <= 10 s, each further file
<= 100 ms on a warm server. Needs etcd and kube-apiserver (`make testenv`, or --server-binaries) and the
pinned CRDs (`make testenv` copies them; or `kubetrain schemas fetch`).

--webhooks-ab times the cold run (server stopped first, one process) of one PyTorchJob and of one TrainJob,
each with and without the operators' webhooks (`--no-webhooks`): the training-operator's manager for the
PyTorchJob, JobSet's and the Trainer's for the TrainJob, started lazily on the first document of a kind they
admit. Interleaved, the order alternating per round; the managers' binaries from `make testenv`.

--lean-ab times only the local server's start (exec of etcd and kube-apiserver to /readyz, in this process),
with and without kube-apiserver's lean flags (kubetrain.jobs.localapi.LEAN_FLAGS), interleaved, the order
alternating per round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def kubetrain(args: list[str], env: dict[str, str], expect: str = "") -> float:
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kubetrain", *args], env=env, capture_output=True,
                          text=True, check=False)
    elapsed = time.perf_counter() - began
    if done.returncode not in (0, 1) or expect not in done.stderr:
        raise SystemExit(f"kubetrain {' '.join(args)} exited {done.returncode} ({expect!r} expected): "
                         f"{done.stderr[-1000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server-binaries", default=None)
    parser.add_argument("--lean-ab", action="store_true")
    parser.add_argument("--webhooks-ab", action="store_true")
    args = parser.parse_args()

    from tests.testenv import binaries, reference

    bins = args.server_binaries or str(binaries.resolve(("etcd", "kube-apiserver"))["kube-apiserver"].parent)
    root = reference.verify(reference.reference_dir())
    work = Path(tempfile.mkdtemp(prefix="bench-exact-"))
    env = {**os.environ, "KUBETRAIN_CACHE_DIR": str(work / "cache")}
    if args.lean_ab:
        os.environ["KUBETRAIN_CACHE_DIR"] = env["KUBETRAIN_CACHE_DIR"]
        lean_ab(bins, args.rounds)
        return
    job = (REPO / "tests" / "validate" / "manifests" / "simple.yaml").read_text()
    files = []
    for index in range(args.files):
        path = work / f"job-{index}.yaml"
        path.write_text(job.replace("name: pytorch-simple", f"name: pytorch-simple-{index}"))
        files.append(str(path))
    flags = ["validate", "--exact", "--server-binaries", bins, "--schema", str(reference.pytorchjob_crd(root)),
             "--schema", str(reference.trainer_dir(root)), "--schema", str(reference.jobset_crd(root))]
    if args.webhooks_ab:
        webhooks_ab(flags, env, args.rounds)
        return
    colds, warms, batch = [], [], []
    try:
        for _ in range(args.rounds):
            kubetrain(["validate", "--stop-server"], env)
            colds.append(kubetrain([*flags, files[0]], env))
            warms += [kubetrain([*flags, f], env) for f in files]
            batch.append((kubetrain([*flags, *files], env) - min(warms)) / (len(files) - 1))
    finally:
        kubetrain(["validate", "--stop-server"], env)
    print(f"cold start + 1 file: median {statistics.median(colds):.2f} s (runs: "
          f"{', '.join(f'{c:.2f}' for c in colds)}); target <= 10 s")
    print(f"warm, 1 file per process: median {statistics.median(warms) * 1000:.0f} ms, "
          f"p90 {sorted(warms)[int(len(warms) * 0.9)] * 1000:.0f} ms")
    print(f"warm, each further file in one process: median {statistics.median(batch) * 1000:.0f} ms; "
          "target <= 100 ms")


def webhooks_ab(flags: list[str], env: dict[str, str], rounds: int) -> None:
    manifests = REPO / "tests" / "validate" / "manifests"
    files = {"PyTorchJob": str(manifests / "simple.yaml"), "TrainJob": str(manifests / "trainjob.yaml")}
    colds: dict[tuple[str, bool], list[float]] = {(kind, hooks): [] for kind in files for hooks in (True, False)}
    try:
        for round_ in range(rounds):
            for kind, path in files.items():
                for hooks in (True, False) if round_ % 2 == 0 else (False, True):
                    kubetrain(["validate", "--stop-server"], env)
                    argv = [*flags, *([] if hooks else ["--no-webhooks"]), path]
                    colds[(kind, hooks)].append(kubetrain(argv, env, "with the webhooks" if hooks else ""))
    finally:
        kubetrain(["validate", "--stop-server"], env)
    for (kind, hooks), times in colds.items():
        print(f"cold, 1 {kind}, {'with' if hooks else 'without'} the webhooks: median {statistics.median(times):.2f} s "
              f"(runs: {', '.join(f'{t:.2f}' for t in times)})")


def lean_ab(bins: str, rounds: int) -> None:
    from kubetrain.jobs.localapi import LocalApiServer, stop_all
    from kubetrain.rules.k8s.versions import DEFAULT

    starts: dict[bool, list[float]] = {True: [], False: []}
    try:
        for round_ in range(rounds):
            for lean in (True, False) if round_ % 2 == 0 else (False, True):
                stop_all()
                began = time.perf_counter()
                with LocalApiServer(DEFAULT, bins, lean=lean).using():
                    starts[lean].append(time.perf_counter() - began)
    finally:
        stop_all()
    for lean, times in starts.items():
        print(f"{'lean' if lean else 'full'} start: median {statistics.median(times):.2f} s "
              f"(runs: {', '.join(f'{t:.2f}' for t in times)})")


if __name__ == "__main__":
    main()
