"""The cluster commands at platform size: 200 GPU nodes, 1,000 jobs, one job with 64 replicas.

    .venv/bin/python benchmarks/bench_scale.py [--nodes 200] [--jobs 1000] [--replicas 64] [--runs 5]
                                               [--gpu-runs 2]

On the test control plane (tests/testenv) plus the kwok scale profile (`kwok.scale_nodes`: --nodes nodes
× 8 GPUs, four GKE GPU types round-robin, each node tainted nvidia.com/gpu=present:NoSchedule), it
submits --jobs - 1 one-node PyTorchJobs created suspended (they are in the API, as queued jobs are; the
operator makes no pods for them, which a 2-core machine could not run 1,000 times over) and one running
job `big` of --replicas pods × 4 H100 GPUs, each pod serving 200 log lines. Once the control plane has settled
(its CPU use back under 40 % for 10 s: the operator's first reconcile of a thousand jobs and kwok's node updates
done, see `settle`), warm (one untimed run first), the median of --runs fresh `kubetrain` processes for:

* `submit --dry-run=server` of another --replicas-pod job: every preflight check incl. the fit over all nodes
  (and, in-process, preflight's fit check alone on a warm connection);
* `list` over all jobs; `status big`; `logs big` (all replicas merged: time to the first line, lines/s);
* `gpu big` (nvidia-smi through exec in every pod: the fake nvidia-smi of tests/testenv/fakebin).

API requests per command are counted in-process (click's CliRunner, the REST transport and urllib3 patched to
count), so each command's requests can be checked to stay bounded (no per-pod request where a list serves).
Targets (warm): list < 1 s, preflight fit < 200 ms, status < 300 ms, first merged log line < 2 s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench_status import KUBETRAIN, median_ms  # noqa: E402  (benchmarks/ is sys.path[0] when run as a script)


def requests_of(argv: list[str], kubeconfig: Path) -> tuple[int, str]:
    """How many requests `kubetrain argv` makes, run in-process; and its exit code + stderr tail."""
    from click.testing import CliRunner

    from kubetrain.cli.main import cli
    from tests.queues.counting import counting

    with counting() as seen:
        result = CliRunner().invoke(cli, [*argv, "--kubeconfig", str(kubeconfig)])
    return len(seen), f"exit {result.exit_code}"


def process(argv: list[str], env: dict[str, str]) -> None:
    subprocess.run([*KUBETRAIN, *argv], env=env, capture_output=True, check=False)


def first_line_and_rate(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(ms to the first stdout line, lines/s over the whole run, lines)."""
    start = time.perf_counter()
    with subprocess.Popen([*KUBETRAIN, *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        proc.stdout.readline()
        first = time.perf_counter() - start
        rest = proc.stdout.read().count(b"\n") + 1
    total = time.perf_counter() - start
    return first * 1000, rest / total, rest


def client_cpu_ms(fn: Any, runs: int) -> float:
    """Median CPU time of this process in fn (the client's share; the rest of the wall time is the API
    server's and waiting for a CPU on a loaded machine)."""
    times = []
    for _ in range(runs):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return sorted(times)[len(times) // 2] * 1000


def populate(cp: Any, tmp: Path, args: argparse.Namespace) -> None:
    import kubernetes

    from kubetrain.jobs import apply
    from kubetrain.jobs.targets import PYTORCHJOB
    from kubetrain.kube import watch
    from kubetrain.kube.connection import connect
    from tests.testenv import kwok
    from tests.testenv.logfixtures import cri, now_stamp, serve_logs
    from tests.testenv.specs import render, write_spec

    core = kubernetes.client.CoreV1Api(cp.api_client())
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(core.create_node, kwok.scale_nodes(args.nodes)))
    conn = connect(kubeconfig=str(cp.kubeconfig))
    small = render(write_spec(tmp, "small", nodes=1, gpus=1), "default")[-1]

    def submit_suspended(i: int) -> None:
        job = {**small, "metadata": {**small["metadata"], "name": f"job-{i:04d}"}}
        job["spec"] = {**job["spec"], "runPolicy": {**job["spec"]["runPolicy"], "suspend": True}}
        apply.submit(conn.rest, PYTORCHJOB, [job])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(submit_suspended, range(args.jobs - 1)))
    for i in range(args.replicas):
        pod = "big-master-0" if i == 0 else f"big-worker-{i - 1}"
        path = tmp / f"{pod}.log"
        path.write_text(cri([(now_stamp(), f"{pod} step {n} loss=0.{n:04d}") for n in range(200)]))
        serve_logs(cp.api_client(), "default", pod, path)
    apply.submit(conn.rest, PYTORCHJOB, render(write_spec(tmp, "big", nodes=args.replicas, gpus=4), "default"))
    watch.wait_for(watch.rest_list(conn.rest, "/api/v1/namespaces/default/pods"),
                   lambda c: len([p for p in c.values() if p["status"].get("phase") == "Running"]) == args.replicas,
                   timeout=600, what=f"{args.replicas} Running pods", label_selector=PYTORCHJOB.pod_selector("big"))
    time.sleep(5)  # kwok picks up the Logs objects through a watch


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--gpu-runs", type=int, default=2,
                        help="runs of `gpu big` (one exec per pod: about a minute each on a loaded machine)")
    args = parser.parse_args()

    from kubetrain.cluster import preflight
    from kubetrain.jobs.targets import PYTORCHJOB
    from kubetrain.kube.connection import connect
    from tests.queues.counting import counting
    from tests.testenv.controlplane import ControlPlane
    from tests.testenv.specs import render, write_spec

    rows: list[tuple[str, float, str, str]] = []  # (what, ms, notes, target key)
    started, load_before = time.monotonic(), os.getloadavg()
    with ControlPlane() as cp, tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        began = time.monotonic()
        populate(cp, tmp, args)
        print(f"populated in {time.monotonic() - began:.0f} s", file=sys.stderr)
        settled = settle()
        env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
        kc = Path(cp.kubeconfig)
        other = str(write_spec(tmp, "other", nodes=args.replicas, gpus=4))
        conn = connect(kubeconfig=str(cp.kubeconfig))
        job = render(Path(other), "default")[-1]
        fit_ms = median_ms(lambda: preflight.check_fit(conn.rest, job, PYTORCHJOB, "default", "other"), args.runs)
        cpu = client_cpu_ms(lambda: preflight.check_fit(conn.rest, job, PYTORCHJOB, "default", "other"), args.runs)
        with counting() as seen:
            verdict = preflight.check_fit(conn.rest, job, PYTORCHJOB, "default", "other")
        rows.append((f"preflight fit over {args.nodes + 4} nodes (library, warm connection)", fit_ms,
                     f"{len(seen)} requests, {cpu:.0f} ms of it client CPU; {verdict.status}: "
                     f"{verdict.message[:50]}", "fit"))
        commands = [
            ("submit --dry-run=server (all preflight checks)", ["submit", "-f", other, "--dry-run=server"]),
            (f"list ({args.jobs} jobs)", ["list"]),
            (f"status big ({args.replicas} pods)", ["status", "big"]),
            (f"gpu big ({args.replicas} pods)", ["gpu", "big"]),
            (f"logs big ({args.replicas} replicas merged)", ["logs", "big"]),
        ]
        for label, argv in commands:
            runs = args.gpu_runs if argv[0] == "gpu" else args.runs
            ms = median_ms(lambda a=argv: process(a, env), runs)
            count, code = requests_of(argv, kc)
            note = f"{count} requests ({code})" + (f"; median of {runs}" if runs != args.runs else "")
            rows.append((f"`kubetrain {label}` process", ms, note, argv[0]))
        first, rate, lines = first_line_and_rate(["logs", "big"], env)
        rows.append(("`kubetrain logs big`: first merged line", first, f"{lines} lines, {rate:.0f} lines/s",
                     "first line"))
    report(args, rows, time.monotonic() - started, load_before, settled)


