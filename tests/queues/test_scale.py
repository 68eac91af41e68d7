"""Scale, at a test's size: the API requests of list/status/logs/gpu do not grow with jobs or replicas
(no per-pod or per-job request where one list serves). No timings here: benchmarks/bench_scale.py measures
them at 200 nodes × 1,000 jobs (docs/performance.md, "Scale")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kubetrain.checks import FAIL
from kubetrain.cli.main import cli
from kubetrain.cluster import preflight
from kubetrain.jobs import apply, status
from kubetrain.jobs.targets import PYTORCHJOB
from kubetrain.kube import watch
from kubetrain.kube.connection import connect
from tests.queues.counting import counting
from tests.testenv import kwok
from tests.testenv.specs import render, write_spec


def test_scale_profile_has_four_gpu_types_tainted_like_gke() -> None:
    nodes = kwok.scale_nodes(200)
    assert len(nodes) == 200 and len({n["metadata"]["name"] for n in nodes}) == 200
    products = [n["metadata"]["labels"]["cloud.google.com/gke-accelerator"] for n in nodes]
    assert {p: products.count(p) for p in set(products)} == {p: 50 for p, _ in kwok.SCALE_GPU_TYPES}
    assert all(n["spec"]["taints"] == [kwok.gpu_taint()] for n in nodes)
    assert {n["status"]["allocatable"]["nvidia.com/gpu"] for n in nodes} == {"8"}


def requests(kubeconfig: Path, *argv: str) -> list[str]:
    """The requests `kubetrain ARGV` sends, with the job's name (argv[1]) replaced by JOB."""
    with counting() as seen:
        result = CliRunner().invoke(cli, [*argv, "--kubeconfig", str(kubeconfig)], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return [r.replace(f"/{argv[1]}", "/JOB") for r in seen] if argv[0] != "list" else seen


def submit(conn: Any, tmp: Path, namespace: str, name: str, nodes: int, suspend: bool = False) -> None:
    objs = render(write_spec(tmp, name, nodes=nodes, gpus=1), namespace)
    if suspend:
        objs[-1]["spec"]["runPolicy"]["suspend"] = True
    apply.submit(conn.rest, PYTORCHJOB, objs)


def running(conn: Any, namespace: str, name: str, count: int) -> None:
    watch.wait_for(watch.rest_list(conn.rest, f"/api/v1/namespaces/{namespace}/pods"),
                   lambda c: len([p for p in c.values() if p["status"].get("phase") == "Running"]) == count,
                   timeout=90, what=f"{count} Running pods", label_selector=PYTORCHJOB.pod_selector(name))


@pytest.mark.controlplane
def test_requests_do_not_grow_with_jobs_or_replicas(controlplane: Any, namespace: str, tmp_path: Path) -> None:
    conn = connect(kubeconfig=str(controlplane.kubeconfig))
    kc = Path(controlplane.kubeconfig)
    submit(conn, tmp_path, namespace, "small", nodes=2)
    running(conn, namespace, "small", 2)
    base = {cmd: requests(kc, cmd, *(["small"] if cmd != "list" else []), "-n", namespace)
            for cmd in ("list", "status", "logs", "gpu")}
    for i in range(20):  # 20 more jobs (suspended: no pods) and a 6-replica one
        submit(conn, tmp_path, namespace, f"queued-{i}", nodes=1, suspend=True)
    submit(conn, tmp_path, namespace, "wide", nodes=6)
    running(conn, namespace, "wide", 6)
    assert requests(kc, "list", "-n", namespace) == base["list"]  # one list per kind, whatever the job count
    # status: constant, Events included. They are listed per object by UID (kubetrain/kube/events.py: field
    # selectors have no OR): the job's, and of healthy pods only the master's
    # (status.STATUS_HEALTHY_POD_EVENT_LISTS), so 2 or 6 healthy pods make the same requests.
    # The Events lists run beside the pod list (status.read_in_parallel), so the order of requests varies.
    # No discovery: the job's GET tells whether its kind is served (jobs.find).
    wide = requests(kc, "status", "wide", "-n", namespace)
    assert sorted(wide) == sorted(base["status"]) and len(wide) - len(not_events(wide)) == 1 + 1
    assert not_events(wide) == [f"GET /apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs/JOB",
                                f"GET /api/v1/namespaces/{namespace}/pods",
                                f"GET /api/v1/namespaces/{namespace}/pods/JOB-master-0/log"]
    # Raised, healthy pods count against the bound on pods (status.STATUS_POD_EVENT_LISTS; lowered to 4 here).
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(status, "STATUS_HEALTHY_POD_EVENT_LISTS", 10)
        patch.setattr(status, "STATUS_POD_EVENT_LISTS", 4)
        bounded = requests(kc, "status", "wide", "-n", namespace)
    assert not_events(bounded) == not_events(base["status"])
    assert len(bounded) - len(not_events(bounded)) == 1 + 4
    # logs and gpu: one pod list, then the per-pod work (one log stream / one exec each), nothing else per pod.
    for cmd in ("logs", "gpu"):
        seen = requests(kc, cmd, "wide", "-n", namespace)
        per_pod = [r for r in seen if "/pods/" in r]
        assert len(per_pod) in (0, 6), seen  # exec goes over a WebSocket (not urllib3): 0 counted for gpu
        assert [r for r in seen if r not in per_pod] == [r for r in base[cmd] if "/pods/" not in r]
    # preflight's fit: two lists (nodes, non-terminated pods), whatever the number of nodes, pods and jobs.
    job = render(write_spec(tmp_path, "fits", nodes=6, gpus=1), namespace)[-1]
    with counting() as seen:
        verdict = preflight.check_fit(conn.rest, job, PYTORCHJOB, namespace, "fits")
    assert sorted(seen) == ["GET /api/v1/nodes", "GET /api/v1/pods"] and verdict.status != FAIL, verdict


def not_events(seen: list[str]) -> list[str]:
    return [r for r in seen if not r.endswith("/events")]
