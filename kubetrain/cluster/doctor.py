"""`kubetrain doctor`: is this cluster ready for GPU training? Each check is ok / warn / fail with a hint.

The cluster is read once (version, discovery, nodes, DaemonSets, operator Deployments, access reviews);
the verdicts are pure functions of what was read (kubetrain.cluster.cloud for nodes), tested on their own.
A list the user may not read becomes a warning, never an error: the report is for any user.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kubetrain.checks import FAIL, OK, WARN, Check
from kubetrain.cluster.cloud import allocatable_gpus, detect_cloud, gpu_groups, has_gpu_labels, is_gpu_node
from kubetrain.cluster.webhooks import webhook_checks
from kubetrain.jobs import devices as dra
from kubetrain.jobs import targets
from kubetrain.jobs.targets import Target
from kubetrain.kube import errors, watch
from kubetrain.kube.access import can_i
from kubetrain.kube.connection import Connection
from kubetrain.kube.errors import CRD_HINT, api_message, cluster_errors
from kubetrain.kube.objects import meta_of, status_of
from kubetrain.kube.rest import Rest, path_of

JOBSET = ("jobset.x-k8s.io", "v1alpha2", "jobsets", (("jobset-system", "jobset-controller-manager"),))
QUEUES = (("Kueue", "kueue.x-k8s.io", "v1beta1", "clusterqueues"),
          ("Volcano", "scheduling.volcano.sh", "v1beta1", "queues"))
DEVICE_PLUGIN_NAMES = ("nvidia-device-plugin", "nvidia-gpu-device-plugin", "gpu-device-plugin")
SHOWN_NODES = 5


@dataclass
class Report:
    context: str | None
    server: str
    namespace: str
    cloud: str | None = None
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.status != FAIL for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {"context": self.context, "server": self.server, "namespace": self.namespace, "cloud": self.cloud,
                "ok": self.ok, "checks": [as_json(c) for c in self.checks]}


def as_json(check: Check) -> dict[str, str]:
    """A check in `doctor -o json`, its name under "topic" (server, training, gpu, device-plugin, ...)."""
    return {"status": check.status, "topic": check.name, "message": check.message, "hint": check.hint}


class Unreadable(Exception):
    """A list or read the current user is not allowed (reported as a warning, never raised)."""


def run_doctor(conn: Connection, namespace: str, cpu: bool = False) -> Report:
    """Every check, in report order. Unreachable cluster / rejected credentials raise a one-line ClusterError."""
    rest = conn.rest
    report = Report(conn.context, conn.server, namespace)
    with cluster_errors("read the server version", report.server):
        version = rest.get("/version")
    report.checks.append(Check("server", OK, f"Kubernetes {version.get('gitVersion')} at {report.server}"))
    with cluster_errors("discover the cluster's APIs", report.server):
        installed = [t for t in targets.AUTO_ORDER if targets.served(rest, t)]
        report.checks += training_checks(installed, targets.serves(rest, *JOBSET[:3]),
                                         lambda t: find_operator(rest, t.operators))
        nodes = _list(rest, "/api/v1/nodes")
        daemonsets = _list(rest, "/apis/apps/v1/daemonsets")
        inventory = read_dra(rest)
        report.checks += cpu_check(nodes) if cpu else gpu_checks(nodes, daemonsets, inventory)
        report.cloud, cloud_check = cloud_profile(nodes)
        report.checks.append(cloud_check)
        report.checks += queue_checks(rest)
        report.checks += rbac_checks(rest, namespace, installed)
        report.checks += webhook_checks(conn.rest, namespace, installed)
    return report


def list_node_dicts(conn: Connection) -> list[dict[str, Any]] | None:
    """Every Node as a dict, or None when the user may not list nodes (for `placement.cloud: auto`)."""
    with cluster_errors("list nodes", conn.server):
        nodes = _list(conn.rest, "/api/v1/nodes")
    return None if isinstance(nodes, Unreadable) else nodes


def read_dra(rest: Rest) -> dra.Inventory | Unreadable | None:
    """DeviceClasses, ResourceSlices and ResourceClaims; None when resource.k8s.io/v1 is not served."""
    try:
        return dra.read_inventory(rest) if dra.served(rest) else None
    except errors.Forbidden as exc:
        return Unreadable(api_message(exc))


def _list(rest: Rest, path: str, **query: Any) -> list[dict[str, Any]] | Unreadable:
    try:
        items, _ = watch.list_objects(watch.rest_list(rest, path), **query)
    except errors.Forbidden as exc:
        return Unreadable(api_message(exc))
    return items


# ---- training APIs and their operators ------------------------------------------------------------------
def find_operator(rest: Rest, where: tuple[tuple[str, str], ...]) -> dict[str, Any] | Unreadable | None:
    """The operator's Deployment: at its usual place, else a Deployment of that name in any namespace."""
    for namespace, name in where:
        with contextlib.suppress(errors.Forbidden, errors.NotFound):
            return rest.get(path_of("apps", "v1", "deployments", namespace, name))
    names = sorted({name for _, name in where})
    items: list[dict[str, Any]] = []
    for name in names:
        found_items = _list(rest, "/apis/apps/v1/deployments", field_selector=f"metadata.name={name}")
        if isinstance(found_items, Unreadable):
            return found_items
        items += found_items
    return items[0] if items else None


