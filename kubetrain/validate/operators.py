"""What the operators' admission webhooks reject at create time, and what a later stage would reject.

Webhook rules (training-operator v1.9.4 `pytorchjob_webhook.go`, Trainer v2.3.0 torch plugin) make
`kubectl apply --dry-run=server` fail, so they are plain errors. Some mistakes pass the API server and
fail later: the operator creating pods or Services, the kubelet, or torchrun at start. Those are errors
too (a green CI check must mean the job runs), and their message names the stage — docs/validate.md lists
every rule with the stage that enforces it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.rules import names
from kubetrain.rules.findings import Finding, get
from kubetrain.rules.quantity import parse_quantity
from kubetrain.rules.runtimes import UNKNOWN, runtime_of

OPERATOR_PODS = "the operator's pod creation would fail"
OPERATOR_SERVICES = "the operator's Service creation would fail"
JOBSET_WEBHOOK = "JobSet's webhook refuses the JobSet the Trainer creates from it"
DEFAULT_CONTAINER, DEFAULT_PORT_NAME, DEFAULT_PORT = "pytorch", "pytorchjob-port", 23456
TORCHRUN = "torchrun would fail at start"
MANAGED_BY = ("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue")
CLEAN_POD_POLICIES = ("None", "Running", "All")
RDZV_BACKENDS = ("c10d", "etcd", "etcd-v2", "static")
COMPUTE = ("cpu", "memory", "ephemeral-storage")
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
# Trainer v2.3.0's JobSet plugin has these checks, but on the test control plane its webhook accepted such
# patches (tests/validate/test_oracle.py): a later-stage rule, the patch does not do what it says.
PATCH_STAGE = "the Trainer's JobSet plugin refuses or ignores the patch"
ENV_LESS_CONTAINERS = ("dataset-initializer", "model-initializer", "node")
HTTP_PATH = re.compile(r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+")


def later(message: str, stage: str) -> str:
    return f"{message} (the API server accepts it, but {stage})"


def pytorchjob_webhook(obj: dict[str, Any]) -> Iterator[Finding]:
    name = get(obj, "metadata", "name")
    # A name that is not even a DNS subdomain is reported once, by the generic metadata check.
    if isinstance(name, str) and not names.subdomain_error(name) and (
            error := names.dns_label_error(name, rfc1035=True)):
        yield Finding(("metadata", "name"), f"the training-operator requires a DNS-1035 label: {error}")
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    manager = get(spec, "runPolicy", "managedBy")
    if manager is not None and manager not in MANAGED_BY:
        yield Finding(("spec", "runPolicy", "managedBy"), f"must be one of {', '.join(MANAGED_BY)}, not {manager!r}")
    replicas = spec.get("pytorchReplicaSpecs")
    elastic = spec.get("elasticPolicy")
    if isinstance(elastic, dict):
        if not isinstance(replicas, dict) or "Worker" not in replicas:
            yield Finding(("spec", "pytorchReplicaSpecs", "Worker"), "must be configured if elastic policy is used")
        if elastic.get("nProcPerNode") is not None and spec.get("nprocPerNode") is not None:
            yield Finding(("spec", "elasticPolicy", "nProcPerNode"), "must not be used with spec.nprocPerNode")
    if not isinstance(replicas, dict) or not replicas:
        yield Finding(("spec", "pytorchReplicaSpecs"), "Required value: must be required")
        return
    for replica_type, replica in replicas.items():
        base: PathKey = ("spec", "pytorchReplicaSpecs", replica_type)
        containers = get(replica, "template", "spec", "containers")
        if not isinstance(containers, list) or not containers:
            yield Finding((*base, "template", "spec", "containers"), "Required value: must be specified")
        count = replica.get("replicas") if isinstance(replica, dict) else None
        if replica_type == "Worker" and isinstance(count, int) and count < 1:
            yield Finding((*base, "replicas"), "must be at least 1")
        for index, container in enumerate(containers if isinstance(containers, list) else []):
            if isinstance(container, dict) and not container.get("image"):
                yield Finding((*base, "template", "spec", "containers", index, "image"), "required field is missing")


def pytorchjob_later(obj: dict[str, Any]) -> Iterator[Finding]:
    """Accepted by the API server and the webhook; fails once the operator or torchrun acts on it."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    name = get(obj, "metadata", "name")
    replicas = spec.get("pytorchReplicaSpecs")
    if isinstance(name, str) and isinstance(replicas, dict):
        for replica_type, replica in replicas.items():
            count = replica.get("replicas", 1) if isinstance(replica, dict) else 1
            longest = f"{name}-{str(replica_type).lower()}-{max(int(count) - 1, 0) if isinstance(count, int) else 0}"
            if len(longest) > 63:
                yield Finding(("metadata", "name"), later(f"the Service {longest!r} would exceed 63 characters",
                                                          OPERATOR_SERVICES))
                break
    for replica_type, replica in replicas.items() if isinstance(replicas, dict) else ():
        yield from _service_port_findings(str(replica_type), replica)
    policy = get(spec, "runPolicy", "cleanPodPolicy")
    if policy is not None and policy not in CLEAN_POD_POLICIES:
        yield Finding(("spec", "runPolicy", "cleanPodPolicy"),
                      later(f"must be one of {', '.join(CLEAN_POD_POLICIES)}, not {policy!r}",
                            "the operator would not clean up pods"))
    elastic = spec.get("elasticPolicy")
    if isinstance(elastic, dict):
        yield from _elastic_later(elastic)


