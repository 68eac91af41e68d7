"""The operator at scale on the kwok cluster (tests/testenv): 1,000 TrainingJobs applied at once.

    .venv/bin/python benchmarks/bench_operator.py [--jobs 1000] [--progress-jobs 100] [--workers 16]
    .venv/bin/python benchmarks/bench_operator.py --jobs 200 --progress-jobs 0     # a quick run

Targets, printed with the results: >= 20 jobs/s, peak RSS < 300 MiB, no polling storm when idle.

The controller runs as its own process under its ServiceAccount's token (the manifests' RBAC), as in
tests/controller. Measured:
  * burst: time from the first create until every child PyTorchJob exists and every TrainingJob's status
    is mirrored (observedGeneration + child reference); jobs/s; the controller's peak RSS (VmHWM); API
    requests per job (the controller's own count, /metrics); requests during 10 idle seconds afterwards
    (no polling storm: only Lease renewals);
  * progress: 100 Running jobs whose rank-0 log has metrics lines; one progress round's requests and
    wall time, and the controller's CPU per round.
Needs `make testenv`.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def metrics(op: Any) -> dict[str, float]:
    port = re.search(r"/metrics on [\d.]*:(\d+)", op.text())
    assert port, op.text()
    text = urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/metrics", timeout=10).read().decode()
    return {line.rsplit(" ", 1)[0].removeprefix("kubetrain_controller_"): float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line}


def proc_status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmHWM", "VmRSS")):
            fields[line.split(":")[0]] = int(line.split()[1]) // 1024  # MiB
    return fields


def cpu_seconds(pid: int) -> float:
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / 100  # utime + stime, in clock ticks of 1/100 s


def wait(fn: Any, what: str, timeout: float, every: float = 0.5) -> float:
    start = time.monotonic()
    while not fn():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(every)
    return time.monotonic()


def make_namespace(core: Any, name: str) -> None:
    core.create_namespace({"metadata": {"name": name}})
    wait(lambda: core.list_namespaced_service_account(name, field_selector="metadata.name=default").items,
         "default ServiceAccount", 30)


def settle(op: Any, timeout: float = 600) -> float:
    """Seconds until the controller made no request but Lease renewals for 4 s: the training-operator keeps
    moving the children (Created, pods Running) after convergence, and each move is a status write."""
    began = time.monotonic()
    last = metrics(op)["api_requests_total"]
    while time.monotonic() - began < timeout:
        time.sleep(4)
        now = metrics(op)["api_requests_total"]
        if now - last <= 5:  # a Lease renewal (GET + PUT) every 2 s: 4 requests per 4 s
            break
        last = now
    return time.monotonic() - began


def component_cpu(cp: Any) -> dict[str, float]:
    """CPU seconds so far of each control-plane process (apiserver, etcd, training-operator, kwok, ...)."""
    out = {}
    for child in cp.sup.children:
        try:
            out[child.name] = cpu_seconds(child.pid)
        except OSError:
            continue
    return out


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def burst(cp: Any, sa: Path, tmp: Path, count: int, workers: int) -> None:
    import kubernetes

    from tests.controller.operator_env import GROUP, PLURAL, VERSION, Operator, training_job

    admin = cp.api_client()
    core, custom = kubernetes.client.CoreV1Api(admin), kubernetes.client.CustomObjectsApi(admin)
    make_namespace(core, "burst")
    op = Operator(sa, tmp / "burst.log", "--watch-namespace", "burst", "--progress-interval", "0",
                  "--workers", str(workers), "--lease-name", "bench-burst")
    wait(lambda: "caches synced" in op.text(), "controller ready", 60)
    cpu0, parts0 = cpu_seconds(op.pid), component_cpu(cp)
    load_before = load_average()
    bodies = [training_job(f"job-{i:04d}", "burst", nodes=1) for i in range(count)]
    began = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda b: custom.create_namespaced_custom_object(GROUP, VERSION, "burst", PLURAL, b), bodies))
    applied = time.monotonic() - began

    def converged() -> bool:
        # Each list of 1,000 objects costs the API server what ~100 of the controller's requests do: the
        # children are listed only once every status is mirrored, and at most every 2 s.
        jobs = custom.list_namespaced_custom_object(GROUP, VERSION, "burst", PLURAL)["items"]
        mirrored = [j for j in jobs if (j.get("status") or {}).get("observedGeneration")
                    and (j.get("status") or {}).get("children")]
        if len(mirrored) < count:
            return False
        children = custom.list_namespaced_custom_object("kubeflow.org", "v1", "burst", "pytorchjobs")["items"]
        return len(children) == count

    done = wait(converged, "convergence", 1800, every=2.0) - began
    after, cpu, load_after = metrics(op), cpu_seconds(op.pid) - cpu0, load_average()
    parts = {k: v - parts0.get(k, 0.0) for k, v in component_cpu(cp).items()}
    settled = settle(op)
    quiet = metrics(op)["api_requests_total"]
    time.sleep(10)
    idle = metrics(op)["api_requests_total"] - quiet
    memory = proc_status(op.pid)
    op.stop()
    print(f"burst of {count} TrainingJobs, {workers} workers, load average {load_before} before, {load_after} "
          f"after: all created by the client in {applied:.1f} s; every child and status in {done:.1f} s = "
          f"{count / done:.1f} jobs/s (target >= 20); controller CPU {cpu:.1f} s")
    verbs = ", ".join(k.split(chr(34))[1] + f"={v:.0f}" for k, v in after.items() if k.startswith("api_requests{"))
    latency = ", ".join(f"{verb} {after[f'api_request_seconds{{verb={chr(34)}{verb}{chr(34)}}}'] / n * 1000:.0f} ms"
                        for verb, n in ((k.split(chr(34))[1], v) for k, v in after.items()
                                        if k.startswith("api_requests{")) if n and verb != "WATCH")
    print(f"controller: peak RSS {memory['VmHWM']} MiB (now {memory['VmRSS']} MiB); "
          f"{after['api_requests_total'] / count:.2f} API requests per job "
          f"({verbs}); "
          f"{after['reconciles_total'] / count:.2f} reconciles per job, render cache hits "
          f"{after.get('render_cache_hits_total', 0):.0f} / misses {after.get('render_cache_misses_total', 0):.0f}; "
          f"Events sent {after.get('events_sent_total', 0):.0f}, dropped {after.get('events_dropped_total', 0):.0f}; "
          f"{idle:.0f} requests in 10 idle s after {settled:.0f} s of settling (target: Lease renewals only, ~5; "
          f"RSS target < 300 MiB)")
    print(f"controller: mean API latency per request (to the response headers): {latency}")
    busiest = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(parts.items(), key=lambda kv: -kv[1]) if v >= 0.5)
    print(f"CPU during the burst ({done:.0f} s wall, 2 cores shared): controller {cpu:.1f} s, {busiest}")
    core.delete_namespace("burst")


def progress(cp: Any, sa: Path, tmp: Path, count: int) -> None:
    import kubernetes

    from kubetrain.metrics import format_metrics
    from tests.controller.operator_env import GROUP, PLURAL, VERSION, Operator, training_job

    admin = cp.api_client()
    core, custom = kubernetes.client.CoreV1Api(admin), kubernetes.client.CustomObjectsApi(admin)
    make_namespace(core, "progress")
    interval = 20.0
    op = Operator(sa, tmp / "progress.log", "--watch-namespace", "progress", "--progress-interval",
                  str(interval), "--lease-name", "bench-progress")
    for i in range(count):
        custom.create_namespaced_custom_object(GROUP, VERSION, "progress", PLURAL,
                                               training_job(f"p-{i:03d}", "progress", nodes=1))
    lines = [format_metrics("train", rank=0, step=s, total_steps=1000, loss=1 / s, samples_per_s=500.0,
                            time=1000.0 + s) for s in range(10, 200, 10)]

    def running() -> bool:
        jobs = custom.list_namespaced_custom_object(GROUP, VERSION, "progress", PLURAL)["items"]
        return sum((j.get("status") or {}).get("phase") == "Running" for j in jobs) == count

    wait(running, f"{count} Running jobs", 600)
    for i in range(count):
        cp.set_pod_logs("progress", f"p-{i:03d}-master-0", ["starting", *lines])

    def tracked() -> bool:
        jobs = custom.list_namespaced_custom_object(GROUP, VERSION, "progress", PLURAL)["items"]
        return sum(((j.get("status") or {}).get("progress") or {}).get("step") == 190 for j in jobs) == count

    wait(tracked, "progress on every job", 300)
    before, cpu0 = metrics(op), cpu_seconds(op.pid)
    time.sleep(interval * 3)
    after, cpu1 = metrics(op), cpu_seconds(op.pid)
    rounds = after["progress_rounds_total"] - before["progress_rounds_total"]
    requests = after["api_requests_total"] - before["api_requests_total"]
    seconds = after["progress_seconds_total"] - before["progress_seconds_total"]
    op.stop()
    print(f"progress tracking of {count} Running jobs, interval {interval:.0f} s: {requests / rounds:.0f} API "
          f"requests per round ({requests / rounds / count:.1f} per job, no status writes when unchanged), "
          f"{seconds / rounds:.2f} s wall per round, {(cpu1 - cpu0) / rounds:.2f} s controller CPU per round")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--progress-jobs", type=int, default=100)
    parser.add_argument("--workers", type=int, default=16, help="the controller's --workers in the burst")
    args = parser.parse_args()

    from tests.controller.operator_env import install, sa_kubeconfig
    from tests.testenv.controlplane import ControlPlane

    with ControlPlane() as cp, tempfile.TemporaryDirectory() as tmp:
        install(cp.api_client())
        sa = sa_kubeconfig(cp.api_client(), cp.kubeconfig, Path(tmp) / "sa.kubeconfig")
        if args.progress_jobs:
            progress(cp, sa, Path(tmp), args.progress_jobs)
        if args.jobs:
            burst(cp, sa, Path(tmp), args.jobs, args.workers)


if __name__ == "__main__":
    main()
