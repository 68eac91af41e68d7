"""GPUs through Dynamic Resource Allocation (resource.k8s.io/v1): the claim templates and the pods' claims.

Every replica type gets its own ResourceClaimTemplate (`<job>-<replica>-gpus`); the resourceclaim controller
makes one ResourceClaim per pod from it, the scheduler allocates devices of the DeviceClass that pass the
selectors, and the DRA driver's kubelet plugin prepares them. Kubeflow Trainer v2.3 has no
`resourceClaimsPerNode` and its `runtimePatches` cannot add pod `resourceClaims`, so a TrainJob runs on a
TrainingRuntime derived from torch-distributed that claims the template (manifests/trainingruntime.yaml.j2);
the container's claim goes through `resourcesPerNode.claims`.
"""

from __future__ import annotations

from typing import Any

from kubetrain.jobspec.model import JobSpec, TrainingJob

CLAIM = "gpus"  # the pod's resourceClaims entry, the container's claim and the template's one request
DRA, PLUGIN, AUTO = "dra", "plugin", "auto"


def gpu_via(spec: JobSpec, resolved: str | None = None) -> str:
    """plugin or dra: `auto` is what submit found on the cluster (`resolved`), else plugin (offline)."""
    via = spec.gpu_via
    if via == AUTO:
        return resolved if resolved in (DRA, PLUGIN) else PLUGIN
    return via


def replica_types(spec: JobSpec, target: str) -> list[str]:
    """The replica types whose pods claim GPUs, lower-case as in their pods' names."""
    if target == "trainjob":
        return ["node"]
    types = [] if spec.elastic else ["master"]
    if spec.elastic or spec.nodes > 1:
        types.append("worker")
    return types


def template_name(job_name: str, replica: str) -> str:
    return f"{job_name}-{replica}-{CLAIM}"


def runtime_name(job_name: str) -> str:
    """The TrainingRuntime a DRA TrainJob runs on."""
    return f"{job_name}-dra"


def device_request(spec: JobSpec) -> dict[str, Any]:
    """The template's one request: exactly gpusPerNode devices of the class that pass every selector."""
    assert spec.gpus is not None
    exactly: dict[str, Any] = {"deviceClassName": spec.gpus.deviceClass, "allocationMode": "ExactCount",
                               "count": spec.gpusPerNode}
    if spec.gpus.selectors:
        exactly["selectors"] = [{"cel": {"expression": expression}} for expression in spec.gpus.selectors]
    return {"name": CLAIM, "exactly": exactly}


def pod_claims(job: TrainingJob, replica: str) -> list[dict[str, str]]:
    return [{"name": CLAIM, "resourceClaimTemplateName": template_name(job.metadata.name, replica)}]
