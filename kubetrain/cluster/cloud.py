"""Which cloud profile a cluster's nodes look like, and what its GPU nodes offer. Pure functions over Node
objects as the API's JSON (dicts); no kubernetes import, so `submit` can resolve `placement.cloud: auto`.

    from kubetrain.cluster.cloud import detect_cloud
    profile = detect_cloud(node_dicts)   # "gke" | "eks" | "eks-karpenter" | "aks" | "kind" | "generic" | None
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubetrain.kube.objects import GPU_RESOURCE, meta_of, status_of
from kubetrain.render.placement import GPU_TYPE_LABEL

# Labels naming a node's GPU model, most specific first, with the profile that uses each.
GPU_MODEL_LABELS = (
    ("cloud.google.com/gke-accelerator", "GKE"),
    ("eks.amazonaws.com/instance-gpu-name", "EKS"),
    ("karpenter.k8s.aws/instance-gpu-name", "Karpenter"),
    ("kubernetes.azure.com/accelerator", "AKS"),
    ("nvidia.com/gpu.product", "GPU Feature Discovery"),
)
GPU_MARKER_LABELS = ("nvidia.com/gpu.present", "nvidia.com/gpu.count", "nvidia.com/gpu.deploy.device-plugin")
GFD_MEMORY = "nvidia.com/gpu.memory"
PROVIDER_PREFIX = {"gce://": "gke", "aws://": "eks", "azure://": "aks", "kind://": "kind"}


def labels_of(node: Mapping[str, Any]) -> dict[str, str]:
    return dict(meta_of(node).get("labels") or {})


def allocatable_gpus(node: Mapping[str, Any]) -> int:
    value = (status_of(node).get("allocatable") or {}).get(GPU_RESOURCE)
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def has_gpu_labels(node: Mapping[str, Any]) -> bool:
    labels = labels_of(node)
    return any(k in labels for k, _ in GPU_MODEL_LABELS) or any(k in labels for k in GPU_MARKER_LABELS)


def is_gpu_node(node: Mapping[str, Any]) -> bool:
    """Allocatable nvidia.com/gpu, or labels saying it has GPUs (then 0 allocatable is a device-plugin problem)."""
    capacity = (status_of(node).get("capacity") or {}).get(GPU_RESOURCE)
    return allocatable_gpus(node) > 0 or has_gpu_labels(node) or str(capacity or "0") != "0"


def gpu_model(node: Mapping[str, Any]) -> tuple[str, str] | None:
    """(model, label it came from) from the most specific label present; GFD memory appended when known."""
    labels = labels_of(node)
    for key, _source in GPU_MODEL_LABELS:
        if labels.get(key):
            model = labels[key]
            if key == "nvidia.com/gpu.product" and labels.get(GFD_MEMORY):
                model = f"{model} ({labels[GFD_MEMORY]} MiB)"
            return model, key
    return None


def taints_of(node: Mapping[str, Any]) -> list[str]:
    """'key=value:Effect' strings, like kubectl describe."""
    out = []
    for taint in (node.get("spec") or {}).get("taints") or []:
        value = f"={taint['value']}" if taint.get("value") else ""
        out.append(f"{taint.get('key')}{value}:{taint.get('effect')}")
    return out


def _profile_of(node: Mapping[str, Any]) -> str | None:
    labels = labels_of(node)
    if any(k.startswith("cloud.google.com/") for k in labels):
        return "gke"
    if GPU_TYPE_LABEL["eks"] in labels or labels.get("eks.amazonaws.com/compute-type") == "auto":
        return "eks"
    if GPU_TYPE_LABEL["eks-karpenter"] in labels:
        return "eks-karpenter"
    if any(k.startswith("kubernetes.azure.com/") for k in labels):
        return "aks"
    provider = str((node.get("spec") or {}).get("providerID") or "")
    for prefix, profile in PROVIDER_PREFIX.items():
        if provider.startswith(prefix):
            return "eks-karpenter" if profile == "eks" and any(k.startswith("karpenter.") for k in labels) \
                else profile
    if GPU_TYPE_LABEL["generic"] in labels:
        return "generic"
    return None


def detect_cloud(nodes: Iterable[Mapping[str, Any]]) -> str | None:
    """The placement profile for `placement.cloud: auto`: decided by the GPU nodes when there are any
    (the majority wins), else by all nodes; None when nothing is recognised (then use `none`)."""
    nodes = list(nodes)
    gpu_nodes = [n for n in nodes if is_gpu_node(n)]
    votes: dict[str, int] = {}
    for node in gpu_nodes or nodes:
        profile = _profile_of(node)
        if profile:
            votes[profile] = votes.get(profile, 0) + 1
    if not votes:
        return None
    return max(sorted(votes), key=lambda p: votes[p])


@dataclass(frozen=True)
class GpuGroup:
    """GPU nodes that look alike: same model, allocatable count and taints."""

    model: str | None
    label: str | None
    allocatable: int
    taints: tuple[str, ...]
    nodes: tuple[str, ...]


def gpu_groups(nodes: Iterable[Mapping[str, Any]]) -> list[GpuGroup]:
    groups: dict[tuple[str | None, str | None, int, tuple[str, ...]], list[str]] = {}
    for node in nodes:
        if not is_gpu_node(node):
            continue
        model = gpu_model(node)
        key = (model[0] if model else None, model[1] if model else None, allocatable_gpus(node),
               tuple(taints_of(node)))
        groups.setdefault(key, []).append(str(meta_of(node).get("name", "")))
    return [GpuGroup(m, lbl, alloc, taints, tuple(sorted(names)))
            for (m, lbl, alloc, taints), names in sorted(groups.items(), key=_group_order)]


def _group_order(item: tuple[tuple[str | None, str | None, int, tuple[str, ...]], list[str]]) -> tuple[Any, ...]:
    (model, label, allocatable, taints), _ = item
    return model or "", label or "", -allocatable, len(taints), taints
