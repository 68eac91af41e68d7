"""How soon the controller's hang watch marks a stopped job `Hung`, with 1, 10 and 50 Running jobs (docs/hangs.md).

    .venv/bin/python benchmarks/bench_hang_detection.py [--jobs 1,10,50] [--timeout 20] [--interval 3] [--drills 2]

On the kwok cluster (tests/testenv), as in bench_hang_controller.py: N Running one-pod TrainingJobs with
`spec.hang: {timeoutSeconds: TIMEOUT, stepFactor: 1}`, the controller as its own process (the manifests' RBAC,
`--hang-interval INTERVAL`, `--progress-interval 0`), two real kubetrain.runtime ranks (Heartbeat in this process)
stepping every 50 ms in the pods' progress directory. kwok runs every pod's exec on this machine, so every pod
reads the same directory: a drill stops the ranks' steps (their records go on: ranks stuck in a collective) and
so every one of the N jobs hangs at once, the heaviest round (N reads, then N evidence probes and N status
writes). Latency: from the ranks' last step (`step_at` in their records) to the TrainingJob's `Hung=True` as
seen by a watch on the TrainingJobs (and to the condition's lastTransitionTime, whole seconds). Between drills
the ranks step again until every job is `Hung=False`. Printed per N: median and max over the N jobs x drills,
the threshold, latency minus threshold, and the controller's wall time per hang round (mean over the drills,
and over two whole steady rounds before them). Needs `make testenv`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_hang_controller import ranks  # noqa: E402
from benchmarks.bench_operator import load_average, make_namespace, metrics, wait  # noqa: E402


def hung(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The object's Hung condition, if it is True."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Hung" and cond.get("status") == "True":
            return dict(cond)
    return None


def hung_false(custom: Any, namespace: str, count: int) -> bool:
    from tests.controller.operator_env import GROUP, PLURAL, VERSION

    items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
    return sum(any(c.get("type") == "Hung" and c.get("status") == "False"
                   for c in (j.get("status") or {}).get("conditions") or []) for j in items) == count


def last_step(paused_at: float) -> float:
    """The ranks' last step time (wall clock), from their own records once both were written after the pause."""
    from kubetrain import podenv
    from kubetrain.podenv import record_path

    def records() -> list[dict[str, Any]]:
        return [json.loads(record_path(podenv.POD_PROGRESS_DIR, rank).read_text()) for rank in (0, 1)]

    wait(lambda: all(r["written_at"] > paused_at + 0.1 for r in records()), "the ranks' records", 30, 0.1)
    return max(r["step_at"] for r in records())


def watch_hung(custom: Any, namespace: str, count: int, timeout: float) -> dict[str, tuple[float, float]]:
    """Per job: when this process first saw Hung=True (wall clock) and the condition's lastTransitionTime."""
    import kubernetes

    from tests.controller.operator_env import GROUP, PLURAL, VERSION

    seen: dict[str, tuple[float, float]] = {}

    def note(obj: dict[str, Any]) -> None:
        cond, name = hung(obj), obj["metadata"]["name"]
        if cond and name not in seen:
            moved = dt.datetime.fromisoformat(cond["lastTransitionTime"].replace("Z", "+00:00")).timestamp()
            seen[name] = (time.time(), moved)

    deadline = time.monotonic() + timeout
    watcher = kubernetes.watch.Watch()
    while len(seen) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(seen)} of {count} jobs became Hung in {timeout:.0f} s")
        listing = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
        for obj in listing["items"]:
            note(obj)
        for event in watcher.stream(custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
                                    resource_version=listing["metadata"]["resourceVersion"], timeout_seconds=5):
            note(event["object"])
            if len(seen) == count:
                watcher.stop()
    return seen