def deployment_health(deployment: dict[str, Any]) -> tuple[bool, str]:
    meta, spec, status = (deployment.get(k) or {} for k in ("metadata", "spec", "status"))
    want, ready = int(spec.get("replicas", 1) or 0), int(status.get("readyReplicas") or 0)
    available = any(c.get("type") == "Available" and c.get("status") == "True" for c in status.get("conditions") or [])
    where = f"{meta.get('namespace')}/{meta.get('name')}"
    return want > 0 and ready >= want and available, f"Deployment {where} {ready}/{want} ready"


def training_checks(installed: list[Target], jobset: bool,
                    operator_of: Callable[[Target], dict[str, Any] | Unreadable | None]) -> list[Check]:
    checks = []
    if not installed:
        checks.append(Check("training", FAIL, "neither PyTorchJob (kubeflow.org/v1) nor TrainJob "
                            "(trainer.kubeflow.org/v1alpha1) is installed", CRD_HINT))
    for target in targets.AUTO_ORDER:
        if target not in installed:
            if installed:
                checks.append(Check("training", WARN, f"{target.kind} ({target.api_version}) not installed",
                                    f"target: {target.name} will not work here; target: auto uses "
                                    f"{installed[0].kind}"))
            continue
        checks.append(_operator_check(target, operator_of(target)))
        if target is targets.TRAINJOB and not jobset:
            checks.append(Check("training", FAIL, "TrainJob is installed but JobSet (jobset.x-k8s.io) is not",
                                "install JobSet: Kubeflow Trainer v2 runs every TrainJob as a JobSet"))
    return checks


def _operator_check(target: Target, deployment: dict[str, Any] | Unreadable | None) -> Check:
    served = f"{target.kind} ({target.api_version}) served"
    if isinstance(deployment, Unreadable):
        return Check("training", WARN, f"{served}; cannot check {target.operator_name}: {deployment}")
    if deployment is None:
        names = ", ".join(f"{ns}/{name}" for ns, name in target.operators)
        return Check("training", WARN, f"{served}; no {target.operator_name} Deployment found (looked for {names})",
                     "jobs are accepted but nothing runs them unless the operator runs elsewhere: "
                     "kubectl get deploy -A | grep -i -e training -e trainer")
    healthy, text = deployment_health(deployment)
    if healthy:
        return Check("training", OK, f"{served}; {target.operator_name}: {text}")
    ns, name = deployment["metadata"]["namespace"], deployment["metadata"]["name"]
    return Check("training", FAIL, f"{served}; {target.operator_name} not ready: {text}",
                 f"kubectl -n {ns} describe deployment {name}; kubectl -n {ns} logs deployment/{name}")


# ---- GPUs ---------------------------------------------------------------------------------------------------
def _names(names: tuple[str, ...] | list[str]) -> str:
    shown = ", ".join(names[:SHOWN_NODES])
    return shown + (f" and {len(names) - SHOWN_NODES} more" if len(names) > SHOWN_NODES else "")


