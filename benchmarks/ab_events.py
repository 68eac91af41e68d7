"""Events A/B on one test control plane with N unrelated Events and a job of R pods: `status` (library,
warm connection) with its event lists bounded (now: the job + at most 7 pods), one per pod in parallel, and
one per pod one after the other, with the requests each sends; then fresh `kubetrain status` processes of
another tree and of this one, and `kubectl describe`. Interleaved, medians.

    python benchmarks/ab_events.py --base BASE --events 25000 [--replicas 16] [--runs 7] [--kubectl PATH]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


class Sequential:
    """Stands in for ThreadPoolExecutor: the lists one after the other, as before."""

    def __init__(self, workers: int) -> None:
        del workers

    def __enter__(self) -> Sequential:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        return [fn(item) for item in items]


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--events", type=int, default=25000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--replicas", type=int, default=2, help="pods of the job (1 GPU each above 3)")
    parser.add_argument("--kubectl", default=os.environ.get("KUBECTL", "kubectl"))
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from benchmarks.bench_cli import ensure_bytecode
    from benchmarks.bench_status import make_events
    from kubetrain.jobs import apply, status, targets
    from kubetrain.jobs.targets import PYTORCHJOB
    from kubetrain.kube import watch
    from kubetrain.kube.connection import connect
    from tests.queues.counting import counting
    from tests.testenv.controlplane import ControlPlane
    from tests.testenv.specs import render, write_spec

    for tree in (args.base, str(REPO)):  # .pyc files, as installed packages have them
        ensure_bytecode(Path(tree))
    replicas = args.replicas
    with ControlPlane() as cp, tempfile.TemporaryDirectory() as tmp:
        conn = connect(kubeconfig=str(cp.kubeconfig), request_timeout=300)  # unbounded lists can take minutes here
        spec = write_spec(Path(tmp), "bench", nodes=replicas, gpus=8 if replicas <= 3 else 1)
        apply.submit(conn.rest, PYTORCHJOB, render(spec, "default"))
        watch.wait_for(watch.rest_list(conn.rest, "/api/v1/namespaces/default/pods"),
                       lambda c: len([p for p in c.values() if p["status"].get("phase") == "Running"]) == replicas,
                       timeout=300, what=f"{replicas} Running pods", label_selector=PYTORCHJOB.pod_selector("bench"))
        make_events(cp, "default", args.events)
        installed = targets.installed(conn.rest)
        real, bound = concurrent.futures.ThreadPoolExecutor, status.STATUS_POD_EVENT_LISTS
        modes = {"bounded, parallel (now)": (real, bound), "one list per pod, parallel": (real, 10**6),
                 "one list per pod, sequential": (Sequential, 10**6)}
        library: dict[str, list[float]] = {mode: [] for mode in modes}
        requests: dict[str, int] = {}
        for _ in range(args.runs):
            for mode, (pool, limit) in modes.items():
                concurrent.futures.ThreadPoolExecutor = pool  # type: ignore[misc,assignment]
                status.STATUS_POD_EVENT_LISTS = limit
                with counting() as seen:
                    library[mode].append(timed(lambda: status.job_status(conn.rest, installed, "default", "bench")))
                requests[mode] = len(seen)
        concurrent.futures.ThreadPoolExecutor, status.STATUS_POD_EVENT_LISTS = real, bound  # type: ignore[misc]
        env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
        status_argv = [sys.executable, "-m", "kubetrain", "status", "bench"]
        processes: dict[str, tuple[list[str], str, list[float]]] = {
            "base": (status_argv, args.base, []), "branch": (status_argv, str(REPO), []),
            "kubectl describe": ([args.kubectl, "describe", "pytorchjob", "bench"], str(REPO), [])}
        for _ in range(args.runs):
            for argv, tree, samples in processes.values():
                samples.append(timed(lambda a=argv, t=tree: subprocess.run(
                    a, env={**env, "PYTHONPATH": t}, capture_output=True, check=True, cwd=tempfile.gettempdir())))
    print(f"{args.events} other events, {replicas} pods; load average {os.getloadavg()[0]:.1f}; medians of {args.runs}")
    for mode, samples in library.items():
        print(f"status, library, warm connection, event lists {mode}: {statistics.median(samples):.0f} ms, "
              f"{requests[mode]} requests")
    for label, (_, _, samples) in processes.items():
        print(f"{label} (fresh process): {statistics.median(samples):.0f} ms")


if __name__ == "__main__":
    main()
