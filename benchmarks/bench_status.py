"""Cluster-command start-up, side by side with kubectl and the raw REST call (tests/testenv control plane).

    .venv/bin/python benchmarks/bench_status.py [--runs 10] [--kubectl PATH] [--events N]

Submits one 2-node PyTorchJob (pods Running on kwok GPU nodes, serving log lines), then times fresh
processes, median of --runs, warm (page cache and .pyc hot; one untimed run first):

* `kubetrain status NAME`, `kubetrain list`, `kubetrain logs NAME --tail 5` (to its first line and to exit);
* the same with kubectl (`describe pytorchjob`, `get pytorchjobs`, `logs --tail 5`), when --kubectl (or
  $KUBECTL) names a kubectl binary, ideally built from the harness's Kubernetes version:
  see docs/performance.md for building one into a private dir (never committed);
* the floor: `curl` doing status's REST requests (no Python at all), and `python -c pass`;
* the library: job_status() on a warm connection, and how many HTTP requests it makes.

--events N first creates N unrelated Events in the namespace (the issue's 25,000-event case): status
must not read them (field selectors), so its time and memory should not grow.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
KUBETRAIN = [str(Path(sys.executable).parent / "kubetrain")]  # the console script, as users run it


# the targets, by row
TARGETS = {"`kubetrain status` process": "<= 300 ms", "`kubetrain list` process": "<= 300 ms",
           "`kubetrain logs --tail 5` to its first line": "<= 500 ms"}


def median_ms(fn: Callable[[], Any], runs: int) -> float:
    fn()  # warm: page cache, .pyc, TLS session setup paths
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def run(argv: list[str], env: dict[str, str]) -> None:
    subprocess.run(argv, env=env, capture_output=True, check=True)


def first_line_ms(argv: list[str], env: dict[str, str], runs: int) -> float:
    """Median time from exec to the first line on stdout."""
    def once() -> float:
        start = time.perf_counter()
        with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
            assert proc.stdout is not None
            proc.stdout.readline()
            took = time.perf_counter() - start
            proc.communicate()
        return took

    once()
    return statistics.median(once() for _ in range(runs)) * 1000


def max_rss_mb(argv: list[str], env: dict[str, str]) -> float:
    """Peak RSS of one `argv` process, measured by a fresh parent that has no other children."""
    code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], capture_output=True, check=True); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout) / 1024


def curl_floor(cp: Any, namespace: str, name: str) -> list[str]:
    """status's requests as one curl process (discovery, job, pods, events by UID)."""
    pki = cp.pki_dir
    base = cp.server
    urls = [f"{base}/apis/kubeflow.org/v1", f"{base}/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs/{name}",
            f"{base}/api/v1/namespaces/{namespace}/pods?labelSelector=training.kubeflow.org/job-name%3D{name}",
            f"{base}/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name%3D{name}"]
    return ["curl", "-sf", "--cacert", str(pki / "ca.crt"), "--cert", str(pki / "admin.crt"),
            "--key", str(pki / "admin.key"), *urls]


def make_events(cp: Any, namespace: str, count: int) -> None:
    """Create `count` unrelated Events with 16 concurrent POSTs (25,000 one by one take minutes)."""
    from concurrent.futures import ThreadPoolExecutor

    import kubernetes

    core = kubernetes.client.CoreV1Api(cp.api_client())
    core.api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] = 16

    def create(i: int) -> None:
        core.create_namespaced_event(namespace, {
            "metadata": {"name": f"noise-{i}"}, "type": "Normal", "reason": "Noise", "message": f"event {i}",
            "involvedObject": {"kind": "Pod", "name": f"other-{i}", "namespace": namespace}})

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(create, range(count)))
    print(f"created {count} events in {time.perf_counter() - start:.1f} s", file=sys.stderr)


