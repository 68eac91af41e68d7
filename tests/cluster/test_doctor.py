"""kubetrain doctor: the verdicts as pure functions, and the whole report against the real control plane
(kwok GPU nodes; a broken GPU node, a device-plugin DaemonSet and an operator Deployment made per test)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from kubetrain.checks import FAIL, OK, WARN
from kubetrain.cluster.cloud import detect_cloud, gpu_groups
from kubetrain.cluster.doctor import Unreadable, device_plugin_checks, gpu_checks, run_doctor
from kubetrain.cluster.webhooks import recent_failures
from kubetrain.kube.connection import connect
from tests.harness.helpers import wait_for
from tests.testenv import kwok


def node(name: str, labels: dict[str, str], gpus: int | None = None, taints: list[dict[str, str]] | None = None,
         provider: str = "") -> dict[str, Any]:
    allocatable = {"cpu": "8"} | ({"nvidia.com/gpu": str(gpus)} if gpus is not None else {})
    return {"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints or [], "providerID": provider},
            "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]}}


@pytest.mark.parametrize(("nodes", "expected"), [
    ([node("a", {"cloud.google.com/gke-accelerator": "nvidia-l4"}, 1), node("b", {})], "gke"),
    ([node("a", {"eks.amazonaws.com/instance-gpu-name": "l4"}, 1)], "eks"),
    ([node("a", {"karpenter.k8s.aws/instance-gpu-name": "a10g"}, 1)], "eks-karpenter"),
    ([node("a", {"kubernetes.azure.com/accelerator": "nvidia"}, 1)], "aks"),
    ([node("a", {"nvidia.com/gpu.present": "true"}, 1, provider="kind://docker/kt/kt-worker")], "kind"),
    ([node("a", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, 8)], "generic"),
    ([node("a", {}, provider="aws:///us-east-1a/i-0abc")], "eks"),
    ([node("a", {"karpenter.sh/nodepool": "gpu"}, 4, provider="aws:///us-east-1a/i-1")], "eks-karpenter"),
    # GPU nodes decide: a GKE CPU pool does not outvote GFD-labelled GPU nodes elsewhere
    ([node("c1", {"cloud.google.com/gke-nodepool": "cpu"}), node("c2", {"cloud.google.com/gke-nodepool": "cpu"}),
      node("g", {"nvidia.com/gpu.product": "A100"}, 8)], "generic"),
    ([node("a", {"kubernetes.io/os": "linux"})], None),
    ([], None),
])
def test_detect_cloud(nodes, expected):
    assert detect_cloud(nodes) == expected


def test_gpu_checks_flag_zero_allocatable_and_foreign_taints():
    nodes = [node("ok-1", {"nvidia.com/gpu.product": "A100", "nvidia.com/gpu.memory": "81920"}, 8),
             node("broken", {"cloud.google.com/gke-accelerator": "nvidia-l4"}, 0),
             node("spot", {"nvidia.com/gpu.product": "A100", "nvidia.com/gpu.memory": "81920"}, 8,
                  [{"key": "spot", "value": "true", "effect": "NoSchedule"}]),
             node("cpu", {})]
    checks = gpu_checks(nodes, [])
    assert [(c.status, c.message) for c in checks] == [
        (OK, "16 nvidia.com/gpu allocatable on 2 node(s)"),
        (OK, "1 node(s) with 8 x A100 (81920 MiB) (nvidia.com/gpu.product): ok-1"),
        (WARN, "1 node(s) with 8 x A100 (81920 MiB) (nvidia.com/gpu.product); taints spot=true:NoSchedule: spot"),
        (FAIL, "1 node(s) labelled as GPU nodes (nvidia-l4 (cloud.google.com/gke-accelerator)) with 0 allocatable "
               "nvidia.com/gpu: broken"),
        (OK, "no device-plugin DaemonSet; GPUs are advertised anyway "
             "(the node image or the cloud provides the plugin)"),
    ]
    assert "spec.placement.tolerations" in checks[2].hint and "device plugin" in checks[3].hint
    assert [g.nodes for g in gpu_groups(nodes)] == [("ok-1",), ("spot",), ("broken",)]


def test_no_gpus_and_forbidden_lists():
    labelled = [node("g", {"nvidia.com/gpu.present": "true"})]
    assert [c.status for c in gpu_checks(labelled, [])] == [FAIL, FAIL, FAIL]
    assert gpu_checks(Unreadable("nodes is forbidden"), [])[0].status == WARN
    assert device_plugin_checks(labelled, Unreadable("x"))[0].status == WARN


@pytest.fixture
def broken_gpu_node(controlplane: Any) -> Iterator[str]:
    """A kwok node labelled as a GPU node whose device plugin advertises nothing (0 allocatable)."""
    core = kubernetes.client.CoreV1Api(controlplane.api_client())
    name = f"broken-gpu-{uuid.uuid4().hex[:5]}"
    body = kwok._node(name, {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-L4"},
                      {"cpu": "16", "memory": "64Gi", "pods": "110"}, [kwok.gpu_taint()])
    core.create_node(body)
    try:
        yield name
    finally:
        core.delete_node(name)


def _device_plugin(namespace: str) -> dict[str, Any]:
    """Pods that never become ready (kwok holds them Pending), on the broken node only."""
    labels = {"app": "nvidia-device-plugin"}
    return {"metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": namespace},
            "spec": {"selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels, "annotations": {kwok.PHASE_ANNOTATION: "Pending"}},
                                  "spec": {"nodeSelector": {"nvidia.com/gpu.present": "true"},
                                           "tolerations": [{"operator": "Exists"}],
                                           "containers": [{"name": "plugin",
                                                           "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}]}}}}


def _operator(namespace: str) -> dict[str, Any]:
    labels = {"control-plane": "kubeflow-training-operator"}
    return {"metadata": {"name": "training-operator", "namespace": namespace},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "op", "image": "kubeflow/training-operator"}]}}}}


@pytest.mark.controlplane
def test_report_on_a_healthy_cluster(controlplane, namespace):
    report = run_doctor(connect(None, str(controlplane.kubeconfig)), namespace)
    by_topic = {(c.name, c.status) for c in report.checks}
    assert report.ok and report.cloud == "gke"
    assert ("server", OK) in by_topic and ("rbac", OK) in by_topic and ("queue", OK) in by_topic
    messages = [c.message for c in report.checks]
    assert "24 nvidia.com/gpu allocatable on 3 node(s)" in messages
    assert ("1 node(s) with 8 x nvidia-h100-80gb (cloud.google.com/gke-accelerator); taints "
            "nvidia.com/gpu=present:NoSchedule: gpu-node-2") in messages
    assert any(m.startswith("PyTorchJob (kubeflow.org/v1) served; no Kubeflow training-operator Deployment")
               for m in messages)  # the harness runs the operator as a process, not a Deployment
    assert "TrainJob (trainer.kubeflow.org/v1alpha1) not installed" in messages


@pytest.mark.controlplane
def test_report_flags_a_gpu_node_without_gpus_and_an_unready_device_plugin(controlplane, namespace,
                                                                           broken_gpu_node):
    client = controlplane.api_client()
    apps = kubernetes.client.AppsV1Api(client)
    apps.create_namespaced_daemon_set(namespace, _device_plugin(namespace))
    apps.create_namespaced_deployment(namespace, _operator(namespace))
    try:
        wait_for(lambda: (apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset", namespace).status
                          .desired_number_scheduled == 1), "the DaemonSet scheduled on the broken node")
        wait_for(lambda: apps.read_namespaced_deployment("training-operator", namespace).status.ready_replicas,
                 "the operator Deployment ready", interval=0.1)
        report = run_doctor(connect(None, str(controlplane.kubeconfig)), namespace)
    finally:
        apps.delete_namespaced_daemon_set("nvidia-device-plugin-daemonset", namespace)
        apps.delete_namespaced_deployment("training-operator", namespace)
    failed = [c for c in report.checks if c.status == FAIL]
    assert not report.ok
    assert [c.message for c in failed] == [
        f"1 node(s) labelled as GPU nodes (NVIDIA-L4 (nvidia.com/gpu.product)) with 0 allocatable nvidia.com/gpu: "
        f"{broken_gpu_node}",
        f"DaemonSet {namespace}/nvidia-device-plugin-daemonset: only 0/1 ready"]
    assert f"kubectl -n {namespace} logs daemonset/nvidia-device-plugin-daemonset" in failed[1].hint
    assert any(c.status == OK and c.message == "PyTorchJob (kubeflow.org/v1) served; Kubeflow training-operator: "
               f"Deployment {namespace}/training-operator 1/1 ready" for c in report.checks), report.checks


@pytest.mark.controlplane
def test_report_for_a_user_without_rights(controlplane, namespace):
    kubeconfig = controlplane.write_kubeconfig("nobody-in-particular")
    report = run_doctor(connect(None, str(kubeconfig)), namespace)
    rbac = [c for c in report.checks if c.name == "rbac"]
    assert rbac[0].status == FAIL
    assert rbac[0].message.startswith(f"in namespace {namespace} you cannot: get pytorchjobs.kubeflow.org, "
                                      "list pytorchjobs.kubeflow.org")
    assert "get pods/log" in rbac[0].message and "create configmaps" in rbac[0].message
    assert rbac[1].message == ("optional permissions missing: create pods/exec (for kubetrain gpu); "
                               "list nodes (for doctor, cloud: auto)")
    gpu = [c for c in report.checks if c.name == "gpu"]
    assert gpu[0].status == WARN and gpu[0].message.startswith("cannot list nodes (")


def test_training_checks_without_the_cluster():
    from kubetrain.cluster.doctor import training_checks
    from kubetrain.jobs.targets import PYTORCHJOB, TRAINJOB

    nothing = training_checks([], False, lambda _t: None)
    assert [(c.status, c.message.split(" (")[0]) for c in nothing] == [(FAIL, "neither PyTorchJob")]
    ready = {"metadata": {"namespace": "kubeflow-system", "name": "kubeflow-trainer-controller-manager"},
             "spec": {"replicas": 1},
             "status": {"readyReplicas": 0, "conditions": [{"type": "Available", "status": "False"}]}}
    checks = training_checks([TRAINJOB], False, lambda _t: ready)
    assert [c.status for c in checks] == [WARN, FAIL, FAIL]
    assert checks[1].message.endswith("not ready: Deployment kubeflow-system/kubeflow-trainer-controller-manager "
                                      "0/1 ready")
    assert checks[2].message == "TrainJob is installed but JobSet (jobset.x-k8s.io) is not"
    assert training_checks([PYTORCHJOB], False, lambda _t: Unreadable("no"))[0].status == WARN


def _warning(message: str, stamp: str, name: str = "job-1") -> dict[str, Any]:
    return {"type": "Warning", "reason": "FailedCreate", "message": message, "lastTimestamp": stamp, "count": 2,
            "involvedObject": {"kind": "PyTorchJob", "name": name}}


def test_recent_webhook_failures_verdict():
    now = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
    failed = 'Internal error occurred: failed calling webhook "v.example": connection refused'
    assert recent_failures([_warning(failed, "2026-01-01T10:00:00Z")], now) is None  # older than an hour
    assert recent_failures([_warning("Error creating: quota exceeded", "2026-01-01T11:50:00Z")], now) is None
    check = recent_failures([_warning(failed, "2026-01-01T11:50:00Z"), _warning(failed, "bad stamp", "x")], now)
    assert check is not None and check.status == WARN
    assert check.message == f"2 webhook failure(s) in the last hour, latest on PyTorchJob/job-1: FailedCreate: {failed}"


@pytest.mark.controlplane
def test_report_shows_recent_webhook_failures(controlplane, namespace):
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    message = 'Error creating: Internal error occurred: failed calling webhook "mutate.pods.example": EOF'
    kubernetes.client.CoreV1Api(controlplane.api_client()).create_namespaced_event(namespace, {
        "metadata": {"name": f"failed-{uuid.uuid4().hex[:6]}"}, "type": "Warning", "reason": "FailedCreate",
        "message": message, "lastTimestamp": now, "firstTimestamp": now, "count": 1,
        "involvedObject": {"kind": "PyTorchJob", "name": "broken", "namespace": namespace}})
    report = run_doctor(connect(None, str(controlplane.kubeconfig)), namespace)
    assert [(c.status, c.message) for c in report.checks if c.name == "webhooks"] == [
        (WARN, f"1 webhook failure(s) in the last hour, latest on PyTorchJob/broken: FailedCreate: {message}")]


def test_cpu_check_needs_a_ready_node_and_no_gpu() -> None:
    from kubetrain.cluster.doctor import cpu_check

    ready = {"metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert [(c.status, c.name) for c in cpu_check([ready])] == [(OK, "cpu")]
    assert cpu_check([{"metadata": {"name": "n"}, "status": {}}])[0].status == FAIL