def gpu_checks(nodes: list[dict[str, Any]] | Unreadable, daemonsets: list[dict[str, Any]] | Unreadable,
               inventory: dra.Inventory | Unreadable | None = None) -> list[Check]:
    if isinstance(nodes, Unreadable):
        return [Check("gpu", WARN, f"cannot list nodes ({nodes}): GPU checks skipped",
                      "ask for cluster-wide list on nodes, or run kubetrain doctor as a cluster admin")]
    # Where DRA is served, say which mechanism hands out GPUs; with DRA only, the device plugin's checks are moot.
    mechanism = [] if inventory is None else [mechanism_check(nodes, inventory)]
    if isinstance(inventory, dra.Inventory) and inventory.devices and not any(allocatable_gpus(n) for n in nodes):
        return mechanism
    checks = [_capacity(nodes)]
    for group in gpu_groups(nodes):
        checks.append(_group_check(group))
    not_ready = [n["metadata"]["name"] for n in nodes if is_gpu_node(n) and not _ready(n)]
    if not_ready:
        checks.append(Check("gpu", WARN, f"GPU node(s) not Ready or cordoned: {_names(not_ready)}",
                            "kubectl describe node <name>"))
    checks += device_plugin_checks(nodes, daemonsets)
    return checks + mechanism


def mechanism_check(nodes: list[dict[str, Any]], inventory: dra.Inventory | Unreadable | None) -> Check:
    """Which way the cluster hands out GPUs: the device plugin's nvidia.com/gpu, DRA's DeviceClasses and
    ResourceSlices, or both; and so which `gpus.via` works here."""
    plugin_nodes = [n for n in nodes if allocatable_gpus(n) > 0]
    plugin = (f"the device plugin ({sum(allocatable_gpus(n) for n in plugin_nodes)} nvidia.com/gpu on "
              f"{len(plugin_nodes)} node(s))") if plugin_nodes else ""
    if isinstance(inventory, Unreadable):
        return Check("gpu-mechanism", WARN, f"GPUs through {plugin or 'no device plugin'}; cannot read DRA objects "
                     f"({inventory})", "ask for list on deviceclasses, resourceslices and resourceclaims "
                     "(resource.k8s.io)")
    offered = bool(inventory and inventory.devices)
    if inventory is not None and (inventory.classes or offered):
        nodes_with = len({d.node for d in inventory.devices if d.node})
        classes = ", ".join(sorted(inventory.classes)) or "none"
        draw = (f"DRA (DeviceClasses {classes}; {len(inventory.devices)} device(s) on {nodes_with} node(s), "
                f"{len(inventory.free(inventory.devices))} free)")
    else:
        draw = ""
    offers = " and ".join(p for p in (plugin, draw) if p)
    if plugin and offered:
        return Check("gpu-mechanism", OK, f"GPUs through {offers}", "spec.gpus.via: plugin or dra both work; "
                     "auto picks dra where the DeviceClass exists")
    if offered:
        return Check("gpu-mechanism", OK, f"GPUs through {offers} only", "set spec.gpus.via: dra (or auto)")
    if plugin:
        hint = ("DeviceClasses exist but no ResourceSlice publishes a device: is the DRA driver running?"
                if draw else "spec.gpus.via: plugin (the default)")
        return Check("gpu-mechanism", OK if not draw else WARN, f"GPUs through {offers}", hint)
    if draw:
        return Check("gpu-mechanism", WARN, f"no GPU offered: {draw}",
                     "no ResourceSlice publishes a device: check the DRA driver's kubelet plugin pods")
    where = "DRA is not served (resource.k8s.io/v1, Kubernetes >= 1.34)" if inventory is None else \
        "no DeviceClass or ResourceSlice"
    return Check("gpu-mechanism", WARN, f"no GPU offered: no nvidia.com/gpu allocatable and {where}")