def bench_job(cp: Any, tmp: Path, events: int = 0) -> tuple[Any, dict[str, str]]:
    """PyTorchJob `bench` in namespace default: 2 pods Running on kwok nodes, serving 20 log lines each, and
    `events` unrelated Events. Returns a connection and the environment for fresh processes (KUBECONFIG)."""
    from kubetrain.jobs import apply
    from kubetrain.jobs.targets import PYTORCHJOB
    from kubetrain.kube import watch
    from kubetrain.kube.connection import connect
    from tests.testenv.logfixtures import cri, now_stamp, serve_logs
    from tests.testenv.specs import render, write_spec

    ns = "default"
    conn = connect(kubeconfig=str(cp.kubeconfig))
    for pod in ("bench-master-0", "bench-worker-0"):
        path = tmp / f"{pod}.log"
        path.write_text(cri([(now_stamp(), f"{pod} line {i}") for i in range(20)]))
        serve_logs(cp.api_client(), ns, pod, path)
    apply.submit(conn.rest, PYTORCHJOB, render(write_spec(tmp, "bench", nodes=2), ns))
    watch.wait_for(watch.rest_list(conn.rest, f"/api/v1/namespaces/{ns}/pods"),
                   lambda c: len([p for p in c.values() if p["status"].get("phase") == "Running"]) == 2,
                   timeout=60, what="2 Running pods", label_selector=PYTORCHJOB.pod_selector("bench"))
    if events:
        make_events(cp, ns, events)
    time.sleep(3)  # kwok picks up the Logs objects through a watch
    return conn, {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--kubectl", default=os.environ.get("KUBECTL"))
    parser.add_argument("--events", type=int, default=0)
    args = parser.parse_args()

    from benchmarks.bench_cli import ensure_bytecode, load_average
    from kubetrain.jobs import status, targets
    from tests.testenv.controlplane import ControlPlane

    ensure_bytecode()
    rows: list[tuple[str, str, str]] = []
    with ControlPlane() as cp, tempfile.TemporaryDirectory() as tmp:
        ns = "default"
        conn, env = bench_job(cp, Path(tmp), args.events)

        def library() -> None:
            assert len(status.job_status(conn.rest, targets.installed(conn.rest), ns, "bench").pods) == 2

        rows.append(("status, library, warm connection", f"{median_ms(library, args.runs * 3):.1f} ms", ""))
        kubectl = args.kubectl
        commands = [
            ("status", [*KUBETRAIN, "status", "bench"], ["describe", "pytorchjob", "bench"]),
            ("list", [*KUBETRAIN, "list"], ["get", "pytorchjobs"]),
            ("logs --tail 5", [*KUBETRAIN, "logs", "bench", "--tail", "5"],
             ["logs", "bench-master-0", "--tail", "5"]),
        ]
        for label, ours, theirs in commands:
            mine = median_ms(lambda argv=ours: run(argv, env), args.runs)
            other = median_ms(lambda argv=theirs: run([kubectl, *argv], env), args.runs) if kubectl else None
            rows.append((f"`kubetrain {label}` process", f"{mine:.0f} ms",
                         f"kubectl {' '.join(theirs)}: {other:.0f} ms" if other is not None else ""))
        first = first_line_ms([*KUBETRAIN, "logs", "bench", "--tail", "5"], env, args.runs)
        rows.append(("`kubetrain logs --tail 5` to its first line", f"{first:.0f} ms", ""))
        rss = max_rss_mb([*KUBETRAIN, "status", "bench"], env)
        theirs_rss = ""
        if kubectl:
            theirs_rss = f"describe: {max_rss_mb([kubectl, 'describe', 'pytorchjob', 'bench'], env):.0f} MB"
        rows.append((f"`kubetrain status` max RSS ({args.events} other events in the namespace)", f"{rss:.0f} MB",
                     theirs_rss))
        if shutil.which("curl"):
            floor = median_ms(lambda: run(curl_floor(cp, ns, "bench"), env), args.runs)
            rows.append(("floor: status's 4 REST calls with one curl process", f"{floor:.0f} ms", ""))
        python = median_ms(lambda: run([sys.executable, "-c", "pass"], env), args.runs)
        rows.append(("floor: `python -c pass`", f"{python:.0f} ms", ""))
    print(f"median of {args.runs} fresh processes each (after one warm-up run); {load_average()}")
    print("| measurement | kubetrain | kubectl (same cluster) | target |\n|---|---|---|---|")
    for what, value, other in rows:
        print(f"| {what} | {value} | {other} | {TARGETS.get(what, '')} |")


if __name__ == "__main__":
    main()
