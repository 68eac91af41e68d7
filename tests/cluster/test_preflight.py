"""kubetrain.cluster.preflight against the real control plane (kube-apiserver, scheduler, training-operator, kwok
GPU nodes): permissions, namespace, references, fit, unbindable claims and the pod-template dry-run."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from kubetrain.checks import FAIL, OK, WARN
from kubetrain.cluster import preflight
from kubetrain.jobs import apply
from kubetrain.jobs.targets import PYTORCHJOB
from kubetrain.kube.connection import Connection, connect
from tests.testenv.specs import pods_by_phase, render, typed, write_spec

pytestmark = pytest.mark.controlplane


@pytest.fixture
def conn(controlplane: Any) -> Connection:
    return connect(kubeconfig=str(controlplane.kubeconfig))


def run_checks(conn: Connection, objects: list[dict[str, Any]], namespace: str) -> dict[str, list[str]]:
    results = preflight.run(conn.rest, PYTORCHJOB, objects, namespace, conn.server)
    out: dict[str, list[str]] = {}
    for result in results:
        out.setdefault(result.name, []).append(result.line())
    return out


def test_preflight_all_good(conn: Connection, namespace: str, tmp_path: Path) -> None:
    checks = run_checks(conn, render(write_spec(tmp_path, "good", nodes=3), namespace), namespace)
    assert all(line.startswith(("✓", "!")) for lines in checks.values() for line in lines), checks
    assert checks["fit"] == ["✓ fit: 3 pod(s) × 8 nvidia.com/gpu fit: 3 eligible node(s) have ≥ 8 free "
                             "(cloud.google.com/gke-accelerator=nvidia-h100-80gb)"]
    assert checks["API server"][0].startswith(f"✓ API server: {conn.server} (Kubernetes 1.")
    # The harness runs the operator as a process, not a Deployment: a note, not a failure.
    assert checks["operator"][0].startswith("! operator: no Kubeflow training-operator Deployment")


def test_preflight_missing_namespace_and_references(conn: Connection, namespace: str, tmp_path: Path) -> None:
    spec = {"secretEnv": [{"name": "TOKEN", "secret": "hf", "key": "token"},
                          {"name": "OPT", "secret": "maybe", "key": "k", "optional": True}],
            "volumes": [{"name": "data", "claim": "datasets", "mountPath": "/data"}],
            "imagePullSecrets": ["registry-cred"], "serviceAccount": "trainer"}
    path = write_spec(tmp_path, "refs", nodes=1, **spec)
    checks = run_checks(conn, render(path, "nowhere"), "nowhere")
    assert checks["namespace"] == ["✗ namespace: nowhere does not exist — create it: kubectl create namespace nowhere"]
    assert "references" not in checks  # everything would be missing: one cause, one line

    lines = run_checks(conn, render(path, namespace), namespace)["references"]
    assert lines == [
        f"✗ references: Secret hf not found in namespace {namespace} — create it: kubectl create secret generic "
        f"hf -n {namespace} --from-literal=KEY=VALUE",
        f"✗ references: PersistentVolumeClaim datasets not found in namespace {namespace} — create the claim in "
        f"{namespace} or fix spec.volumes",
        f"✗ references: imagePullSecret registry-cred not found in namespace {namespace} — create it: kubectl "
        f"create secret docker-registry registry-cred -n {namespace} --docker-server=... --docker-username=... "
        "--docker-password=...",
        f"✗ references: ServiceAccount trainer not found in namespace {namespace} — create it: kubectl create "
        f"serviceaccount trainer -n {namespace}"]
    core = kubernetes.client.CoreV1Api(typed(conn))
    core.create_namespaced_secret(namespace, {"metadata": {"name": "hf"}, "stringData": {"token": "t"}})
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "trainer"}})
    lines = run_checks(conn, render(path, namespace), namespace)["references"]
    assert lines[0] == "✓ references: Secret hf, ServiceAccount trainer exist" and len(lines) == 3


def test_preflight_rbac_denial_names_verb_and_resource(controlplane: Any, namespace: str, tmp_path: Path) -> None:
    restricted = connect(kubeconfig=str(controlplane.write_kubeconfig("bob", ())))
    results = preflight.run(restricted.rest, PYTORCHJOB, render(write_spec(tmp_path, "r", nodes=1, code=True),
                                                                 namespace), namespace, restricted.server)
    by_name = {r.name: r for r in results}
    denied = by_name["permissions"]
    assert denied.status == FAIL
    assert denied.message == (f"not allowed to create pytorchjobs.kubeflow.org, get pytorchjobs.kubeflow.org, "
                              f"create configmaps in namespace {namespace}")
    assert f"kubectl auth can-i create pytorchjobs.kubeflow.org -n {namespace}" in denied.hint
    # What bob may not read is reported as unknown (!), not as missing (✗).
    assert by_name["namespace"].status == WARN and by_name["fit"].status == WARN


def without_tolerations(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(objects)
    for replica in out[-1]["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"].pop("tolerations", None)
    return out


def test_preflight_fit_counts_only_eligible_nodes_with_free_gpus(conn: Connection, namespace: str,
                                                                 tmp_path: Path) -> None:
    four = render(write_spec(tmp_path, "big", nodes=4), namespace)
    fit = {r.name: r for r in preflight.run(conn.rest, PYTORCHJOB, without_tolerations(four), namespace)}["fit"]
    assert fit.status == FAIL  # never: 2 eligible 8-GPU nodes, even idle, hold 2 such pods
    assert fit.message == ("can never fit: 4 pods × 8 nvidia.com/gpu, but the eligible nodes hold at most 2 "
                           "such pod(s) even when idle (cloud.google.com/gke-accelerator=nvidia-h100-80gb)")
    assert "gpu-node-2: taint nvidia.com/gpu=present:NoSchedule not tolerated" in fit.hint
    tolerated = {r.name: r for r in preflight.run(conn.rest, PYTORCHJOB, four, namespace)}["fit"]
    assert tolerated.message.startswith("can never fit: 4 pods × 8 nvidia.com/gpu, but the eligible nodes hold at "
                                        "most 3")
    sixteen = render(write_spec(tmp_path, "wide", nodes=4, gpus=16), namespace)
    wide = {r.name: r for r in preflight.run(conn.rest, PYTORCHJOB, sixteen, namespace)}["fit"]
    assert (wide.status, wide.message) == (FAIL, "can never fit: each pod needs 16 nvidia.com/gpu but "
                                           "the largest eligible node has 8 (cloud.google.com/gke-accelerator="
                                           "nvidia-h100-80gb)")
    assert "free up" not in wide.hint and "lower spec.gpusPerNode to at most 8" in wide.hint

    # GPUs in use count: a running 2-node job leaves one free node.
    apply.submit(conn.rest, PYTORCHJOB, render(write_spec(tmp_path, "busy", nodes=2), namespace))
    pods_by_phase(conn, namespace, "busy", 2)
    two = render(write_spec(tmp_path, "next", nodes=2), namespace)
    busy = {r.name: r for r in preflight.run(conn.rest, PYTORCHJOB, two, namespace)}["fit"]
    # Not now: a warning (the pods would queue), naming the job that holds the GPUs.
    assert busy.status == WARN
    assert busy.message.startswith("not now: needs 2 pods × 8 nvidia.com/gpu; only 1 eligible node have ≥ 8 free")
    assert "GPUs held by gpu-node-" in busy.message and f"{namespace}/busy (1 pod(s), 8 GPU)" in busy.message
    assert "0/8 free" in busy.hint and "--wait-for-capacity" in busy.hint
    # ...but a re-submitted job's own pods do not compete with it.
    same = render(write_spec(tmp_path, "busy", nodes=2), namespace)
    assert {r.name: r for r in preflight.run(conn.rest, PYTORCHJOB, same, namespace)}["fit"].status == OK


def test_preflight_selector_matching_only_cpu_nodes(conn: Connection, namespace: str, tmp_path: Path) -> None:
    path = write_spec(tmp_path, "cpuonly", nodes=1, gpus=1,
                      placement={"cloud": "none", "nodeSelector": {"cloud.google.com/gke-nodepool": "cpu-pool"}})
    fit = {r.name: r for r in preflight.run(conn.rest, PYTORCHJOB, render(path, namespace), namespace)}["fit"]
    assert fit.status == FAIL
    assert fit.message == ("can never fit: each pod needs 1 nvidia.com/gpu but the largest eligible node has 0 "
                           "(cloud.google.com/gke-nodepool=cpu-pool)")
    assert "gpu-node-0: nodeSelector cloud.google.com/gke-nodepool=cpu-pool does not match" in fit.hint


def test_preflight_flags_a_claim_that_can_never_bind(conn: Connection, namespace: str, tmp_path: Path) -> None:
    core = kubernetes.client.CoreV1Api(typed(conn))
    claim = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}
    core.create_namespaced_persistent_volume_claim(namespace, {"metadata": {"name": "typo"},
                                                               "spec": {**claim, "storageClassName": "fast-ssdd"}})
    core.create_namespaced_persistent_volume_claim(namespace, {"metadata": {"name": "static"},
                                                               "spec": {**claim, "storageClassName": ""}})
    volumes = [{"name": "a", "claim": "typo", "mountPath": "/a"}, {"name": "b", "claim": "static", "mountPath": "/b"}]
    objects = render(write_spec(tmp_path, "pvcs", nodes=1, gpus=0, volumes=volumes), namespace)
    lines = [r.line() for r in preflight.run(conn.rest, PYTORCHJOB, objects, namespace) if r.name == "references"]
    assert ("✗ references: PersistentVolumeClaim typo can never bind: StorageClass fast-ssdd does not exist — "
            "kubectl get storageclass; fix the claim's storageClassName") in lines
    assert any(line.startswith("✗ references: PersistentVolumeClaim static can never bind: no StorageClass "
                               "provisions it and no Available PersistentVolume has its size") for line in lines)
    # A matching static volume makes it bindable.
    core.create_persistent_volume({"metadata": {"name": f"pv-{namespace}"}, "spec": {
        "capacity": {"storage": "20Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
        "hostPath": {"path": "/mnt/pv"}}})
    try:
        again = [r.line() for r in preflight.run(conn.rest, PYTORCHJOB, objects, namespace) if r.name == "references"]
        assert not any("static can never bind" in line for line in again)
    finally:
        core.delete_persistent_volume(f"pv-{namespace}")


def test_preflight_dry_runs_each_pod_template_as_a_pod(conn: Connection, namespace: str, tmp_path: Path) -> None:
    objects = render(write_spec(tmp_path, "pods", nodes=2, gpus=0), namespace)
    [ok] = [r for r in preflight.run(conn.rest, PYTORCHJOB, objects, namespace) if r.name == "pod-templates"]
    assert ok.status == OK, ok.line()
    kubernetes.client.CoreV1Api(typed(conn)).patch_namespace(namespace, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted"}}})  # PodSecurity refuses root pods from now on
    [refused] = [r for r in preflight.run(conn.rest, PYTORCHJOB, objects, namespace) if r.name == "pod-templates"]
    assert refused.status == FAIL and "violates PodSecurity" in refused.line(), refused.line()
