"""The JobSet `validate --exact` derives from a TrainJob, against the one the real Trainer v2.3.0 creates.

The golden test applies suspended TrainJobs (the Trainer builds their JobSet; JobSet creates no Jobs for a
suspended one) on the suite's control plane with Trainer + JobSet running, derives each JobSet from the
TrainJob and runtime as the server stored them, dry-runs it through the same server (JobSet's webhook
defaults both alike) and compares it with the JobSet the Trainer made, field for field.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import kubernetes
import pytest

from kubetrain.jobs.trainjobset import TORCH_DISTRIBUTED, jobset_jobs, runtime_for, strategic_merge, trainjob_jobset
from tests.harness.helpers import server_side_apply, wait_for

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
JOBSET = ("jobset.x-k8s.io", "v1alpha2")
SHIPPED = "torch-distributed"  # the ClusterTrainingRuntime the trainer fixture installs

# A runtime of its own: two replicated jobs (a dataset initializer before the trainer), node resources
# and a volume of the runtime's, numNodes 3 in its ML policy.
RUNTIME = {
    "apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingRuntime",
    "metadata": {"name": "golden-runtime", "labels": {"trainer.kubeflow.org/framework": "torch"}},
    "spec": {
        "mlPolicy": {"numNodes": 3, "torch": {}},
        "template": {
            "metadata": {"labels": {"team": "vision"}, "annotations": {"golden/source": "runtime"}},
            "spec": {"replicatedJobs": [
                {"name": "dataset-initializer",
                 "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step":
                                                      "dataset-initializer"}},
                              "spec": {"template": {"spec": {
                                  "containers": [{"name": "dataset-initializer", "image": "busybox:1.36",
                                                  "env": [{"name": "MODE", "value": "fetch"}],
                                                  "volumeMounts": [{"name": "initializer",
                                                                    "mountPath": "/workspace"}]}],
                                  "volumes": [{"name": "initializer", "emptyDir": {}}]}}}}},
                {"name": "node", "dependsOn": [{"name": "dataset-initializer", "status": "Complete"}],
                 "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                              "spec": {"template": {"spec": {
                                  "containers": [{"name": "node", "image": "busybox:1.36",
                                                  "env": [{"name": "FROM_RUNTIME", "value": "1"}],
                                                  # unnamed: the Trainer's upsert of port 29500 replaces it
                                                  "ports": [{"containerPort": 8080}],
                                                  "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                                                  "volumeMounts": [{"name": "initializer",
                                                                    "mountPath": "/workspace"}]}],
                                  "volumes": [{"name": "initializer", "emptyDir": {}}]}}}}},
            ]},
        },
    },
}


def _patch(manager: str, metadata: dict[str, Any] | None, job: dict[str, Any]) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {"replicatedJobs": [job]}}
    if metadata:
        template["metadata"] = metadata
    return {"manager": manager, "trainingRuntimeSpec": {"template": template}}


def _trainjobs(namespace: str) -> list[dict[str, Any]]:
    def job(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainJob",
                "metadata": {"name": name, "namespace": namespace}, "spec": {"suspend": True, **spec}}

    gpu_patch = _patch("kubetrain.test/gpu", None, {"name": "node", "template": {"spec": {"template": {
        "metadata": {"annotations": {"kubetrain.test/phase": "Running"}},
        "spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                 "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}}}}}})
    volume_patch = _patch("kubetrain.test/volumes", {"labels": {"kueue.x-k8s.io/queue-name": "q"},
                                                     "annotations": {"golden/patch": "1"}},
                          {"name": "node", "template": {"spec": {"template": {"spec": {
                              "containers": [{"name": "node", "volumeMounts": [{"name": "data",
                                                                                "mountPath": "/data"}]}],
                              "volumes": [{"name": "data", "emptyDir": {"medium": "Memory"}}]}}}}})
    return [
        job("gpus", {"runtimeRef": {"name": SHIPPED}, "trainer": {
            "image": "ghcr.io/example/train:1.0", "command": ["torchrun", "train.py"], "numNodes": 2,
            "numProcPerNode": 8, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}},
            "runtimePatches": [gpu_patch]}),
        job("cpus", {"runtimeRef": {"name": SHIPPED}, "trainer": {
            "image": "python:3.12", "args": ["--epochs", "2"], "env": [{"name": "SEED", "value": "7"}],
            "resourcesPerNode": {"requests": {"cpu": "2500m"}, "limits": {"memory": "2Gi"}}},
            "runtimePatches": [volume_patch, gpu_patch]}),
        job("bare", {"runtimeRef": {"name": SHIPPED}}),
        job("own-runtime", {"runtimeRef": {"kind": "TrainingRuntime", "name": RUNTIME["metadata"]["name"]},
                            "initializer": {"dataset": {"storageUri": "hf://org/data", "secretRef": {"name": "hf"},
                                                        "env": [{"name": "SPLIT", "value": "train"}]}},
                            "trainer": {"env": [{"name": "FROM_RUNTIME", "value": "2"}],
                                        "resourcesPerNode": {"limits": {"example.com/gpu": "2"}}}}),
    ]


def _pruned(value: Any) -> Any:
    """Without empty mappings and lists: Go's encoders and SSA keep some (`resources: {}`) that mean nothing."""
    if isinstance(value, dict):
        out = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in ({}, [], None)}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def _comparable(jobset: dict[str, Any]) -> dict[str, Any]:
    meta = jobset["metadata"]
    return _pruned({"labels": meta.get("labels"), "annotations": meta.get("annotations"),
                    "ownerReferences": meta.get("ownerReferences"), "spec": jobset["spec"]})


