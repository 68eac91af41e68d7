"""Tier 2: submitting, re-submitting and reading a job (kubetrain.jobs.apply, status, crud) against the real control
plane (kube-apiserver, scheduler, GC, training-operator, kwok GPU nodes)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from kubetrain import jobs
from kubetrain.errors import ClusterError
from kubetrain.jobs import apply, status
from kubetrain.jobs.targets import PYTORCHJOB, Target
from kubetrain.kube import watch
from kubetrain.kube.connection import Connection, connect
from tests.testenv.specs import pods_by_phase, render, typed, watch_until, write_spec

pytestmark = pytest.mark.controlplane


@pytest.fixture
def conn(controlplane: Any) -> Connection:
    return connect(kubeconfig=str(controlplane.kubeconfig))


def test_submit_runs_pods_on_gpu_nodes_to_success(controlplane: Any, conn: Connection, namespace: str,
                                                  tmp_path: Path) -> None:
    objects = render(write_spec(tmp_path, "ddp", nodes=2), namespace)
    result = apply.submit(conn.rest, PYTORCHJOB, objects)
    assert result.action == apply.CREATED
    running = pods_by_phase(conn, namespace, "ddp", 2)
    assert {p["spec"]["nodeName"] for p in running} <= {"gpu-node-0", "gpu-node-1", "gpu-node-2"}

    report = status.job_status(conn.rest, [PYTORCHJOB], namespace, "ddp")
    assert report.job.state == "Running" and (report.job.pods, report.job.gpus_per_pod) == (2, 8)
    assert [(p.replica, p.phase) for p in report.pods] == [("master-0", "Running"), ("worker-0", "Running")]
    assert all(p.node.startswith("gpu-node-") for p in report.pods)
    assert {c["type"] for c in report.conditions} >= {"Created", "Running"}
    assert any(e.reason == "SuccessfulCreatePod" for e in report.events) and report.hints == []

    for pod in running:
        controlplane.set_pod_phase(namespace, pod["metadata"]["name"], "Succeeded")
    assert jobs.wait_finished(conn.rest, PYTORCHJOB, namespace, "ddp", timeout=60) == "Succeeded"
    assert status.job_status(conn.rest, [PYTORCHJOB], namespace, "ddp").job.state == "Succeeded"


def test_unchanged_is_a_noop_changed_is_refused_replace_recreates(conn: Connection, namespace: str,
                                                                  tmp_path: Path) -> None:
    path = write_spec(tmp_path, "same", nodes=1, code=True)
    first = apply.submit(conn.rest, PYTORCHJOB, render(path, namespace))
    job = jobs.get(conn.rest, PYTORCHJOB, namespace, "same")
    assert job is not None
    again = apply.submit(conn.rest, PYTORCHJOB, render(path, namespace))
    assert (first.action, again.action) == (apply.CREATED, apply.UNCHANGED)
    after = jobs.get(conn.rest, PYTORCHJOB, namespace, "same")
    assert after is not None and after["metadata"]["generation"] == job["metadata"]["generation"]
    assert "unchanged" in again.message(PYTORCHJOB, "same", namespace)

    changed = render(write_spec(tmp_path, "same", nodes=2, code=True), namespace)
    with pytest.raises(ClusterError, match=r"already exists with a different spec .* --replace"):
        apply.submit(conn.rest, PYTORCHJOB, changed)
    pods_by_phase(conn, namespace, "same", 1)
    replaced = apply.submit(conn.rest, PYTORCHJOB, changed, replace=True, timeout=60)
    new = jobs.get(conn.rest, PYTORCHJOB, namespace, "same")
    assert replaced.action == apply.REPLACED and new is not None
    assert new["metadata"]["uid"] != job["metadata"]["uid"] and jobs.shape(new) == (2, 8)
    running = pods_by_phase(conn, namespace, "same", 2, owner=new["metadata"]["uid"])  # the new job's pods run
    assert len(running) == 2
    configmap = replaced.objects[0]
    assert configmap["kind"] == "ConfigMap"
    assert configmap["metadata"]["ownerReferences"][0]["uid"] == new["metadata"]["uid"]


def test_code_configmap_is_owned_and_garbage_collected(conn: Connection, namespace: str, tmp_path: Path) -> None:
    objects = render(write_spec(tmp_path, "withcode", nodes=1, gpus=0, code=True), namespace)
    apply.submit(conn.rest, PYTORCHJOB, objects)
    core = kubernetes.client.CoreV1Api(typed(conn))
    name = objects[0]["metadata"]["name"]
    cm = core.read_namespaced_config_map(name, namespace)
    job = jobs.get(conn.rest, PYTORCHJOB, namespace, "withcode")
    assert job is not None
    (owner,) = cm.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.block_owner_deletion) == (
        "PyTorchJob", "withcode", job["metadata"]["uid"], True)
    assert cm.immutable and "train.py" in str(cm.data)
    (pod,) = pods_by_phase(conn, namespace, "withcode", 1)  # the pod that mounts it runs
    assert name in {v.get("configMap", {}).get("name") for v in pod["spec"]["volumes"]}

    assert jobs.delete(conn.rest, PYTORCHJOB, namespace, "withcode")
    # Nobody deletes the ConfigMap but the garbage collector (through the owner reference).
    watch.wait_for(core.list_namespaced_config_map, lambda cache: not cache, timeout=60,
                   what="the code ConfigMap to be garbage-collected", namespace=namespace,
                   field_selector=f"metadata.name={name}")
    assert not jobs.delete(conn.rest, PYTORCHJOB, namespace, "withcode")  # already gone: not an error


def test_server_dry_run_validates_and_writes_nothing(conn: Connection, namespace: str, tmp_path: Path) -> None:
    objects = render(write_spec(tmp_path, "dry", nodes=2, code=True), namespace)
    result = apply.submit(conn.rest, PYTORCHJOB, objects, dry_run="server")
    assert result.action == apply.CREATED and result.objects[-1]["metadata"]["uid"]
    assert jobs.get(conn.rest, PYTORCHJOB, namespace, "dry") is None
    assert not kubernetes.client.CoreV1Api(typed(conn)).list_namespaced_config_map(
        namespace, label_selector="kubetrain.dev/job=dry").items

    # The CRD's schema (422 with causes), the operator's validating webhook, server-side apply's typed merge.
    broken = copy.deepcopy(objects)
    del broken[-1]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    with pytest.raises(ClusterError) as caught:
        apply.submit(conn.rest, PYTORCHJOB, broken, dry_run="server")
    assert str(caught.value) == ("invalid: PyTorchJob 'dry' rejected by the API server: "
                                 "spec.pytorchReplicaSpecs.Worker.template.spec.containers: Required value")
    no_image = copy.deepcopy(objects)
    del no_image[-1]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"]
    with pytest.raises(ClusterError) as caught:
        apply.submit(conn.rest, PYTORCHJOB, no_image, dry_run="server")
    assert str(caught.value).startswith('invalid: admission webhook "validator.pytorchjob.training-operator')
    assert "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].image: Required value" in str(caught.value)

    # A value of the wrong type fails server-side apply's typed merge (a 500 that is not retried).
    mistyped = copy.deepcopy(objects)
    mistyped[-1]["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "one"
    with pytest.raises(ClusterError) as caught:
        apply.submit(conn.rest, PYTORCHJOB, mistyped, dry_run="server")
    assert str(caught.value).startswith("invalid: ") and ".spec.pytorchReplicaSpecs.Worker.replicas" in str(
        caught.value)


def test_missing_namespace_and_missing_crd_are_one_line_errors(conn: Connection, tmp_path: Path) -> None:
    objects = render(write_spec(tmp_path, "nons", nodes=1), "does-not-exist")
    with pytest.raises(ClusterError) as caught:
        apply.submit(conn.rest, PYTORCHJOB, objects)
    assert str(caught.value) == ("namespace does-not-exist does not exist: create it: "
                                 "kubectl create namespace does-not-exist")
    bogus = Target("thing", "things.example.com", "v1", "things", "Thing", "x", (), "nothing")
    with pytest.raises(ClusterError, match=r"CRD not installed\): install the Kubeflow training-operator"):
        jobs.get(conn.rest, bogus, "default", "x")


def test_failed_scheduling_from_the_real_scheduler_becomes_a_hint(conn: Connection, namespace: str,
                                                                  tmp_path: Path) -> None:
    apply.submit(conn.rest, PYTORCHJOB, render(write_spec(tmp_path, "toobig", nodes=4), namespace))
    pods_by_phase(conn, namespace, "toobig", 3)

    def pending_hint() -> status.JobStatus | None:
        report = status.job_status(conn.rest, [PYTORCHJOB], namespace, "toobig")
        hinted = any("not enough free nvidia.com/gpu" in h for h in report.hints)
        return report if hinted and any(e.reason == "FailedScheduling" for e in report.events) else None

    report = watch_until(pending_hint)
    pending = [p for p in report.pods if p.phase == "Pending"]
    assert len(pending) == 1 and not pending[0].node
    event = next(e for e in report.events if e.reason == "FailedScheduling")
    assert "Insufficient nvidia.com/gpu" in event.message and event.object == f"pod/{pending[0].name}"
