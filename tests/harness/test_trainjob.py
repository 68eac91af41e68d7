"""Optional component: Kubeflow Trainer v2.3.0 + JobSet v0.12.0 (target: trainjob).

A TrainJob applied with server-side apply goes TrainJob -> JobSet (trainer) ->
Jobs (jobset) -> indexed pods (kube-controller-manager's job controller) ->
bound to kwok GPU nodes (scheduler); pods succeed on cue, and the completion
travels back up to the TrainJob's Complete condition.
"""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest

from tests.harness.helpers import GPU, GPU_TOLERATION, condition, server_side_apply, wait_for

pytestmark = pytest.mark.controlplane
GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
TRAINJOB_LABEL = "jobset.sigs.k8s.io/jobset-name"


def trainjob(name: str, namespace: str, nodes: int, gpus: int) -> dict[str, Any]:
    pod_patch = {
        "metadata": {"annotations": {"kubetrain.test/phase": "Running"}},
        "spec": {
            "tolerations": [GPU_TOLERATION],
            "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
        },
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "image": "ghcr.io/example/train:1.0",
                "command": ["torchrun", "train.py"],
                "numNodes": nodes,
                "numProcPerNode": gpus,
                "resourcesPerNode": {"limits": {GPU: str(gpus)}},
            },
            "runtimePatches": [
                {
                    "manager": "kubetrain.test/patch",
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod_patch}}}]
                            }
                        }
                    },
                }
            ],
        },
    }


def _pods(core, namespace, name, count):
    pods = core.list_namespaced_pod(namespace, label_selector=f"{TRAINJOB_LABEL}={name}").items
    running = [p for p in pods if p.status.phase == "Running"]
    return running if len(running) == count else None


def test_trainjob_runs_to_complete(controlplane, trainer, namespace):
    client = controlplane.api_client()
    core = kubernetes.client.CoreV1Api(client)
    custom = kubernetes.client.CustomObjectsApi(client)
    server_side_apply(client, trainjob("tj", namespace, nodes=2, gpus=8))

    jobset = wait_for(lambda: _get(custom, "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "tj"), "JobSet tj")
    assert jobset["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    pods = wait_for(lambda: _pods(core, namespace, "tj", 2), "2 Running trainer pods")
    assert sorted(p.spec.node_name for p in pods)[0].startswith("gpu-node-")
    assert len({p.spec.node_name for p in pods}) == 2  # 8 GPUs each: one pod per node
    env = {e.name: e for e in pods[0].spec.containers[0].env}
    assert env["PET_NNODES"].value == "2"
    assert env["PET_NPROC_PER_NODE"].value == "8"
    assert env["PET_MASTER_ADDR"].value == "tj-node-0-0.tj"
    assert env["PET_NODE_RANK"].value_from.field_ref.field_path.endswith("job-completion-index']")
    assert pods[0].spec.containers[0].resources.limits[GPU] == "8"

    for pod in pods:
        controlplane.set_pod_phase(namespace, pod.metadata.name, "Succeeded")
    job = wait_for(
        lambda: _if(condition(j := _get(custom, GROUP, VERSION, namespace, "trainjobs", "tj"), "Complete"), j),
        "TrainJob Complete",
    )
    assert condition(job, "Complete")


def _get(custom, group, version, namespace, plural, name):
    try:
        return custom.get_namespaced_custom_object(group, version, namespace, plural, name)
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _if(ok, value):
    return value if ok else None
