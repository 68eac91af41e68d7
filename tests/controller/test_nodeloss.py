"""The NodeLost condition (kubetrain/controller/nodeloss.py): set by the controller while a running replica's node
is down, named with when its kubelet last posted, shown by `kubetrain status`, and cleared when the node is back;
meanwhile `kubetrain logs` says which node is down and exits 3.

On the control plane the test plays the down node's side on the kwok node the pod runs on: kwok stops managing
it (its annotation removed), the node posts NotReady and the pod turns not Ready, as a kubelet reports a broken
node; then the node posts Ready again. The controller is its own process under the manifests' RBAC.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any
from unittest.mock import patch

import kubernetes
import pytest
from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.controller.nodeloss import NodeWatch, carried, lost_conditions
from kubetrain.jobs.nodes import NodeHealth
from kubetrain.jobs.pods import Replica
from tests.controller.operator_env import create, tj, training_job
from tests.harness.helpers import wait_for
from tests.testenv.kwok import NODE_SELECTOR_ANNOTATION

POSTED = dt.datetime(2026, 5, 1, 12, 0, 7, tzinfo=dt.UTC)


def _replica(label: str, node: str) -> Replica:
    role, index = label.rsplit("-", 1)
    return Replica(label=label, role=role, index=int(index), pod=f"j-{label}", uid=label, container="pytorch",
                   phase="Running", node=node, restarts=0, state="running", reason="", exit_code=None, gpus=0)


def test_a_down_node_is_named_with_its_replicas_and_its_kubelets_last_post() -> None:
    replicas = [_replica("master-0", "gpu-1"), _replica("worker-0", "gpu-2"), _replica("worker-1", "gpu-2")]
    down = {"gpu-2": NodeHealth("gpu-2", "Unknown", True, POSTED)}
    [lost] = lost_conditions(replicas, down)
    assert (lost["type"], lost["status"], lost["reason"]) == ("NodeLost", "True", "NodeUnreachable")
    assert lost["message"] == ("node gpu-2 is NotReady (status Unknown), tainted unreachable: its kubelet last "
                               "posted at 2026-05-01T12:00:07Z (replicas worker-0, worker-1)")
    not_ready = lost_conditions(replicas, {"gpu-1": NodeHealth("gpu-1", "False", False, None)})
    assert [(c["reason"], c["message"]) for c in not_ready] == [("NodeNotReady",
                                                                  "node gpu-1 is NotReady (replicas master-0)")]
    assert lost_conditions(replicas, {}) == []
    kept = {"conditions": [{**lost, "lastTransitionTime": "x"}, {"type": "Hung", "status": "False"}]}
    assert carried(kept, None) == [lost]  # a restarted controller keeps it until its first check
    assert carried(kept, []) == []


def test_one_event_per_loss_and_one_when_the_node_is_back_however_often_the_kubelet_posts() -> None:
    said: list[tuple[str, str]] = []
    queued: list[tuple[str, str]] = []
    watch = NodeWatch(rest=None, record=lambda _, kind, reason, message: said.append((kind, reason)),  # type: ignore[arg-type]
                      enqueue=queued.append)
    obj = {"metadata": {"namespace": "ns", "name": "j"}, "status": {}}
    replicas = [_replica("master-0", "gpu-1")]
    posts = [NodeHealth("gpu-1", "False", False, POSTED + dt.timedelta(seconds=10 * i)) for i in range(3)]
    for down in [{}, *({"gpu-1": h} for h in posts), {}, {}]:
        with patch("kubetrain.controller.nodeloss.down_nodes", return_value=down):
            watch.check(obj, replicas)
        if down:
            assert watch.conditions[("ns", "j")][0]["message"].endswith("posted at 2026-05-01T12:00:07Z (replicas "
                                                                        "master-0)")  # the first post it saw
    assert said == [("Warning", "NodeLost"), ("Normal", "NodeReady")]
    assert queued == [("ns", "j")] * 2 and watch.conditions[("ns", "j")] == []


def _node_of(k8s: Any, namespace: str, pod: str) -> str | None:
    try:
        found = kubernetes.client.CoreV1Api(k8s).read_namespaced_pod(pod, namespace)
    except kubernetes.client.exceptions.ApiException as exc:
        if exc.status == 404:  # not created yet
            return None
        raise
    return str(found.spec.node_name) if found.status.phase == "Running" and found.spec.node_name else None


def _post(k8s: Any, node: str, ready: str, reason: str) -> None:
    """The Ready condition as a kubelet posts it (status subresource)."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {"status": {"conditions": [{"type": "Ready", "status": ready, "reason": reason, "message": reason,
                                       "lastHeartbeatTime": now, "lastTransitionTime": now}]}}
    kubernetes.client.CoreV1Api(k8s).patch_node_status(node, body)