def _elastic_later(elastic: dict[str, Any]) -> Iterator[Finding]:
    backend = elastic.get("rdzvBackend")
    if backend is not None and backend not in RDZV_BACKENDS:
        yield Finding(("spec", "elasticPolicy", "rdzvBackend"),
                      later(f"must be one of {', '.join(RDZV_BACKENDS)}, not {backend!r}", TORCHRUN))
    low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        yield Finding(("spec", "elasticPolicy", "minReplicas"),
                      later(f"minReplicas ({low}) must be <= maxReplicas ({high})", TORCHRUN))


def service_ports(containers: Any) -> list[dict[str, Any]]:
    """The ports of the Service training-operator v1.9.4 makes per replica (`GetPortsFromJob` after
    `setPyTorchDefaultPort`): the `pytorch` container's ports by name — a later port of the same name replaces
    an earlier one, as in the operator's map — plus `pytorchjob-port: 23456` when no port has that name."""
    if not isinstance(containers, list) or not any(
            isinstance(c, dict) and c.get("name") == DEFAULT_CONTAINER for c in containers):
        return []
    ports: dict[str, Any] = {}
    for port in _pytorch_ports(containers):
        ports[str(port.get("name") or "")] = port.get("containerPort")
    ports.setdefault(DEFAULT_PORT_NAME, DEFAULT_PORT)
    return [{"name": key, "port": value} for key, value in ports.items()]


def _pytorch_ports(containers: Any) -> list[dict[str, Any]]:
    """The ports of the first container named `pytorch`."""
    chosen = next((c for c in containers if isinstance(c, dict) and c.get("name") == DEFAULT_CONTAINER), None) \
        if isinstance(containers, list) else None
    listed = chosen.get("ports") if chosen is not None else None
    return [p for p in listed if isinstance(p, dict)] if isinstance(listed, list) else []


def _service_port_findings(replica_type: str, replica: Any) -> Iterator[Finding]:
    """ValidateService on the operator's Service: with several ports each has a name, and no two share a
    port number (all are TCP)."""
    containers = get(replica, "template", "spec", "containers")
    ports = service_ports(containers)
    own = [str(p.get("containerPort")) for p in _pytorch_ports(containers)]
    if len(own) != len(set(own)):
        return  # the container's own duplicate ports: the schema's list-map keys report them
    where: PathKey = ("spec", "pytorchReplicaSpecs", replica_type, "template", "spec", "containers")
    numbers = [p["port"] for p in ports]
    duplicate = next((n for n in numbers if numbers.count(n) > 1), None)
    if len(ports) > 1 and any(not p["name"] for p in ports):
        yield Finding(where, later("with several ports, every port of the pytorch container needs a name",
                                   OPERATOR_SERVICES))
    elif duplicate is not None:
        yield Finding(where, later(f"port {duplicate} twice in the Service (the operator adds {DEFAULT_PORT_NAME}: "
                                   f"{DEFAULT_PORT} unless a port has that name)", OPERATOR_SERVICES))


