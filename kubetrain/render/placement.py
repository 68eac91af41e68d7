"""Per-cloud GPU placement profiles: node labels, tolerations and runtime class."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubetrain.jobspec.model import JobSpec
from kubetrain.kube.objects import GPU_RESOURCE

# Label whose value names the GPU model, per profile (None: the profile has no such label).
GPU_TYPE_LABEL: dict[str, str | None] = {
    "gke": "cloud.google.com/gke-accelerator",
    "eks": "eks.amazonaws.com/instance-gpu-name",
    "eks-karpenter": "karpenter.k8s.aws/instance-gpu-name",
    "generic": "nvidia.com/gpu.product",
    "aks": None,
    "kind": None,
    "none": None,
    "auto": None,
}
# EKS and AKS add no toleration for the GPU taint automatically (GKE's admission controller does).
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
AKS_TOLERATION = {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}


@dataclass(frozen=True)
class PodPlacement:
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    runtime_class: str | None = None


def placement_for(spec: JobSpec, cloud: str | None = None) -> PodPlacement:
    """The pod's placement for `cloud` (default: the spec's profile); the user's settings win."""
    profile = cloud or spec.placement.cloud
    selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    runtime_class = None
    if spec.gpusPerNode > 0:
        tolerations.append(GPU_TOLERATION)
        label = GPU_TYPE_LABEL.get(profile)
        if label and spec.placement.gpuType:
            selector[label] = spec.placement.gpuType
        if profile == "aks":
            tolerations.append(AKS_TOLERATION)
            selector["kubernetes.azure.com/accelerator"] = "nvidia"
        if profile == "kind":
            selector["nvidia.com/gpu.present"] = "true"
            runtime_class = "nvidia"
    selector.update(spec.placement.nodeSelector)
    for toleration in spec.placement.tolerations:
        item = toleration.model_dump(exclude_none=True)
        if item not in tolerations:
            tolerations.append(item)
    return PodPlacement(dict(sorted(selector.items())), tolerations, runtime_class)
