"""Does the job fit? A pure function over the API's node and pod dicts (no client, no clock).

Free GPUs of a node = allocatable nvidia.com/gpu minus what its non-terminated pods request. Only nodes
the pods may land on count: Ready, not cordoned, matching the nodeSelector, every NoSchedule/NoExecute
taint tolerated. Pods of one job are identical, so packing is exact: a node with F free GPUs holds
F // g pods of g GPUs, and the job fits iff those sum to at least its pod count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubetrain.kube.objects import GPU_RESOURCE as GPU
from kubetrain.kube.objects import meta_of, status_of

BLOCKING_EFFECTS = {"NoSchedule", "NoExecute"}


@dataclass(frozen=True)
class FitRequest:
    pods: int
    gpus_per_pod: int
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    resource: str = GPU


@dataclass(frozen=True)
class NodeFit:
    name: str
    allocatable: int
    free: int
    excluded: str | None  # why the job's pods cannot land here; None if they can


@dataclass(frozen=True)
class FitResult:
    fits: bool
    message: str
    hint: str
    room: int  # how many of the job's pods the eligible nodes can hold now
    nodes: list[NodeFit]
    no_capacity: bool = False  # no node of the cluster has any of the resource
    never: bool = False  # would not fit even on an idle cluster: waiting cannot help

    @property
    def not_now(self) -> bool:
        """Fits an idle cluster but not the current one: the pods would queue until GPUs free up."""
        return not self.fits and not self.never


def quantity(value: Any) -> int:
    """An extended-resource quantity (always an integer count); junk counts as 0."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def pod_request(pod: dict[str, Any], resource: str = GPU) -> int:
    """Effective request: max(sum of containers, largest init container); requests default to limits."""
    spec = pod.get("spec") or {}

    def one(container: dict[str, Any]) -> int:
        res = container.get("resources") or {}
        return quantity((res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource, 0)))

    main = sum(one(c) for c in spec.get("containers") or [])
    init = max((one(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def used_by_node(pods: list[dict[str, Any]], resource: str = GPU) -> dict[str, int]:
    """resource requested per node by pods bound there and not terminated."""
    used: dict[str, int] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = status_of(pod).get("phase")
        if node and phase not in ("Succeeded", "Failed"):
            used[node] = used.get(node, 0) + pod_request(pod, resource)
    return used


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """Kubernetes' matching: effect (empty = any), key (empty + Exists = any), value unless Exists."""
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        operator = tol.get("operator") or "Equal"
        if not tol.get("key"):
            if operator == "Exists":
                return True
            continue
        if tol["key"] != taint.get("key"):
            continue
        if operator == "Exists" or (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def exclusion(node: dict[str, Any], request: FitRequest) -> str | None:
    """Why the job's pods cannot be scheduled on `node`, or None."""
    spec = node.get("spec") or {}
    labels = meta_of(node).get("labels") or {}
    if spec.get("unschedulable"):
        return "cordoned"
    ready = [c for c in status_of(node).get("conditions") or [] if c.get("type") == "Ready"]
    if not ready or ready[0].get("status") != "True":
        return "NotReady"
    for key, value in request.node_selector.items():
        if labels.get(key) != value:
            return f"nodeSelector {key}={value} does not match"
    for taint in spec.get("taints") or []:
        if taint.get("effect") in BLOCKING_EFFECTS and not tolerates(request.tolerations, taint):
            return f"taint {_taint_text(taint)} not tolerated"
    return None


def _taint_text(taint: dict[str, Any]) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key')}{value}:{taint.get('effect')}"


def node_fits(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], request: FitRequest) -> list[NodeFit]:
    used = used_by_node(pods, request.resource)
    out = []
    for node in nodes:
        name = meta_of(node).get("name", "?")
        allocatable = quantity((status_of(node).get("allocatable") or {}).get(request.resource, 0))
        out.append(NodeFit(name, allocatable, max(0, allocatable - used.get(name, 0)), exclusion(node, request)))
    return out


def fit(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], request: FitRequest) -> FitResult:
    """Can `request.pods` pods of `request.gpus_per_pod` GPUs each be placed now? With an explanation."""
    per_node = node_fits(nodes, pods, request)
    g, res = request.gpus_per_pod, request.resource
    if g <= 0:
        return FitResult(True, f"no {res} requested", "", request.pods, per_node)
    if not any(n.allocatable > 0 for n in per_node):
        return FitResult(False, f"the cluster has no {res} capacity: no node advertises allocatable {res}",
                         "is the NVIDIA device plugin (or GPU operator) running on the GPU nodes? "
                         "Check Allocatable in `kubectl describe node`; or add GPU nodes", 0, per_node, True, True)
    eligible = [n for n in per_node if n.excluded is None and n.allocatable > 0]
    big_enough = [n for n in eligible if n.free >= g]
    room = sum(n.free // g for n in eligible)
    where = _where(request)
    if room >= request.pods:
        return FitResult(True, f"{request.pods} pod(s) × {g} {res} fit: {len(big_enough)} eligible node(s) "
                         f"have ≥ {g} free{where}", "", room, per_node)
    if sum(n.allocatable // g for n in eligible) < request.pods:
        return _never(request, per_node, eligible, room)
    if not big_enough:
        message = f"needs {request.pods} pods × {g} {res}; no eligible node has ≥ {g} free{where}"
    elif room == len(big_enough):
        message = (f"needs {request.pods} pods × {g} {res}; only {len(big_enough)} eligible "
                   f"node{'s' if len(big_enough) != 1 else ''} have ≥ {g} free{where}")
    else:
        message = (f"needs {request.pods} pods × {g} {res}; eligible nodes have room for only {room} "
                   f"({len(big_enough)} node(s) with ≥ {g} free){where}")
    return FitResult(False, message, _explain(per_node, g), room, per_node)


def _never(request: FitRequest, per_node: list[NodeFit], eligible: list[NodeFit], room: int) -> FitResult:
    """Even with every eligible node idle the job does not fit: say by how much, and what can help."""
    g, res, where = request.gpus_per_pod, request.resource, _where(request)
    largest = max((n.allocatable for n in eligible), default=0)
    idle_room = sum(n.allocatable // g for n in eligible)
    if largest < g:
        message = (f"can never fit: each pod needs {g} {res} but the largest eligible node has {largest}"
                   f"{where}")
        action = f"lower spec.gpusPerNode to at most {largest}" if largest else "fix the placement"
    else:
        message = (f"can never fit: {request.pods} pods × {g} {res}, but the eligible nodes hold at most "
                   f"{idle_room} such pod(s) even when idle{where}")
        action = f"lower spec.nodes to at most {idle_room}" if idle_room else "fix the placement"
    excluded = [f"{n.name}: {n.excluded}" for n in per_node if n.excluded and n.allocatable > 0]
    detail = ("; ".join(excluded[:6]) + ". ") if excluded else ""
    return FitResult(False, message, f"{detail}{action}, add GPU nodes, or --skip-fit if an autoscaler adds "
                     "them", room, per_node, never=True)


def holders(pods: list[dict[str, Any]], nodes: list[NodeFit], resource: str = GPU) -> str:
    """Who holds the GPUs of the busy eligible nodes: 'gpu-0: ml/bert (2 pod(s), 16 GPUs); ...'."""
    busy = {n.name for n in nodes if n.excluded is None and n.allocatable > 0 and n.free < n.allocatable}
    per_node: dict[str, dict[str, list[int]]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        held = pod_request(pod, resource)
        if node in busy and held and status_of(pod).get("phase") not in ("Succeeded", "Failed"):
            owner = per_node.setdefault(node, {}).setdefault(_owner(pod), [0, 0])
            owner[0], owner[1] = owner[0] + 1, owner[1] + held
    parts = []
    for node in sorted(per_node):
        owners = ", ".join(f"{name} ({count} pod(s), {gpus} GPU)" for name, (count, gpus) in per_node[node].items())
        parts.append(f"{node}: {owners}")
    return "; ".join(parts[:6]) + ("; ..." if len(parts) > 6 else "")


OWNER_LABELS = ("training.kubeflow.org/job-name", "jobset.sigs.k8s.io/jobset-name", "app.kubernetes.io/instance")


def _owner(pod: dict[str, Any]) -> str:
    """namespace/job for a training pod, else namespace/owner-name, else namespace/pod."""
    meta = meta_of(pod)
    labels = meta.get("labels") or {}
    namespace = meta.get("namespace", "?")
    for label in OWNER_LABELS:
        if labels.get(label):
            return f"{namespace}/{labels[label]}"
    owners = meta.get("ownerReferences") or []
    return f"{namespace}/{owners[0].get('name') if owners else meta.get('name', '?')}"


def _where(request: FitRequest) -> str:
    if not request.node_selector:
        return ""
    return " (" + ", ".join(f"{k}={v}" for k, v in sorted(request.node_selector.items())) + ")"


def _explain(per_node: list[NodeFit], g: int) -> str:
    """Which nodes were left out and why, and which are too busy: what to change."""
    parts = []
    for node in per_node:
        if node.allocatable == 0:  # CPU nodes are beside the point
            continue
        if node.excluded:
            parts.append(f"{node.name}: {node.excluded}")
        elif node.free < g:
            parts.append(f"{node.name}: {node.free}/{node.allocatable} free")
    detail = "; ".join(parts[:6]) + ("; ..." if len(parts) > 6 else "")
    action = ("the pods will wait (Pending) until GPUs free up; or lower spec.nodes or spec.gpusPerNode, "
              "or --wait-for-capacity to submit only once they fit")
    return f"{detail}. {action}" if detail else action