def jobset_names(obj: dict[str, Any]) -> Iterator[Finding]:
    """JobSet v0.12.0's webhook (`validateCreate`): the longest Job name `<jobset>-<job>-<index>` and, for an
    Indexed Job, the longest pod name `<jobset>-<job>-<index>-<pod index>-abcde` are DNS-1035 labels. The
    Trainer names the JobSet after the TrainJob; the shipped runtimes' replicated jobs have one replica each,
    and the node job runs `numNodes` pods."""
    name = get(obj, "metadata", "name")
    runtime = runtime_of(get(obj, "spec", "runtimeRef"))
    if not isinstance(name, str) or runtime is None or names.dns_label_error(name, rfc1035=True):
        return  # a name that is no DNS-1035 label is refused by the TrainJob's own CEL rule
    nodes = get(obj, "spec", "trainer", "numNodes")
    nodes = nodes if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 0 else 1
    for job in sorted(runtime.jobs):
        longest = f"{name}-{job}-0-{(nodes if job == 'node' else 1) - 1}-abcde"
        if error := names.dns_label_error(longest, rfc1035=True):
            yield Finding(("metadata", "name"), later(f"the pod name {longest!r} would be invalid: {error}",
                                                      JOBSET_WEBHOOK))
            return


def trainjob_webhook(obj: dict[str, Any]) -> Iterator[Finding]:
    yield from _runtime_ref(get(obj, "spec", "runtimeRef"))
    yield from jobset_names(obj)
    yield from _runtime_patches(obj)
    trainer = get(obj, "spec", "trainer")
    if not isinstance(trainer, dict):
        return
    base: PathKey = ("spec", "trainer")
    nodes = trainer.get("numNodes")
    if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes < 1:
        yield Finding((*base, "numNodes"), later(f"{nodes}: must be at least 1", "the job would never start a "
                                                 "training node"))
    env = trainer.get("env")
    names_set = {str(e.get("name")) for e in env if isinstance(e, dict)} if isinstance(env, list) else set()
    runtime = runtime_of(get(obj, "spec", "runtimeRef")) or UNKNOWN
    reserved = sorted(names_set & set(runtime.reserved_env))
    if reserved:
        yield Finding((*base, "env"), f"must not set the reserved variables {', '.join(reserved)} (the "
                      f"{runtime.policy} runtime sets them)")


def _runtime_ref(ref: Any) -> Iterator[Finding]:
    """Trainer's TrainJobValidator: the runtimeRef's group and kind name a registered runtime
    (RuntimeRefToRuntimeRegistryKey; defaults ClusterTrainingRuntime, trainer.kubeflow.org)."""
    if not isinstance(ref, dict):
        return
    kind, group = ref.get("kind", "ClusterTrainingRuntime"), ref.get("apiGroup", "trainer.kubeflow.org")
    if kind not in RUNTIME_KINDS:
        yield Finding(("spec", "runtimeRef", "kind"), f"unsupported runtime kind {kind!r}: must be one of "
                      f"{', '.join(RUNTIME_KINDS)}")
    if group != "trainer.kubeflow.org":
        yield Finding(("spec", "runtimeRef", "apiGroup"), f"unsupported runtime group {group!r}: must be "
                      "trainer.kubeflow.org")


def _runtime_patches(obj: dict[str, Any]) -> Iterator[Finding]:
    """Trainer v2.3.0's JobSet plugin (pkg/runtime/framework/plugins/jobset/jobset.go, Validate): each patch's
    manager is a domain-prefixed path (apimachinery IsDomainPrefixedPath); for a runtime whose shape is known,
    a patch names only its replicated jobs and their containers, and sets no env on the node container."""
    patches = get(obj, "spec", "runtimePatches")
    runtime = runtime_of(get(obj, "spec", "runtimeRef"))
    shape = runtime.jobs if runtime else None
    for index, patch in enumerate(patches if isinstance(patches, list) else []):
        base: PathKey = ("spec", "runtimePatches", index)
        manager = patch.get("manager") if isinstance(patch, dict) else None
        if isinstance(manager, str) and (problem := _domain_prefixed_path(manager)):
            yield Finding((*base, "manager"), problem)
        jobs = get(patch, "trainingRuntimeSpec", "template", "spec", "replicatedJobs")
        for job_index, job in enumerate(jobs if isinstance(jobs, list) and shape else []):
            yield from _patched_job(job, (*base, "trainingRuntimeSpec", "template", "spec", "replicatedJobs",
                                          job_index), shape or {})


