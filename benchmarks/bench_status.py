"""Status round trip against the test API server (tests/testenv: real kube-apiserver + operator + kwok).

    .venv/bin/python benchmarks/bench_status.py [--runs 30]

Submits one 2-node PyTorchJob (pods Running on kwok GPU nodes), then measures, median of --runs:
  * library: kubetrain.client.status.job_status() on a warm connection (the API round trips only);
  * cli: `kubetrain status NAME` as a fresh process (imports, kubeconfig, discovery, round trips, output);
and counts the HTTP requests one status makes. Needs `make testenv`.
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
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
KUBETRAIN = Path(sys.executable).parent / "kubetrain"
IMPORT_FLOOR = "from kubernetes.client import AppsV1Api, CoreV1Api, CustomObjectsApi"


def median_ms(fn: Any, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def count_requests(api: Any, fn: Any) -> int:
    calls = 0
    original = api.call_api

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return original(*args, **kwargs)

    api.call_api = counting
    try:
        fn()
    finally:
        api.call_api = original
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()

    from kubetrain.client import apply, status, targets, watch
    from kubetrain.client.connection import connect
    from kubetrain.client.targets import PYTORCHJOB
    from tests.client.specs import render, write_spec
    from tests.testenv.controlplane import ControlPlane

    with ControlPlane() as cp, tempfile.TemporaryDirectory() as tmp:
        conn = connect(kubeconfig=str(cp.kubeconfig))
        apply.submit(conn.api, PYTORCHJOB, render(write_spec(Path(tmp), "bench", nodes=2), "default"))
        import kubernetes

        watch.wait_for(kubernetes.client.CoreV1Api(conn.api).list_namespaced_pod,
                       lambda c: len([p for p in c.values() if p["status"].get("phase") == "Running"]) == 2,
                       timeout=60, what="2 Running pods", namespace="default",
                       label_selector=PYTORCHJOB.pod_selector("bench"))

        def one() -> None:
            found = targets.installed(conn.api)
            report = status.job_status(conn.api, found, "default", "bench")
            assert len(report.pods) == 2

        requests = count_requests(conn.api, one)
        library = median_ms(one, args.runs)
        env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
        cli = median_ms(lambda: subprocess.run([str(KUBETRAIN), "status", "bench", "-n", "default"], env=env,
                                               capture_output=True, check=True), max(5, args.runs // 3))
        floor = median_ms(lambda: subprocess.run([sys.executable, "-c", IMPORT_FLOOR], check=True), 5)
    print(f"status round trip, median of {args.runs}: library {library:.1f} ms ({requests} HTTP requests); "
          f"`kubetrain status` process {cli:.0f} ms (median of {max(5, args.runs // 3)}); "
          f"of which importing the kubernetes client's API classes alone: {floor:.0f} ms")


if __name__ == "__main__":
    main()
