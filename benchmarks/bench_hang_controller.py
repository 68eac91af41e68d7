"""The controller's cost per running job for Hung/Straggler (docs/hangs.md), on the kwok cluster (tests/testenv).

    .venv/bin/python benchmarks/bench_hang_controller.py [--jobs 50] [--interval 15] [--pairs 2]

N Running one-pod TrainingJobs; two real kubetrain.runtime ranks (kubetrain.runtime.heartbeat.Heartbeat in this
process, stepping) write their records into the pods' progress directory on this machine, where kwok runs
every pods/exec. The controller (its own process, the manifests' RBAC, --progress-interval 0) runs A/B
interleaved: A `--hang-interval 0` (no hang watch) for 45 s, B `--hang-interval INTERVAL` for three whole
rounds, both after 30 s of start-up (and B after its first round), `--pairs` times. Printed per run: the
controller's API requests and CPU seconds per job and minute, execs and wall per round, and the CPU of the
probes kwok ran (its children's; in a cluster they run in the training pods). Needs `make testenv`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_operator import cpu_seconds, load_average, make_namespace, metrics, wait  # noqa: E402


def children_cpu(pid: int) -> float:
    """CPU seconds of the process's waited-for children (cutime + cstime): the probes kwok ran."""
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(parts[13]) + int(parts[14])) / 100


def ranks(stop: threading.Event, paused: threading.Event | None = None) -> None:
    """Two ranks' records, stepping every 50 ms (the writer threads replace them every 2 s); while `paused`
    is set they take no step (ranks stuck in a collective: their records go on, their step does not)."""
    from kubetrain import podenv
    from kubetrain.runtime.heartbeat import Heartbeat

    shutil.rmtree(podenv.POD_PROGRESS_DIR, ignore_errors=True)
    progress = [Heartbeat(rank, 2, podenv.POD_PROGRESS_DIR) for rank in (0, 1)]
    for p in progress:
        p.start()
        p.phase("train")
    step = 0
    while not stop.wait(0.05):
        if paused is not None and paused.is_set():
            continue
        step += 1
        for p in progress:
            p.collective(0.001)
            p.step(step)
    for p in progress:
        p.stop()


def measure(cp: Any, sa: Path, log: Path, namespace: str, count: int, interval: float) -> dict[str, float]:
    from tests.controller.operator_env import Operator

    kwok = next(c for c in cp.sup.children if c.name == "kwok")
    op = Operator(sa, log, "--watch-namespace", namespace, "--progress-interval", "0", "--hang-interval",
                  str(interval), "--lease-name", f"bench-{namespace}", "--lease-duration", "4")
    try:
        wait(lambda: "caches synced" in op.text(), "the controller's caches", 120)
        # Past the start-up (every child re-applied once) and, with the watch, past its first reads (each
        # job's new conditions are written once); then whole rounds only.
        time.sleep(30)
        rounds = lambda: metrics(op).get("hang_rounds_total", 0)  # noqa: E731
        if interval:
            done = rounds()
            wait(lambda: rounds() > done, "a hang round to end", 600, 0.2)
        began, before, cpu0, probes0 = time.monotonic(), metrics(op), cpu_seconds(op.pid), children_cpu(kwok.pid)
        if interval:
            wait(lambda: rounds() >= before["hang_rounds_total"] + 3, "three hang rounds", 900, 0.2)
        else:
            time.sleep(45)
        after, cpu1, probes1 = metrics(op), cpu_seconds(op.pid), children_cpu(kwok.pid)
        minutes = (time.monotonic() - began) / 60
    finally:
        op.stop()
    rounds = max(1.0, after.get("hang_rounds_total", 0) - before.get("hang_rounds_total", 0))
    return {"requests": (after["api_requests_total"] - before["api_requests_total"]) / count / minutes,
            "patches": (after.get('api_requests{verb="PATCH"}', 0) - before.get('api_requests{verb="PATCH"}', 0))
            / count / minutes,
            "cpu_ms": (cpu1 - cpu0) * 1000 / count / minutes, "probe_ms": (probes1 - probes0) * 1000 / count / minutes,
            "execs": (after.get("hang_execs_total", 0) - before.get("hang_execs_total", 0)) / rounds,
            "round_s": (after.get("hang_seconds_total", 0) - before.get("hang_seconds_total", 0)) / rounds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--interval", type=float, default=15.0, help="the controller's --hang-interval in B")
    parser.add_argument("--pairs", type=int, default=2)
    args = parser.parse_args()

    import kubernetes

    from tests.controller.operator_env import GROUP, PLURAL, VERSION, install, sa_kubeconfig, training_job
    from tests.testenv.controlplane import ControlPlane

    stop = threading.Event()
    writer = threading.Thread(target=ranks, args=(stop,), daemon=True)
    writer.start()
    with ControlPlane() as cp, tempfile.TemporaryDirectory() as tmp:
        admin = cp.api_client()
        install(admin)
        sa = sa_kubeconfig(admin, cp.kubeconfig, Path(tmp) / "sa.kubeconfig")
        core, custom = kubernetes.client.CoreV1Api(admin), kubernetes.client.CustomObjectsApi(admin)
        make_namespace(core, "hangs")
        for i in range(args.jobs):
            custom.create_namespaced_custom_object(GROUP, VERSION, "hangs", PLURAL,
                                                   training_job(f"h-{i:03d}", "hangs", nodes=1))
        measure(cp, sa, Path(tmp) / "warm.log", "hangs", args.jobs, 0)  # creates the children

        def running() -> bool:
            jobs = custom.list_namespaced_custom_object(GROUP, VERSION, "hangs", PLURAL)["items"]
            return sum((j.get("status") or {}).get("phase") == "Running" for j in jobs) == args.jobs

        wait(running, f"{args.jobs} Running jobs", 600)
        print(f"{args.jobs} Running one-pod TrainingJobs; B: --hang-interval {args.interval:.0f}; load average "
              f"{load_average()}")
        print("| run | API requests / job / min | of them PATCH | controller CPU ms / job / min | "
              "probe CPU ms / job / min (in the pods) | execs / round | wall / round |")
        print("|---|---|---|---|---|---|---|")
        for pair in range(args.pairs):
            for name, interval in (("A (off)", 0.0), ("B (on)", args.interval)):
                r = measure(cp, sa, Path(tmp) / f"{pair}-{interval}.log", "hangs", args.jobs, interval)
                print(f"| {name} | {r['requests']:.2f} | {r['patches']:.2f} | {r['cpu_ms']:.1f} | {r['probe_ms']:.1f} "
                      f"| {r['execs']:.0f} | {r['round_s']:.2f} s |", flush=True)
        print(f"load average after: {load_average()}")
    stop.set()


if __name__ == "__main__":
    main()