def _pod_not_ready(k8s: Any, namespace: str, pod: str) -> None:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "NodeNotReady",
                                       "lastTransitionTime": now}]}}
    kubernetes.client.CoreV1Api(k8s).patch_namespaced_pod_status(pod, namespace, body)


def _kwok_manages(k8s: Any, node: str, managed: bool) -> None:
    annotations = {NODE_SELECTOR_ANNOTATION: "fake" if managed else None}
    kubernetes.client.CoreV1Api(k8s).patch_node(node, {"metadata": {"annotations": annotations}})


def _node_lost(k8s: Any, namespace: str, name: str) -> dict[str, Any] | None:
    obj = tj(k8s, namespace, name) or {}
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "NodeLost"), None)


def _events(k8s: Any, namespace: str, name: str) -> dict[str, list[str]]:
    items = kubernetes.client.CoreV1Api(k8s).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=TrainingJob").items
    out: dict[str, list[str]] = {}
    for event in items:
        out.setdefault(event.reason, []).append(event.message)
    return out


@pytest.mark.controlplane
@pytest.mark.slow
def test_the_trainingjob_says_node_lost_while_its_node_is_down_and_clears_it_when_back(controlplane, k8s, namespace,
                                                                                      start):
    op = start("--hang-interval", "1")
    name, pod = "lost", "lost-master-0"
    create(k8s, training_job(name, namespace, nodes=1))
    node = wait_for(lambda: _node_of(k8s, namespace, pod), "the pod Running", 90)
    wait_for(lambda: ((tj(k8s, namespace, name) or {}).get("status") or {}).get("phase") == "Running",
             "phase Running", 60)
    _kwok_manages(k8s, node, False)
    try:
        _post(k8s, node, "False", "KubeletNotReady")
        _pod_not_ready(k8s, namespace, pod)
        runner = CliRunner(env={"KUBECONFIG": str(controlplane.kubeconfig)})
        logs = runner.invoke(cli, ["logs", name, "-n", namespace, "--tail", "5"], catch_exceptions=False)
        assert logs.exit_code == 3, (logs.exit_code, logs.output)  # docs/cluster.md's exit codes
        notice, failed = logs.stderr.splitlines()
        assert re.fullmatch(rf"\[master-0\] {pod}: node {node} is NotReady: its kubelet last posted \d+ s ago; "
                            "not waiting for its logs", notice), logs.stderr
        assert failed == "error: no logs of master-0: node down or kubelet not answering", logs.stderr
        lost = wait_for(lambda: _node_lost(k8s, namespace, name), "the NodeLost condition", 60)
        assert lost["status"] == "True" and lost["reason"] in ("NodeNotReady", "NodeUnreachable"), lost
        assert lost["message"].startswith(f"node {node} is NotReady"), lost
        assert ": its kubelet last posted at " in lost["message"] and lost["message"].endswith("(replicas master-0)")
        said = wait_for(lambda: _events(k8s, namespace, name).get("NodeLost"), "the NodeLost Event", 30)
        assert said == [lost["message"]], said
        shown = runner.invoke(cli, ["status", name, "-n", namespace], catch_exceptions=False)
        assert shown.exit_code == 0, shown.output
        assert any(line.split()[:3] == ["NodeLost", "True", lost["reason"]] and node in line
                   for line in shown.stdout.splitlines()), shown.stdout
    finally:
        _post(k8s, node, "True", "KubeletReady")
        _kwok_manages(k8s, node, True)
    wait_for(lambda: _node_lost(k8s, namespace, name) is None, "NodeLost cleared", 60)
    said = wait_for(lambda: _events(k8s, namespace, name).get("NodeReady"), "the NodeReady Event", 30)
    assert said == ["the nodes of its replicas are Ready again"], said
    assert len(_events(k8s, namespace, name)["NodeLost"]) == 1  # one Event per loss, not one per check
    assert op.proc.poll() is None, op.text()[-3000:]
