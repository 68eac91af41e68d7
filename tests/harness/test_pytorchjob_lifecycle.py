"""Scenario 1: a PyTorchJob applied with server-side apply runs to Succeeded.

The training-operator turns it into real pods and services, the scheduler binds
the pods to kwok GPU nodes (honouring the nvidia.com/gpu taint), kwok runs them,
and on our cue they succeed, so the job's conditions reach Succeeded.
"""

from __future__ import annotations

import time

import kubernetes
import pytest

from tests.harness.helpers import (
    GPU,
    JOB_NAME_LABEL,
    condition,
    env_of,
    events_about,
    get_job,
    job_pods,
    pytorchjob,
    server_side_apply,
    wait_for,
)

pytestmark = pytest.mark.controlplane


def test_pytorchjob_runs_to_success(controlplane, namespace):
    client = controlplane.api_client()
    core = kubernetes.client.CoreV1Api(client)
    server_side_apply(client, pytorchjob("ddp", namespace, workers=2, gpus=8))

    pods = wait_for(lambda: _all_running(core, namespace, "ddp", 3), "3 Running pods")
    by_name = {p.metadata.name: p for p in pods}
    assert set(by_name) == {"ddp-master-0", "ddp-worker-0", "ddp-worker-1"}

    # Operator-injected env and labels.
    master_env = env_of(by_name["ddp-master-0"])
    assert master_env["MASTER_ADDR"] == "ddp-master-0"
    assert master_env["MASTER_PORT"] == "23456"
    assert master_env["WORLD_SIZE"] == "24"  # 3 nodes x nprocPerNode 8
    assert master_env["PET_NPROC_PER_NODE"] == "8"
    assert [env_of(by_name[f"ddp-worker-{i}"])["RANK"] for i in range(2)] == ["1", "2"]
    assert env_of(by_name["ddp-worker-1"])["PET_NODE_RANK"] == "2"
    master_labels = by_name["ddp-master-0"].metadata.labels
    assert master_labels[JOB_NAME_LABEL] == "ddp"
    assert master_labels["training.kubeflow.org/replica-type"] == "master"
    assert master_labels["training.kubeflow.org/job-role"] == "master"
    assert master_labels["training.kubeflow.org/operator-name"] == "pytorchjob-controller"

    # 3 pods x 8 GPUs fill all three GPU nodes, including the tainted one,
    # which only tolerating pods may use; the CPU node gets nothing.
    assert sorted(p.spec.node_name for p in pods) == ["gpu-node-0", "gpu-node-1", "gpu-node-2"]
    services = core.list_namespaced_service(namespace, label_selector=f"{JOB_NAME_LABEL}=ddp").items
    assert {s.metadata.name for s in services} == set(by_name)
    assert condition(get_job(client, namespace, "ddp"), "Running")

    for name in by_name:
        controlplane.set_pod_phase(namespace, name, "Succeeded")
    job = wait_for(lambda: _if(condition(j := get_job(client, namespace, "ddp"), "Succeeded"), j), "job Succeeded")
    assert job["status"]["replicaStatuses"]["Master"]["succeeded"] == 1


def test_gpu_taint_is_respected(controlplane, namespace):
    """Without the toleration, only the two untainted GPU nodes are usable."""
    client = controlplane.api_client()
    core = kubernetes.client.CoreV1Api(client)
    server_side_apply(client, pytorchjob("notol", namespace, workers=2, gpus=8, tolerate=False))

    running = wait_for(lambda: _running(core, namespace, "notol", 2), "2 Running pods")
    assert sorted(p.spec.node_name for p in running) == ["gpu-node-0", "gpu-node-1"]
    pending = [p for p in job_pods(core, namespace, "notol") if p.status.phase == "Pending"]
    assert len(pending) == 1 and not pending[0].spec.node_name
    event = wait_for(
        lambda: events_about(core, namespace, pending[0].metadata.name, "FailedScheduling"),
        "FailedScheduling",
    )
    message = event[-1].message
    assert "untolerated taint" in message and GPU in message, message


def test_pods_move_on_cue_and_a_failed_master_fails_the_job(controlplane, namespace):
    client = controlplane.api_client()
    core = kubernetes.client.CoreV1Api(client)
    held = {"kubetrain.test/phase": "Pending"}  # kwok keeps the pod in ContainerCreating
    server_side_apply(client, pytorchjob("boom", namespace, workers=0, gpus=1, annotations=held))
    pod = wait_for(lambda: _if((p := _pod(core, namespace, "boom-master-0")) and p.status.pod_ip, p), "pod scheduled")
    time.sleep(1)
    pod = core.read_namespaced_pod("boom-master-0", namespace)
    assert pod.status.phase == "Pending" and pod.spec.node_name.startswith("gpu-node-")
    assert pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"

    controlplane.set_pod_phase(namespace, "boom-master-0", "Running")
    wait_for(lambda: _all_running(core, namespace, "boom", 1), "master Running")
    controlplane.set_pod_phase(namespace, "boom-master-0", "Failed")
    job = wait_for(lambda: _if(condition(j := get_job(client, namespace, "boom"), "Failed"), j), "job Failed")
    pod = core.read_namespaced_pod("boom-master-0", namespace)
    assert pod.status.phase == "Failed"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 1
    assert job["status"]["replicaStatuses"]["Master"]["failed"] == 1


def _pod(core, namespace, name):
    try:
        return core.read_namespaced_pod(name, namespace)
    except kubernetes.client.ApiException:
        return None


def _running(core, namespace, job, count):
    pods = [p for p in job_pods(core, namespace, job) if p.status.phase == "Running"]
    return pods if len(pods) == count else None


def _all_running(core, namespace, job, count):
    pods = job_pods(core, namespace, job)
    return pods if len(pods) == count and all(p.status.phase == "Running" for p in pods) else None


def _if(ok, value):
    return value if ok else None
