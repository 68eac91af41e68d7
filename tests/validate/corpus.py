"""The parity corpus: valid and broken PyTorchJobs and TrainJobs, each with the real server's verdict.

`server` is what `kubectl create --dry-run=server` answers with the training-operator v1.9.4 webhook (and,
for TrainJobs, Trainer v2.3.0 + JobSet) installed; tests/validate/test_parity.py checks it against a real
control plane. `path` is the field `kubetrain validate` must name (None: valid offline). A case the server
accepts but kubetrain rejects must name the later stage that would fail (the operator, the kubelet, torchrun).
Every rule has a case on each side: its broken case here, and the valid bases (which exercise every rule's
passing branch) plus the explicit valid edge cases.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

MANIFESTS = Path(__file__).parent / "manifests"
ACCEPT, REJECT = "accept", "reject"
Mutation = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Case:
    id: str
    base: str  # a file under manifests/
    mutate: Mutation
    server: str  # ACCEPT or REJECT
    path: str | None  # the field kubetrain reports, None when it accepts

    def manifest(self, name: str | None = None, namespace: str | None = None) -> dict[str, Any]:
        job: dict[str, Any] = copy.deepcopy(_bases()[self.base])
        if name:
            job["metadata"]["name"] = name
        if namespace:
            job["metadata"]["namespace"] = namespace
        self.mutate(job)
        return job


def _bases() -> dict[str, dict[str, Any]]:
    return {name: yaml.safe_load((MANIFESTS / name).read_text()) for name in
            ("simple.yaml", "elastic-echo.yaml", "trainjob.yaml")}


def replica(job: dict[str, Any], role: str) -> dict[str, Any]:
    return job["spec"]["pytorchReplicaSpecs"][role]  # type: ignore[no-any-return]


def container(job: dict[str, Any], role: str = "Master") -> dict[str, Any]:
    return replica(job, role)["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def _set(*keys: str | int, value: Any) -> Mutation:
    def mutate(job: dict[str, Any]) -> None:
        target = job
        for key in keys[:-1]:
            target = target.setdefault(key, {}) if isinstance(key, str) else target[key]
        target[keys[-1]] = value
    return mutate


def _resources(resources: dict[str, Any]) -> Mutation:
    return lambda job: container(job).__setitem__("resources", resources)


def _nothing(job: dict[str, Any]) -> None:
    pass


def _no_worker(job: dict[str, Any]) -> None:
    job["spec"]["pytorchReplicaSpecs"]["Master"] = job["spec"]["pytorchReplicaSpecs"].pop("Worker")
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 1


def _both_nproc(job: dict[str, Any]) -> None:
    job["spec"]["nprocPerNode"] = "1"
    job["spec"]["elasticPolicy"]["nProcPerNode"] = 1


def _no_image(job: dict[str, Any]) -> None:
    del container(job)["image"]


def _trainer_env(names: list[str], procs: Any = 1) -> Mutation:
    def mutate(job: dict[str, Any]) -> None:
        job["spec"]["trainer"]["env"] = [{"name": n, "value": "1"} for n in names]
        if procs is not None:
            job["spec"]["trainer"]["numProcPerNode"] = procs
    return mutate


PM = "spec.pytorchReplicaSpecs.Master"
C0 = f"{PM}.template.spec.containers[0]"
CASES = [
    # valid: the bases and edge cases right at each rule's limit
    Case("pytorchjob", "simple.yaml", _nothing, ACCEPT, None),
    Case("elastic", "elastic-echo.yaml", _nothing, ACCEPT, None),
    Case("trainjob", "trainjob.yaml", _nothing, ACCEPT, None),
    Case("quantity-integer", "simple.yaml", _resources({"limits": {"memory": 34359738368, "cpu": 2}}), ACCEPT, None),
    Case("requests-equal-limits", "simple.yaml", _resources({"requests": {"memory": "1Gi", "cpu": "500m"},
                                                             "limits": {"memory": "1Gi", "cpu": "0.5"}}), ACCEPT, None),
    Case("name-63-with-suffix", "simple.yaml", _set("metadata", "name", value="a" * 54), ACCEPT, None),
    Case("elastic-min-equals-max", "elastic-echo.yaml", _set("spec", "elasticPolicy", "minReplicas", value=2),
         ACCEPT, None),
    Case("managed-by-kueue", "simple.yaml", _set("spec", "runPolicy", "managedBy", value="kueue.x-k8s.io/multikueue"),
         ACCEPT, None),
    Case("trainer-env-other", "trainjob.yaml", _trainer_env(["PET_OTHER", "NCCL_DEBUG"]), ACCEPT, None),
    # rejected by the API server's schema (patterns restored) or CEL rules
    Case("quantity-pattern", "simple.yaml", _resources({"limits": {"memory": "32GB"}}), REJECT,
         f"{C0}.resources.limits.memory"),
    Case("trainjob-managed-by", "trainjob.yaml", _set("spec", "managedBy", value="someone"), REJECT, "spec.managedBy"),
    Case("trainjob-name-too-long", "trainjob.yaml", _set("metadata", "name", value="t" * 64), REJECT, ""),
    # rejected by the training-operator v1.9.4 webhook
    Case("name-dns1035", "simple.yaml", _set("metadata", "name", value="1job"), REJECT, "metadata.name"),
    Case("worker-replicas-0", "simple.yaml", _set("spec", "pytorchReplicaSpecs", "Worker", "replicas", value=0),
         REJECT, "spec.pytorchReplicaSpecs.Worker.replicas"),
    Case("image-missing", "simple.yaml", _no_image, REJECT, f"{C0}.image"),
    Case("master-replicas-missing", "simple.yaml", lambda job: replica(job, "Master").pop("replicas"), REJECT,
         f"{PM}.replicas"),
    Case("elastic-without-worker", "elastic-echo.yaml", _no_worker, REJECT, "spec.pytorchReplicaSpecs.Worker"),
    Case("nproc-twice", "elastic-echo.yaml", _both_nproc, REJECT, "spec.elasticPolicy.nProcPerNode"),
    Case("managed-by", "simple.yaml", _set("spec", "runPolicy", "managedBy", value="me"), REJECT,
         "spec.runPolicy.managedBy"),
    # rejected by the Trainer v2.3.0 webhook
    Case("trainer-reserved-env", "trainjob.yaml", _trainer_env(["PET_NNODES"]), REJECT, "spec.trainer.env"),
    Case("trainer-reserved-env-no-procs", "trainjob.yaml", _trainer_env(["PET_MASTER_PORT"], procs=None), REJECT,
         "spec.trainer.env"),
    Case("trainer-procs-string", "trainjob.yaml", _set("spec", "trainer", "numProcPerNode", value="gpu"), REJECT,
         "spec.trainer.numProcPerNode"),
    # accepted by the server, refused offline because a later stage fails (the message names it)
    Case("name-too-long-with-suffix", "simple.yaml", _set("metadata", "name", value="a" * 55), ACCEPT,
         "metadata.name"),
    Case("negative-memory", "simple.yaml", _resources({"limits": {"memory": "-1Gi"}}), ACCEPT,
         f'{C0}.resources.limits.memory'),
    Case("requests-over-limits", "simple.yaml", _resources({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}),
         ACCEPT, f"{C0}.resources.requests.cpu"),
    Case("elastic-min-over-max", "elastic-echo.yaml", _set("spec", "elasticPolicy", "minReplicas", value=3), ACCEPT,
         "spec.elasticPolicy.minReplicas"),
    Case("clean-pod-policy", "simple.yaml", _set("spec", "runPolicy", "cleanPodPolicy", value="Sometimes"), ACCEPT,
         "spec.runPolicy.cleanPodPolicy"),
    Case("rdzv-backend", "elastic-echo.yaml", _set("spec", "elasticPolicy", "rdzvBackend", value="zookeeper"),
         ACCEPT, "spec.elasticPolicy.rdzvBackend"),
]