def _patched_job(job: Any, path: PathKey, shape: dict[str, frozenset[str]]) -> Iterator[Finding]:
    name = job.get("name") if isinstance(job, dict) else None
    if not isinstance(name, str) or name not in shape:
        yield Finding((*path, "name"), later(f"must not have replicated job that doesn't exist in the runtime job "
                                             f"template ({', '.join(sorted(shape))})", PATCH_STAGE))
        return
    spec = get(job, "template", "spec", "template", "spec")
    for key in ("initContainers", "containers"):
        containers = spec.get(key) if isinstance(spec, dict) else None
        for index, container in enumerate(containers if isinstance(containers, list) else []):
            where = (*path, "template", "spec", "template", "spec", key, index)
            cname = container.get("name") if isinstance(container, dict) else None
            if not isinstance(cname, str) or cname not in shape[name]:
                yield Finding((*where, "name"), later(f"must not have {key[:-1]} that doesn't exist in the runtime "
                                                      f"job {name} ({', '.join(sorted(shape[name]))})", PATCH_STAGE))
            elif cname in ENV_LESS_CONTAINERS and container.get("env"):
                yield Finding((*where, "env"), later(f"must not have envs for the {', '.join(ENV_LESS_CONTAINERS)} "
                                                     "containers (set spec.trainer.env instead)", PATCH_STAGE))


def _domain_prefixed_path(value: str) -> str | None:
    host, slash, rest = value.partition("/")
    if not slash or not host or not rest:
        return f"{value!r} must be a domain-prefixed path (such as \"acme.io/foo\")"
    if names.subdomain_error(host):
        return f"{value!r}: the domain {host!r} must be a lower-case RFC 1123 subdomain"
    if not HTTP_PATH.fullmatch(rest):
        return f"{value!r}: invalid path {rest!r}"
    return None


def resource_findings(obj: Any, path: PathKey = ()) -> Iterator[Finding]:
    """Negative quantities and requests above limits in every `resources` block (pod templates included):
    the API server rejects such pods, so for a CRD the operator's pod creation fails."""
    if isinstance(obj, dict):
        if _looks_like_resources(obj):
            yield from _check_resources(obj, path)
        for key, value in obj.items():
            yield from resource_findings(value, (*path, key))
    elif isinstance(obj, list):
        for index, item in enumerate(obj):
            yield from resource_findings(item, (*path, index))


def _looks_like_resources(value: dict[str, Any]) -> bool:
    return (isinstance(value.get("requests"), dict) or isinstance(value.get("limits"), dict)) and set(value) <= {
        "requests", "limits", "claims"}


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _check_resources(resources: dict[str, Any], path: PathKey) -> Iterator[Finding]:
    amounts: dict[str, dict[str, Decimal]] = {}
    for section in ("requests", "limits"):
        amounts[section] = {}
        for name, value in _mapping(resources.get(section)).items():
            try:
                amount = parse_quantity(value) if isinstance(value, str | int | float) else None
            except ValueError:
                continue  # the schema's pattern reports it
            if amount is not None and amount < 0:
                yield Finding((*path, section, name), later(f"{value!r} must not be negative", OPERATOR_PODS))
            elif amount is not None:
                amounts[section][name] = amount
    yield from _check_requests_equal_limits(resources, path)
    for name in amounts["requests"].keys() & amounts["limits"].keys():  # any resource, extended ones: equal
        request, limit = amounts["requests"][name], amounts["limits"][name]
        if request > limit and ("/" not in name or "kubernetes.io/" in name):
            yield Finding((*path, "requests", name), later(
                f"request {resources['requests'][name]} is more than the limit {resources['limits'][name]}",
                OPERATOR_PODS))


def _check_requests_equal_limits(resources: dict[str, Any], path: PathKey) -> Iterator[Finding]:
    requests, limits = _mapping(resources.get("requests")), _mapping(resources.get("limits"))
    for name, value in requests.items():
        if "/" not in name or "kubernetes.io/" in name:  # native (IsOvercommitAllowed); hugepages: k8s/resources
            continue
        if name not in limits:
            yield Finding((*path, "limits"), f"{name} is requested but has no limit; extended resources need "
                          f"limits (set limits.{name}: {value})")
        elif str(limits[name]) != str(value):
            yield Finding((*path, "requests", name), f"{name} request ({value}) must equal its limit "
                          f"({limits[name]}); extended resources cannot be overcommitted")