def cpu_check(nodes: list[dict[str, Any]] | Unreadable) -> list[Check]:
    """--cpu: CPU training needs no GPU; the nodes only have to be there and Ready."""
    if isinstance(nodes, Unreadable):
        return [Check("cpu", WARN, f"cannot list nodes ({nodes}): node checks skipped",
                      "ask for cluster-wide list on nodes, or run kubetrain doctor as a cluster admin")]
    ready = [n for n in nodes if _ready(n)]
    if not ready:
        return [Check("cpu", FAIL, f"no node is Ready and schedulable ({len(nodes)} node(s))",
                      "kubectl get nodes; kubectl describe node <name>")]
    return [Check("cpu", OK, f"CPU training: {len(ready)} Ready node(s); no GPU needed "
                             f"({sum(allocatable_gpus(n) for n in nodes)} nvidia.com/gpu allocatable)")]


def _capacity(nodes: list[dict[str, Any]]) -> Check:
    gpu_nodes = [n for n in nodes if allocatable_gpus(n) > 0]
    total = sum(allocatable_gpus(n) for n in gpu_nodes)
    if not gpu_nodes:
        return Check("gpu", FAIL, f"no node has allocatable nvidia.com/gpu ({len(nodes)} node(s))",
                     "add a GPU node pool, and make sure the NVIDIA device plugin (or GPU operator) runs on it")
    return Check("gpu", OK, f"{total} nvidia.com/gpu allocatable on {len(gpu_nodes)} node(s)")


def _group_check(group: Any) -> Check:
    count = f"{len(group.nodes)} node(s)"
    model = f"{group.model} ({group.label})" if group.model else "no GPU model label"
    taints = f"; taints {', '.join(group.taints)}" if group.taints else ""
    where = f": {_names(group.nodes)}"
    if group.allocatable == 0:
        return Check("gpu", FAIL, f"{count} labelled as GPU nodes ({model}) with 0 allocatable nvidia.com/gpu{where}",
                     "the device plugin is not advertising GPUs there: check the NVIDIA driver and the "
                     "device-plugin pod on those nodes (kubectl describe node <name>)")
    text = f"{count} with {group.allocatable} x {model}{taints}{where}"
    other = [t for t in group.taints if not t.startswith(("nvidia.com/gpu", "sku=gpu"))]
    if other:
        return Check("gpu", WARN, text, f"pods need tolerations for {', '.join(other)}: add them to "
                                        "spec.placement.tolerations (the cloud profiles add only nvidia.com/gpu)")
    if not group.model:
        return Check("gpu", WARN, text, "placement.gpuType cannot select these nodes: install GPU Feature "
                                        "Discovery (nvidia.com/gpu.product) or use placement.nodeSelector")
    return Check("gpu", OK, text)


def _ready(node: dict[str, Any]) -> bool:
    conditions = status_of(node).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return ready and not (node.get("spec") or {}).get("unschedulable")


def is_device_plugin(daemonset: dict[str, Any]) -> bool:
    name = str(meta_of(daemonset).get("name", "")).lower()
    pod_spec = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    images = " ".join(str(c.get("image", "")) for c in pod_spec.get("containers") or []).lower()
    return any(n in name for n in DEVICE_PLUGIN_NAMES) or "k8s-device-plugin" in images


def device_plugin_checks(nodes: list[dict[str, Any]], daemonsets: list[dict[str, Any]] | Unreadable) -> list[Check]:
    allocatable = any(allocatable_gpus(n) > 0 for n in nodes)
    if isinstance(daemonsets, Unreadable):
        return [Check("device-plugin", WARN, f"cannot list DaemonSets ({daemonsets}): device plugin not checked")]
    plugins = [d for d in daemonsets if is_device_plugin(d)]
    if not plugins:
        if allocatable:
            return [Check("device-plugin", OK, "no device-plugin DaemonSet; GPUs are advertised anyway "
                                               "(the node image or the cloud provides the plugin)")]
        if any(has_gpu_labels(n) for n in nodes):
            return [Check("device-plugin", FAIL, "no NVIDIA device-plugin DaemonSet and no allocatable GPU",
                          "install the NVIDIA device plugin or the GPU operator (nvidia/gpu-operator Helm chart)")]
        return []
    return [_plugin_check(d) for d in plugins]