def _get(custom: kubernetes.client.CustomObjectsApi, namespace: str, plural: str, name: str,
         group: tuple[str, str] = (GROUP, VERSION)) -> dict[str, Any] | None:
    try:
        return custom.get_namespaced_custom_object(*group, namespace, plural, name)  # type: ignore[no-any-return]
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


@pytest.mark.controlplane
def test_the_derived_jobset_is_the_one_the_trainer_creates(controlplane, trainer, namespace):
    client = controlplane.api_client()
    custom, core = kubernetes.client.CustomObjectsApi(client), kubernetes.client.CoreV1Api(client)
    server_side_apply(client, {**RUNTIME, "metadata": {**RUNTIME["metadata"], "namespace": namespace}})
    jobs = _trainjobs(namespace)
    for job in jobs:
        server_side_apply(client, job)
    shipped = custom.get_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes", SHIPPED)
    copied = {**TORCH_DISTRIBUTED, "metadata": {"name": f"{SHIPPED}-copy"}}  # kubetrain's, as the server stores it
    copied = custom.create_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes", copied, dry_run="All")
    assert copied["spec"] == shipped["spec"]
    own = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "trainingruntimes", "golden-runtime")
    defined = {("TrainingRuntime", namespace, "golden-runtime"): own}
    elsewhere = f"golden-{uuid.uuid4().hex[:5]}"  # the derived JobSets are dry-run there: same names
    core.create_namespace({"metadata": {"name": elsewhere}})
    try:
        for job in jobs:
            name = job["metadata"]["name"]
            real = wait_for(lambda n=name: _get(custom, namespace, "jobsets", n, JOBSET), f"JobSet {name}")
            stored = _get(custom, namespace, "trainjobs", name)
            assert stored is not None
            runtime = runtime_for(stored, defined)
            assert runtime is not None
            derived = trainjob_jobset(stored, runtime)
            derived["metadata"]["namespace"] = elsewhere
            dry = custom.create_namespaced_custom_object(*JOBSET, elsewhere, "jobsets", derived, dry_run="All")
            assert _comparable(dry) == _comparable(real), name
    finally:
        core.delete_namespace(elsewhere)


def test_patches_merge_named_lists_by_key_and_replace_the_rest():
    base = {"containers": [{"name": "node", "env": [{"name": "A", "value": "1"}], "args": ["x"]}],
            "tolerations": [{"key": "a"}], "nodeSelector": {"zone": "a", "disk": "ssd"}}
    patch = {"containers": [{"name": "node", "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}],
                             "args": ["y"]}, {"name": "sidecar"}],
             "tolerations": [{"key": "b"}], "nodeSelector": {"disk": None, "gpu": "h100"}}
    assert strategic_merge(base, patch) == {
        "containers": [{"name": "node", "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}],
                        "args": ["y"]}, {"name": "sidecar"}],
        "tolerations": [{"key": "b"}], "nodeSelector": {"zone": "a", "gpu": "h100"}}


def _node(jobset: dict[str, Any]) -> dict[str, Any]:
    return jobset["spec"]["replicatedJobs"][-1]["template"]["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def test_numprocpernode_follows_the_node_resources():
    runtime = copy.deepcopy(RUNTIME)

    def procs(trainer: dict[str, Any]) -> str:
        trainjob = {"metadata": {"name": "t", "uid": "u"}, "spec": {"trainer": trainer}}
        env = {e["name"]: e.get("value") for e in _node(trainjob_jobset(trainjob, runtime))["env"]}
        return str(env["PET_NPROC_PER_NODE"])

    assert procs({}) == "1"  # the runtime's cpu: 1
    assert procs({"resourcesPerNode": {"requests": {"cpu": "2500m"}}}) == "3"  # Quantity.Value() rounds up
    assert procs({"resourcesPerNode": {"limits": {"acme.com/GPU": "1", "cpu": "8"}}}) == "auto"
    assert procs({"numProcPerNode": 4, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}}) == "4"


def test_jobset_jobs_are_named_and_labelled_as_jobset_makes_them():
    trainjob = {"metadata": {"name": "t", "uid": "u"}, "spec": {"trainer": {"numNodes": 4}}}
    jobs = dict(jobset_jobs(trainjob_jobset(trainjob, RUNTIME)))
    assert [j["metadata"]["name"] for j in jobs.values()] == ["t-dataset-initializer-0", "t-node-0"]
    assert jobs[1]["spec"]["parallelism"] == jobs[1]["spec"]["completions"] == 4
    assert jobs[1]["spec"]["template"]["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "node"


def test_the_runtime_is_the_files_own_else_the_shipped_torch_distributed():
    def trainjob(ref: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": "t", "namespace": "team"}, "spec": {"runtimeRef": ref}}

    own = {**RUNTIME, "metadata": {"name": "mine", "namespace": "team"}}
    defined = {("TrainingRuntime", "team", "mine"): own}
    assert runtime_for(trainjob({"name": "mine", "kind": "TrainingRuntime"}), defined) is own
    assert runtime_for(trainjob({"name": "torch-distributed"}), defined) is TORCH_DISTRIBUTED
    assert runtime_for(trainjob({"name": "deepspeed-distributed"}), defined) is None  # MPI: not derived
    assert runtime_for(trainjob({"name": "mine"}), defined) is None  # a ClusterTrainingRuntime of that name
    bare = trainjob_jobset({"metadata": {"name": "t", "uid": "u"}, "spec": {}}, TORCH_DISTRIBUTED)
    assert "env" not in _node(bare)  # no spec.trainer: the Torch plugin finds no trainer container