TARGETS_MS = {"fit": 200, "list": 1000, "status": 300, "first line": 2000}  # warm


def cpu_busy(window: float) -> float:
    """The machine's busy CPU fraction over `window` seconds (/proc/stat: all CPUs, every process)."""
    def snapshot() -> tuple[int, int]:
        with open("/proc/stat") as stat:
            ticks = [int(v) for v in stat.readline().split()[1:]]
        return sum(ticks), ticks[3] + ticks[4]  # total, idle + iowait

    total, idle = snapshot()
    time.sleep(window)
    total2, idle2 = snapshot()
    return 1 - (idle2 - idle) / max(1, total2 - total)


def settle(below: float = 0.4, window: float = 5, limit: float = 180) -> tuple[float, float]:
    """Wait until the control plane has digested the population (the operator's first reconcile of every
    job, kwok's 204 node updates, the garbage collector): busy CPU below `below` for two windows in a row, or
    `limit` seconds. What the targets mean by warm: the cluster in its steady state, not a thousand jobs
    created a second ago. (seconds waited, busy fraction of the last window)"""
    began, calm, busy = time.monotonic(), 0, 1.0
    while calm < 2 and time.monotonic() - began < limit:
        busy = cpu_busy(window)
        calm = calm + 1 if busy < below else 0
    print(f"settled in {time.monotonic() - began:.0f} s (CPU {busy:.0%} busy)", file=sys.stderr)
    return time.monotonic() - began, busy


def report(args: argparse.Namespace, rows: list[tuple[str, float, str, str]], wall: float,
           load_before: tuple[float, float, float], settled: tuple[float, float]) -> None:
    """The table, each number next to its target (met / MISSED), then the run's wall time and load."""
    print(f"{args.nodes} scale nodes + 4, {args.jobs} jobs, big = {args.replicas} pods; median of {args.runs} "
          "fresh processes (after one warm-up run)")
    print("| measurement | time | target | requests / notes |\n|---|---|---|---|")
    for what, ms, note, key in rows:
        limit = TARGETS_MS.get(key)
        verdict = "" if limit is None else f"< {limit} ms: {'met' if ms < limit else 'MISSED'}"
        print(f"| {what} | {ms:.0f} ms | {verdict} | {note} |")
    load = " / ".join(f"{a:.1f}" for a in load_before)
    after = " / ".join(f"{a:.1f}" for a in os.getloadavg())
    print(f"wall time {wall:.0f} s (control plane start, populate, measurements); load average (1/5/15 min) "
          f"before {load}, after {after} on {os.cpu_count()} CPUs; the control plane settled in "
          f"{settled[0]:.0f} s before the measurements ({settled[1]:.0%} of the CPUs busy)")


if __name__ == "__main__":
    main()
