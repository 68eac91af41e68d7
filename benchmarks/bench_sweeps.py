"""Sweeps in the cluster, on the kwok test cluster (tests/testenv): the controller's cost per trial.

    .venv/bin/python benchmarks/bench_sweeps.py [--trials 100] [--chain 6] [--refreshes 20]

The controller runs as its own process under its ServiceAccount's token (the manifests' RBAC), as in
tests/controller, with `--progress-interval 1`. Measured:
  * a TRIALS-trial sweep, all at once (parallelism TRIALS, one-pod CPU trials on the kwok nodes): seconds
    from the Sweep's create until every trial's TrainingJob exists and until every trial's pod is Running;
    then every trial reports its objective and ends, until the Sweep is Succeeded. The controller's API
    requests per trial (its own count, /metrics) for each part;
  * the controller's overhead per trial: a CHAIN-trial sweep with parallelism 1; seconds from a trial's pod
    Succeeded (its objective already read) to the next trial's TrainingJob and to its pod created (median, max);
  * the table's refresh (`kubetrain sweep status NAME`, and each redraw of `--watch`): API requests and ms
    per refresh against the TRIALS-trial Sweep (one GET; its status holds every trial).
Needs `make testenv`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_operator import cpu_seconds, load_average, make_namespace, metrics, wait  # noqa: E402


def sweep_body(name: str, namespace: str, trials: int, parallelism: int) -> dict[str, Any]:
    from tests.controller.operator_env import GROUP, VERSION, training_job

    trial = training_job(name, namespace, nodes=1)["spec"]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Sweep", "metadata": {"name": name, "namespace": namespace},
            "spec": {"parameters": [{"name": "width", "int": [1, trials], "env": "WIDTH"}],
                     "objective": {"metric": "acc", "goal": "max"}, "search": {"algorithm": "grid"},
                     "trials": trials, "parallelism": parallelism, "trial": trial}}


class Cluster:
    """The test cluster's reads the benchmark needs (the kubernetes package's client, as the tests use)."""

    def __init__(self, cp: Any, namespace: str) -> None:
        import kubernetes

        admin = cp.api_client()
        self.cp, self.namespace = cp, namespace
        self.core, self.custom = kubernetes.client.CoreV1Api(admin), kubernetes.client.CustomObjectsApi(admin)

    def trials(self, sweep: str) -> list[dict[str, Any]]:
        from tests.controller.operator_env import GROUP, VERSION

        return list(self.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "trainingjobs", label_selector=f"kubetrain.dev/sweep={sweep}")["items"])

    def pods(self) -> dict[str, str]:
        return {p.metadata.name: p.status.phase for p in self.core.list_namespaced_pod(self.namespace).items}

    def sweep(self, name: str) -> dict[str, Any]:
        from tests.controller.operator_env import GROUP, VERSION

        return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "sweeps", name))

    def create(self, body: dict[str, Any]) -> None:
        from tests.controller.operator_env import GROUP, VERSION

        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "sweeps", body)

    def objective_step(self, trial: str) -> int | None:
        from tests.controller.operator_env import GROUP, VERSION

        obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "trainingjobs", trial)
        return ((obj.get("status") or {}).get("objective") or {}).get("step")

    def end(self, pod: str, value: float) -> None:
        """The trial's pod reports `acc` at step 10 and succeeds."""
        self.report(pod, value)
        self.cp.set_pod_phase(self.namespace, pod, "Succeeded")

    def report(self, pod: str, value: float) -> None:
        """The trial's pod logs `acc` at step 10."""
        from tests.controller.test_sweeps import metrics as lines

        self.cp.set_pod_logs(self.namespace, pod, lines({10: value}))


def many(cp: Any, sa: Path, tmp: Path, count: int, refreshes: int) -> None:
    import kubernetes

    from tests.controller.operator_env import Operator

    make_namespace(kubernetes.client.CoreV1Api(cp.api_client()), "many")
    cluster = Cluster(cp, "many")
    op = Operator(sa, tmp / "many.log", "--watch-namespace", "many", "--progress-interval", "1",
                  "--lease-name", "bench-many")
    wait(lambda: "caches synced" in op.text(), "controller ready", 120)
    time.sleep(3)
    before, cpu0, load_before = metrics(op), cpu_seconds(op.pid), load_average()
    began = time.monotonic()
    cluster.create(sweep_body("many", "many", count, count))
    created = wait(lambda: len(cluster.trials("many")) == count, f"{count} trials' TrainingJobs", 900, 1.0) - began
    running = wait(lambda: sum(p == "Running" for p in cluster.pods().values()) == count, f"{count} pods Running",
                   900, 1.0) - began
    scheduled, cpu_scheduled = metrics(op), cpu_seconds(op.pid) - cpu0
    start_end = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: cluster.end(f"many-t{i}-master-0", i / count), range(count)))
    wait(lambda: (cluster.sweep("many").get("status") or {}).get("phase") == "Succeeded", "the Sweep Succeeded",
         900, 1.0)
    ended, finished, cpu_all = time.monotonic() - start_end, metrics(op), cpu_seconds(op.pid) - cpu0
    states = [t["state"] for t in cluster.sweep("many")["status"]["state"]["trials"]]
    requests = scheduled["api_requests_total"] - before["api_requests_total"]
    total = finished["api_requests_total"] - before["api_requests_total"]
    print(f"{count}-trial sweep, parallelism {count}, load average {load_before} before, {load_average()} after: "
          f"every trial's TrainingJob in {created:.1f} s, every trial's pod Running in {running:.1f} s; "
          f"controller {requests / count:.1f} API requests per trial to get there ({cpu_scheduled:.1f} s CPU)")
    print(f"  all {count} trials ended (objective in their logs, pods Succeeded) -> Sweep Succeeded in {ended:.1f} s "
          f"({states.count('complete')} complete); "
          f"controller {total / count:.1f} API requests per trial in all, {cpu_all:.1f} s CPU in all")
    refresh(cluster, "many", refreshes)
    op.stop()


