"""A pod spec and its template (pkg/apis/core/validation/validation.go: ValidatePodTemplateSpec,
ValidatePodSpec, validateRestartPolicy, validateDNSPolicy, validateHostNetwork, ValidateNodeSelector)."""

from __future__ import annotations

from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.rules.findings import Finding
from kubetrain.rules.k8s import containers, dns, dra, metadata, names, resources, scheduling, security, volumes
from kubetrain.rules.k8s.base import Findings, check, enum, is_int, mapping, named
from kubetrain.rules.k8s.versions import LATEST, Rules

RESTART_POLICIES = ("Always", "OnFailure", "Never")
DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
SUBDOMAIN_NAMES = ("serviceAccountName", "nodeName", "priorityClassName", "runtimeClassName")
LABEL_NAMES = ("hostname", "subdomain")


def pod_template(template: Any, path: PathKey, *, partial: bool = False, rules: Rules = LATEST,
                 runtime_volumes: frozenset[str] | None = None) -> Findings:
    """A PodTemplateSpec: its metadata's labels and annotations, and its spec."""
    template = mapping(template)
    yield from metadata.labels_and_annotations(template.get("metadata"), (*path, "metadata"))
    spec = template.get("spec")
    if isinstance(spec, dict):
        yield from pod_spec(spec, (*path, "spec"), partial=partial, rules=rules, runtime_volumes=runtime_volumes)
    elif not partial:
        yield Finding((*path, "spec"), "Required value")


def pod_spec(spec: dict[str, Any], path: PathKey, *, partial: bool = False, rules: Rules = LATEST,
             runtime_volumes: frozenset[str] | None = None) -> Findings:
    """ValidatePodSpec. `partial`: a Trainer runtime patch, merged into the runtime's template later, so the
    fields the runtime may supply (containers' images, the volumes mounts refer to) are not required; with
    `runtime_volumes` (a shipped runtime's pods' volumes) a mount must name one of those or the patch's."""
    if not spec.get("containers") and not partial:
        yield Finding((*path, "containers"), "Required value")
    yield from volumes.volumes(spec.get("volumes"), (*path, "volumes"), partial=partial, rules=rules)
    mountable = None if partial and runtime_volumes is None else volumes.volume_names(spec) | (runtime_volumes or set())
    yield from containers.containers(spec, path, mountable, partial=partial, rules=rules)
    yield from containers.file_key_volumes(spec, path, volumes.empty_dir_names(spec), volumes.volume_names(spec),
                                           partial=partial)
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for container, where in named(spec.get(key), (*path, key)):
            yield from resources.container_resources(container.get("resources"), (*where, "resources"))
            yield from security.container_security(container.get("securityContext"), (*where, "securityContext"))
            if spec.get("hostNetwork") is True:
                yield from _host_network_ports(container, where)
    yield from dra.pod_claims(spec, path, rules)
    yield from enum(spec, "restartPolicy", path, RESTART_POLICIES)
    yield from enum(spec, "dnsPolicy", path, DNS_POLICIES)
    yield from dns.dns_config(spec, path, rules)
    deadline = spec.get("activeDeadlineSeconds")
    if is_int(deadline) and not 1 <= deadline <= names.INT32_MAX:
        yield Finding((*path, "activeDeadlineSeconds"), f"{deadline}: must be between 1 and 2147483647, inclusive")
    for key in SUBDOMAIN_NAMES:
        if isinstance(spec.get(key), str) and spec[key]:
            yield from check((*path, key), names.dns1123_subdomain(spec[key]))
    for key in LABEL_NAMES:
        if isinstance(spec.get(key), str) and spec[key]:
            yield from check((*path, key), names.dns1123_label(spec[key]))
    yield from scheduling.labels(spec.get("nodeSelector"), (*path, "nodeSelector"))
    yield from scheduling.tolerations(spec.get("tolerations"), (*path, "tolerations"))
    yield from scheduling.affinity(spec.get("affinity"), (*path, "affinity"))
    yield from scheduling.topology_spread(spec.get("topologySpreadConstraints"), (*path, "topologySpreadConstraints"))
    yield from security.pod_security(spec.get("securityContext"), (*path, "securityContext"))
    for secret, where in named(spec.get("imagePullSecrets"), (*path, "imagePullSecrets")):
        if isinstance(secret.get("name"), str) and secret["name"]:
            yield from check((*where, "name"), names.dns1123_subdomain(secret["name"]))
    yield from _priority(spec, path)


def _priority(spec: dict[str, Any], path: PathKey) -> Findings:
    """The Priority admission plugin computes a pod's priority from its priorityClassName (without one: the
    cluster's globalDefault class, usually none, so 0) and refuses a pod whose own value differs: a warning,
    as the classes are cluster state."""
    if is_int(spec.get("priority")) and spec["priority"] != 0:
        yield Finding((*path, "priority"), f"{spec['priority']}: the Priority admission plugin refuses a priority "
                      "that differs from its PriorityClass's value; set priorityClassName instead", "warning")


def _host_network_ports(container: dict[str, Any], path: PathKey) -> Findings:
    """validateHostNetwork: with hostNetwork, a hostPort (if set) equals its containerPort."""
    for port, where in named(container.get("ports"), (*path, "ports")):
        host, target = port.get("hostPort"), port.get("containerPort")
        if is_int(host) and host and host != target:
            yield Finding((*where, "hostPort"), f"{host}: must match `containerPort` when `hostNetwork` is true")