def run_size(cp: Any, sa: Path, tmp: Path, count: int, args: argparse.Namespace, paused: threading.Event) -> str:
    import kubernetes

    from tests.controller.operator_env import GROUP, PLURAL, VERSION, Operator, training_job

    admin = cp.api_client()
    core, custom = kubernetes.client.CoreV1Api(admin), kubernetes.client.CustomObjectsApi(admin)
    namespace = f"latency-{count}"
    make_namespace(core, namespace)
    hang = {"timeoutSeconds": args.timeout, "stepFactor": 1}
    for i in range(count):
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                               training_job(f"d-{i:03d}", namespace, nodes=1, hang=hang))
    op = Operator(sa, tmp / f"{namespace}.log", "--watch-namespace", namespace, "--progress-interval", "0",
                  "--hang-interval", str(args.interval), "--lease-name", f"bench-{namespace}",
                  "--lease-duration", "4")
    try:
        wait(lambda: "caches synced" in op.text(), "the controller's caches", 120)

        def running() -> bool:
            jobs = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
            return sum((j.get("status") or {}).get("phase") == "Running" for j in jobs) == count

        wait(running, f"{count} Running jobs", 600)
        wait(lambda: hung_false(custom, namespace, count), f"Hung=False on {count} jobs", 600)
        rounds = lambda: metrics(op).get("hang_rounds_total", 0)  # noqa: E731
        done = rounds()
        wait(lambda: rounds() > done, "a hang round to end", 600, 0.2)
        steady0 = metrics(op)
        wait(lambda: rounds() >= steady0["hang_rounds_total"] + 2, "two hang rounds", 600, 0.2)
        steady1 = metrics(op)
        latencies, to_ltt, drills = [], [], {"hang_rounds_total": 0.0, "hang_seconds_total": 0.0}
        for _ in range(args.drills):
            before = metrics(op)
            paused_at = time.time()
            paused.set()
            stopped = last_step(paused_at)
            seen = watch_hung(custom, namespace, count, args.timeout + 300)
            after = metrics(op)
            for key in drills:
                drills[key] += after.get(key, 0) - before.get(key, 0)
            latencies += [saw - stopped for saw, _ in seen.values()]
            to_ltt += [moved - stopped for _, moved in seen.values()]
            paused.clear()
            wait(lambda: hung_false(custom, namespace, count), f"Hung=False again on {count} jobs", 300)
    finally:
        op.stop()
    core.delete_namespace(namespace)
    steady = per_round(steady0, steady1)
    drill = per_round({}, drills)
    return (f"| {count} | {args.timeout:.0f} s | {statistics.median(latencies):.1f} s | {max(latencies):.1f} s | "
            f"{statistics.median(latencies) - args.timeout:+.1f} s | {max(latencies) - args.timeout:+.1f} s | "
            f"{statistics.median(to_ltt):.1f} s | {steady:.2f} s | {drill:.2f} s | {len(latencies)} |")


def per_round(before: dict[str, float], after: dict[str, float]) -> float:
    rounds = after.get("hang_rounds_total", 0) - before.get("hang_rounds_total", 0)
    return (after.get("hang_seconds_total", 0) - before.get("hang_seconds_total", 0)) / max(1.0, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="1,10,50", help="comma-separated numbers of Running jobs")
    parser.add_argument("--timeout", type=float, default=20.0, help="spec.hang.timeoutSeconds (the threshold)")
    parser.add_argument("--interval", type=float, default=3.0, help="the controller's --hang-interval")
    parser.add_argument("--drills", type=int, default=2, help="stops per size; every job hangs in each")
    args = parser.parse_args()
    sizes = [int(n) for n in args.jobs.split(",")]

    from tests.controller.operator_env import install, sa_kubeconfig
    from tests.testenv.controlplane import ControlPlane

    stop, paused = threading.Event(), threading.Event()
    writer = threading.Thread(target=ranks, args=(stop, paused), daemon=True)
    writer.start()
    with ControlPlane() as cp, tempfile.TemporaryDirectory() as tmp:
        install(cp.api_client())
        sa = sa_kubeconfig(cp.api_client(), cp.kubeconfig, Path(tmp) / "sa.kubeconfig")
        print(f"--hang-interval {args.interval:g}, spec.hang.timeoutSeconds {args.timeout:g} (stepFactor 1), "
              f"{args.drills} drills per size; load average {load_average()}")
        print("| Running jobs | threshold | median latency | max latency | median - threshold | "
              "max - threshold | median to lastTransitionTime | wall / round, steady | wall / round, drills | "
              "samples |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for count in sizes:
            print(run_size(cp, sa, Path(tmp), count, args, paused), flush=True)
        print(f"load average after: {load_average()}")
    stop.set()


if __name__ == "__main__":
    main()