def refresh(cluster: Any, name: str, count: int) -> None:
    """One refresh of `kubetrain sweep status`'s table: read the Sweep, format the table."""
    from kubetrain.jobs import sweeps
    from kubetrain.kube.connection import connect
    from kubetrain.sweeps.table import format_table
    from tests.queues.counting import counting

    rest = connect(kubeconfig=str(cluster.cp.kubeconfig)).rest
    sweeps.read(rest, cluster.namespace, name)  # the connection's first request (TLS) is not a refresh
    times = []
    with counting() as seen:
        for _ in range(count):
            began = time.perf_counter()
            job, state, obj = sweeps.read(rest, cluster.namespace, name)
            assert job.sweep is not None
            lines = format_table(job.sweep, state, time.time())
            times.append((time.perf_counter() - began) * 1000)
    size = len(json.dumps(obj))
    print(f"table refresh ({len(lines) - 1} trials, the Sweep {size / 1024:.0f} KiB): {len(seen) / count:.0f} API "
          f"request(s) ({sorted(set(seen))[0]}), {statistics.median(times):.1f} ms median, {max(times):.1f} ms max "
          f"over {count} refreshes")


def chain(cp: Any, sa: Path, tmp: Path, count: int) -> None:
    """Parallelism 1: a trial's end to the next trial's TrainingJob and pod."""
    import kubernetes

    from tests.controller.operator_env import Operator

    make_namespace(kubernetes.client.CoreV1Api(cp.api_client()), "chain")
    cluster = Cluster(cp, "chain")
    op = Operator(sa, tmp / "chain.log", "--watch-namespace", "chain", "--progress-interval", "1",
                  "--lease-name", "bench-chain")
    wait(lambda: "caches synced" in op.text(), "controller ready", 120)
    cluster.create(sweep_body("chain", "chain", count, 1))
    to_job, to_pod = [], []
    for i in range(count):
        pod = f"chain-t{i}-master-0"
        wait(lambda: cluster.pods().get(pod) == "Running", f"{pod} Running", 300, 0.1)  # noqa: B023
        cluster.report(pod, i / count)
        wait(lambda: cluster.objective_step(f"chain-t{i}") == 10, "the objective read", 120, 0.1)  # noqa: B023
        cluster.cp.set_pod_phase("chain", pod, "Succeeded")
        ended = time.monotonic()
        if i == count - 1:
            break
        nxt = f"chain-t{i + 1}"
        to_job.append(wait(lambda: any(t["metadata"]["name"] == nxt for t in cluster.trials("chain")),  # noqa: B023
                           f"{nxt} created", 120, 0.05) - ended)
        to_pod.append(wait(lambda: f"{nxt}-master-0" in cluster.pods(), f"{nxt}'s pod", 120, 0.05) - ended)  # noqa: B023
    op.stop()
    print(f"controller overhead per trial (parallelism 1, {count} trials, load average {load_average()}): a trial's "
          f"pod Succeeded -> the next trial's TrainingJob {statistics.median(to_job):.2f} s median "
          f"({max(to_job):.2f} s max), -> its pod created {statistics.median(to_pod):.2f} s median "
          f"({max(to_pod):.2f} s max)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--chain", type=int, default=6)
    parser.add_argument("--refreshes", type=int, default=20)
    args = parser.parse_args()

    from tests.controller.operator_env import install, sa_kubeconfig
    from tests.testenv.controlplane import ControlPlane

    with ControlPlane() as cp, tempfile.TemporaryDirectory() as tmp:
        install(cp.api_client())
        sa = sa_kubeconfig(cp.api_client(), cp.kubeconfig, Path(tmp) / "sa.kubeconfig")
        if args.chain:
            chain(cp, sa, Path(tmp), args.chain)
        if args.trials:
            many(cp, sa, Path(tmp), args.trials, args.refreshes)


if __name__ == "__main__":
    main()