def _plugin_check(daemonset: dict[str, Any]) -> Check:
    meta, status = meta_of(daemonset), status_of(daemonset)
    desired, ready = int(status.get("desiredNumberScheduled") or 0), int(status.get("numberReady") or 0)
    where = f"DaemonSet {meta.get('namespace')}/{meta.get('name')}"
    if desired and ready >= desired:
        return Check("device-plugin", OK, f"{where}: {ready}/{desired} ready")
    hint = (f"kubectl -n {meta.get('namespace')} get pods -o wide | grep {meta.get('name')}; "
            f"kubectl -n {meta.get('namespace')} logs daemonset/{meta.get('name')}")
    if not desired:
        return Check("device-plugin", WARN, f"{where} runs on no node (its nodeSelector matches none)", hint)
    return Check("device-plugin", FAIL, f"{where}: only {ready}/{desired} ready", hint)


def cloud_profile(nodes: list[dict[str, Any]] | Unreadable) -> tuple[str | None, Check]:
    if isinstance(nodes, Unreadable):
        return None, Check("cloud", WARN, "cloud profile unknown (cannot list nodes)",
                           "set spec.placement.cloud explicitly")
    profile = detect_cloud(nodes)
    if profile is None:
        return None, Check("cloud", WARN, "no cloud profile recognised from the node labels",
                           "placement.cloud: auto falls back to none; set gke/eks/aks/kind/generic explicitly")
    return profile, Check("cloud", OK, f"cloud profile {profile} (what placement.cloud: auto resolves to)")


# ---- queues and access ----------------------------------------------------------------------------------------
def queue_checks(rest: Rest) -> list[Check]:
    found = [name for name, group, version, plural in QUEUES if targets.serves(rest, group, version, plural)]
    if not found:
        return [Check("queue", OK, "no Kueue or Volcano: jobs start as soon as their pods fit")]
    hint = "set spec.scheduling.queue to a LocalQueue (kubectl get localqueues -n <ns>)" if "Kueue" in found else ""
    return [Check("queue", OK, f"{name} installed", hint if name == "Kueue" else "") for name in found]


# (group, resource, verbs) the user needs in the namespace; optional ones only warn.
CORE_NEEDS = (("", "pods", ("get", "list", "watch")), ("", "pods/log", ("get",)), ("", "events", ("list",)),
              ("", "configmaps", ("get", "create", "patch", "delete")))
OPTIONAL_NEEDS = (("", "pods/exec", ("create",), "kubetrain gpu"), ("", "nodes", ("list",), "doctor, cloud: auto"))
JOB_VERBS = ("get", "list", "watch", "create", "patch", "delete")


def rbac_checks(rest: Rest, namespace: str, installed: list[Target]) -> list[Check]:
    needs = [(t.group, t.plural, JOB_VERBS) for t in installed] + list(CORE_NEEDS)
    asks = [(g, r, v, namespace) for g, r, verbs in needs for v in verbs]
    optional = [((g, r, v, None if r == "nodes" else namespace), use) for g, r, verbs, use in OPTIONAL_NEEDS
                for v in verbs]
    with ThreadPoolExecutor(8) as pool:
        allowed = list(pool.map(lambda a: can_i(rest, a[2], a[0], a[1], a[3])[0], asks + [a for a, _ in optional]))
    missing = [_show(a) for a, ok in zip(asks, allowed, strict=False) if not ok]
    missing_optional = [f"{_show(a)} (for {use})" for (a, use), ok in zip(optional, allowed[len(asks):], strict=True)
                        if not ok]
    checks = []
    if missing:
        checks.append(Check("rbac", FAIL, f"in namespace {namespace} you cannot: {', '.join(missing)}",
                            f"ask an admin for a Role/RoleBinding granting them; kubectl auth can-i --list -n "
                            f"{namespace}"))
    else:
        checks.append(Check("rbac", OK, f"in namespace {namespace} you may do all {len(asks)} things kubetrain "
                                        "needs (jobs, pods, logs, events, configmaps)"))
    if missing_optional:
        checks.append(Check("rbac", WARN, f"optional permissions missing: {'; '.join(missing_optional)}"))
    return checks


def _show(ask: tuple[str, str, str, str | None]) -> str:
    group, resource, verb, _ = ask
    return f"{verb} {resource}{'.' + group if group else ''}"


