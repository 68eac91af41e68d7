"""kubetrain logs against the real API server: kwok serves each pod's log files, the training-operator
creates the pods, and the tests move pods through Pending → Running → restarts → Succeeded."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from kubetrain.errors import ClusterError, UsageError
from kubetrain.jobs.logs import FollowResult, LogOptions, follow_job_logs, print_logs
from kubetrain.jobs.pods import job_replicas
from kubetrain.jobs.targets import PYTORCHJOB, TRAINJOB
from kubetrain.kube.connection import Connection, connect
from tests.harness.helpers import pytorchjob, server_side_apply, wait_for
from tests.testenv.logfixtures import cri, finish_pod, now_stamp, restart_container, serve_logs, stamp

pytestmark = pytest.mark.controlplane


@pytest.fixture
def conn(controlplane: Any) -> Connection:
    return connect(None, str(controlplane.kubeconfig))


def _serve(k8s: Any, tmp_path: Path, namespace: str, pod: str, lines: list[tuple[str, str]],
           previous: list[tuple[str, str]] | None = None) -> Path:
    current = tmp_path / f"{pod}.log"
    current.write_text(cri(lines))
    prev = None
    if previous is not None:
        prev = tmp_path / f"{pod}.previous.log"
        prev.write_text(cri(previous))
    serve_logs(k8s, namespace, pod, current, prev)
    return current


def _running(k8s: Any, namespace: str, *pods: str) -> None:
    core = kubernetes.client.CoreV1Api(k8s)

    def all_running() -> bool:
        phases = {p.metadata.name: p.status.phase for p in core.list_namespaced_pod(namespace).items}
        return all(phases.get(p) == "Running" for p in pods)

    wait_for(all_running, f"pods {pods} Running", timeout=60, interval=0.1)


def _collect(conn: Connection, namespace: str, name: str, options: LogOptions | None = None) -> list[str]:
    out: list[str] = []
    print_logs(conn, namespace, name, None, options or LogOptions(), out.append, lambda _: None)
    return out


def _served(conn: Connection, namespace: str, name: str, needle: str) -> list[str]:
    """Logs CRs reach kwok through a watch: wait until the lines are the ones we wrote."""
    return wait_for(lambda: (lines := _collect(conn, namespace, name)) and needle in "\n".join(lines) and lines,
                    f"kwok to serve {needle!r}", timeout=30, interval=0.1)


def test_merged_in_time_order_with_prefixes_and_filters(controlplane, namespace, k8s, conn, tmp_path):
    server_side_apply(k8s, pytorchjob("merge", namespace, workers=2, gpus=1))
    _running(k8s, namespace, "merge-master-0", "merge-worker-0", "merge-worker-1")
    _serve(k8s, tmp_path, namespace, "merge-master-0", [(stamp(0), "m0 start"), (stamp(30), "m0 step 1"),
                                                        (stamp(30), "m0 same-time line")])
    _serve(k8s, tmp_path, namespace, "merge-worker-0", [(stamp(10), "w0 start"), (stamp(40), "w0 step 1")])
    _serve(k8s, tmp_path, namespace, "merge-worker-1", [(stamp(20), "w1 start"), (stamp(35), "w1 step 1")])
    lines = _served(conn, namespace, "merge", "w1 step 1")
    assert lines == ["[master-0] m0 start", "[worker-0] w0 start", "[worker-1] w1 start", "[master-0] m0 step 1",
                     "[master-0] m0 same-time line", "[worker-1] w1 step 1", "[worker-0] w0 step 1"]

    assert _collect(conn, namespace, "merge", LogOptions(replica="worker")) == [
        "[worker-0] w0 start", "[worker-1] w1 start", "[worker-1] w1 step 1", "[worker-0] w0 step 1"]
    assert _collect(conn, namespace, "merge", LogOptions(replica="worker-1", tail=1)) == ["[worker-1] w1 step 1"]
    assert _collect(conn, namespace, "merge", LogOptions(replica="master", timestamps=True))[0] == \
        f"[master-0] {stamp(0)} m0 start"
    with pytest.raises(UsageError, match=r"no such replica \(it has: master-0, worker-0, worker-1\)"):
        _collect(conn, namespace, "merge", LogOptions(replica="worker-7"))
    colored = _collect(conn, namespace, "merge", LogOptions(replica="master-0", color=True))
    assert colored == ["\x1b[1;36m[master-0]\x1b[0m m0 start", "\x1b[1;36m[master-0]\x1b[0m m0 step 1",
                       "\x1b[1;36m[master-0]\x1b[0m m0 same-time line"]


def test_previous_shows_the_crashed_container(controlplane, namespace, k8s, conn, tmp_path):
    server_side_apply(k8s, pytorchjob("crash", namespace, workers=1, gpus=1))
    _running(k8s, namespace, "crash-master-0", "crash-worker-0")
    _serve(k8s, tmp_path, namespace, "crash-worker-0", [(stamp(100), "second life")],
           previous=[(stamp(0), "first life"), (stamp(1), "Traceback: CUDA error: out of memory")])
    restart_container(k8s, namespace, "crash-worker-0", restarts=1)
    wait_for(lambda: job_replicas(conn.rest, PYTORCHJOB, namespace, "crash")[1].restarts == 1, "restartCount 1")
    _served(conn, namespace, "crash", "second life")

    notices: list[str] = []
    out: list[str] = []
    print_logs(conn, namespace, "crash", "pytorchjob", LogOptions(previous=True), out.append, notices.append)
    assert out == ["[worker-0] first life", "[worker-0] Traceback: CUDA error: out of memory"]
    assert notices == ["[master-0] has no previous container (0 restarts)"]


def _follow_in_thread(conn: Connection, namespace: str, name: str, sink: list[str], notices: list[str],
                      **kwargs: Any) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["result"] = follow_job_logs(conn, namespace, name, None, LogOptions(**kwargs), sink.append,
                                               notices.append, poll=0.1)
        except Exception as exc:  # surfaced by the test's assertion on result
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def _appear(sink: list[str], line: str, timeout: float = 30) -> None:
    wait_for(lambda: line in sink, f"{line!r} in the followed output (got {sink[-5:]})", timeout=timeout,
             interval=0.05)


def _append(path: Path, text: str) -> None:
    with path.open("a") as handle:
        handle.write(cri([(now_stamp(), text)]))


def test_follow_waits_through_pending_then_follows_until_the_job_ends(controlplane, namespace, k8s, conn,
                                                                      tmp_path):
    core = kubernetes.client.CoreV1Api(k8s)
    # A pod holding one GPU node: the job's 3 replicas x 8 GPUs fit on 2 nodes only, so one stays Pending.
    blocker = pytorchjob("blocker", namespace, workers=0, gpus=8)["spec"]["pytorchReplicaSpecs"]["Master"]
    core.create_namespaced_pod(namespace, {"metadata": {"name": "blocker"}, "spec": blocker["template"]["spec"]})
    _running(k8s, namespace, "blocker")
    files = {pod: _serve(k8s, tmp_path, namespace, pod, [(now_stamp(), f"{pod} hello")])
             for pod in ("live-master-0", "live-worker-0", "live-worker-1")}
    server_side_apply(k8s, pytorchjob("live", namespace, workers=2, gpus=8))

    sink: list[str] = []
    notices: list[str] = []
    thread, result = _follow_in_thread(conn, namespace, "live", sink, notices)
    wait_for(lambda: any("FailedScheduling" in n for n in notices), f"a FailedScheduling notice ({notices})",
             timeout=60, interval=0.1)
    assert any("hint: not enough free nvidia.com/gpu" in n for n in notices), notices
    running = wait_for(lambda: (names := [p.metadata.name for p in core.list_namespaced_pod(namespace).items
                                          if p.status.phase == "Running" and p.metadata.name != "blocker"])
                       and len(names) == 2 and names, "two replicas Running", interval=0.1)
    for pod in running:
        _appear(sink, f"[{pod.removeprefix('live-')}] {pod} hello")

    core.delete_namespaced_pod("blocker", namespace, grace_period_seconds=0)
    _appear(sink, "[worker-1] live-worker-1 hello" if "live-worker-1" not in running else
            "[worker-0] live-worker-0 hello" if "live-worker-0" not in running else "[master-0] live-master-0 hello",
            timeout=60)
    for i in range(3):
        _append(files["live-worker-0"], f"step {i}")
    _appear(sink, "[worker-0] step 2")
    assert thread.is_alive()

    _append(files["live-master-0"], "done")
    for pod in files:
        controlplane.set_pod_phase(namespace, pod, "Succeeded")
    thread.join(60)
    assert not thread.is_alive()
    assert "error" not in result, result
    outcome: FollowResult = result["result"]
    assert outcome.state == "Succeeded"
    expected = sorted([f"[{p.removeprefix('live-')}] {p} hello" for p in files] +
                      ["[worker-0] step 0", "[worker-0] step 1", "[worker-0] step 2", "[master-0] done"])
    assert sorted(sink) == expected  # every line exactly once
    assert outcome.lines == len(expected)


def test_follow_across_a_restart_neither_repeats_nor_drops_lines(controlplane, namespace, k8s, conn, tmp_path):
    server_side_apply(k8s, pytorchjob("rst", namespace, workers=0, gpus=1))
    first = _serve(k8s, tmp_path, namespace, "rst-master-0", [(now_stamp(), "life 1 line 0")])
    _running(k8s, namespace, "rst-master-0")
    sink: list[str] = []
    notices: list[str] = []
    thread, result = _follow_in_thread(conn, namespace, "rst", sink, notices)
    _appear(sink, "[master-0] life 1 line 0")
    _append(first, "life 1 line 1")
    _appear(sink, "[master-0] life 1 line 1")

    # The container crashes right after two more lines; the kubelet restarts it.
    _append(first, "life 1 line 2")
    _append(first, "life 1 last words")
    second = tmp_path / "second.log"
    second.write_text(cri([(now_stamp(), "life 2 line 0")]))
    serve_logs(k8s, namespace, "rst-master-0", second, previous=first)
    restart_container(k8s, namespace, "rst-master-0", restarts=1)
    _appear(sink, "[master-0] life 2 line 0")
    _append(second, "life 2 line 1")
    _appear(sink, "[master-0] life 2 line 1")

    finish_pod(k8s, namespace, "rst-master-0", restarts=1)
    thread.join(60)
    assert result.get("result") and result["result"].state == "Succeeded", result
    assert sink == ["[master-0] life 1 line 0", "[master-0] life 1 line 1", "[master-0] life 1 line 2",
                    "[master-0] life 1 last words", "[master-0] life 2 line 0", "[master-0] life 2 line 1"]
    assert any("[master-0] container pytorch restarted (restart 1)" in n for n in notices), notices


def test_follow_reports_a_failed_job_and_a_deleted_one(controlplane, namespace, k8s, conn, tmp_path):
    server_side_apply(k8s, pytorchjob("bad", namespace, workers=0, gpus=1))
    _serve(k8s, tmp_path, namespace, "bad-master-0", [(now_stamp(), "RuntimeError: NCCL timeout")])
    _running(k8s, namespace, "bad-master-0")
    sink: list[str] = []
    thread, result = _follow_in_thread(conn, namespace, "bad", sink, [])
    _appear(sink, "[master-0] RuntimeError: NCCL timeout")
    controlplane.set_pod_phase(namespace, "bad-master-0", "Failed")
    thread.join(60)
    outcome = result["result"]
    assert (outcome.state, outcome.ok) == ("Failed", False)
    assert "failed" in outcome.message.lower()

    server_side_apply(k8s, pytorchjob("gone", namespace, workers=0, gpus=1))
    _serve(k8s, tmp_path, namespace, "gone-master-0", [(now_stamp(), "about to be deleted")])
    _running(k8s, namespace, "gone-master-0")
    sink = []
    thread, result = _follow_in_thread(conn, namespace, "gone", sink, [])
    _appear(sink, "[master-0] about to be deleted")
    kubernetes.client.CustomObjectsApi(k8s).delete_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", "gone")
    thread.join(60)
    assert result["result"].state == "Deleted"


def test_trainjob_pods_are_found_by_their_jobset_labels(controlplane, namespace, k8s, conn):
    core = kubernetes.client.CoreV1Api(k8s)
    for index in (1, 0):
        labels = {"jobset.sigs.k8s.io/jobset-name": "tj", "jobset.sigs.k8s.io/replicatedjob-name": "node",
                  "jobset.sigs.k8s.io/job-index": "0", "batch.kubernetes.io/job-completion-index": str(index)}
        core.create_namespaced_pod(namespace, {
            "metadata": {"name": f"tj-node-0-{index}-x", "labels": labels},
            "spec": {"containers": [{"name": "node", "image": "x"}, {"name": "sidecar", "image": "y"}]}})
    replicas = job_replicas(conn.rest, TRAINJOB, namespace, "tj")
    assert [(r.label, r.pod, r.container) for r in replicas] == [("node-0", "tj-node-0-0-x", "node"),
                                                                  ("node-1", "tj-node-0-1-x", "node")]
    assert job_replicas(conn.rest, PYTORCHJOB, namespace, "tj") == []


def test_missing_job_and_namespace_are_one_line_errors(controlplane, namespace, conn):
    with pytest.raises(ClusterError, match=f"no PyTorchJob named nope in namespace {namespace}"):
        _collect(conn, namespace, "nope")
    with pytest.raises(ClusterError, match=r"namespace no-such-ns does not exist: .*kubectl create namespace"):
        follow_job_logs(conn, "no-such-ns", "nope")
