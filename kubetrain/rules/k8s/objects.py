"""Built-in kinds (pkg/apis/core/validation/validation.go: ValidateConfigMap, ValidateSecret, ValidateService,
ValidatePersistentVolumeClaim; pkg/apis/apps/validation: ValidateDeploymentSpec, ValidateReplicaSetSpec,
ValidateStatefulSetSpec, ValidateDaemonSetSpec; pkg/apis/batch/validation: ValidateJobSpec)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.rules.findings import Finding
from kubetrain.rules.k8s import dra, names, scheduling
from kubetrain.rules.k8s.base import Findings, check, enum, items, mapping, named, range_check
from kubetrain.rules.quantity import parse_quantity

SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")
ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
SECRET_KEYS = {"kubernetes.io/tls": ("tls.crt", "tls.key"), "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
               "kubernetes.io/dockercfg": (".dockercfg",), "kubernetes.io/ssh-auth": ("ssh-privatekey",)}


def configmap(obj: dict[str, Any]) -> Findings:
    data, binary = mapping(obj.get("data")), mapping(obj.get("binaryData"))
    for key in data:
        yield from check(("data", key), names.configmap_key(str(key)))
    for key, value in binary.items():
        yield from check(("binaryData", key), names.configmap_key(str(key)))
        if key in data:
            yield Finding(("binaryData", key), f"Invalid value: {key!r}: duplicate of key present in data")
        yield from _base64(value, ("binaryData", key))


def secret(obj: dict[str, Any]) -> Findings:
    data, string_data = mapping(obj.get("data")), mapping(obj.get("stringData"))
    for key, value in data.items():
        yield from check(("data", key), names.configmap_key(str(key)))
        yield from _base64(value, ("data", key))
    for key in string_data:
        yield from check(("stringData", key), names.configmap_key(str(key)))
    for key in SECRET_KEYS.get(str(obj.get("type")), ()):
        if key not in data and key not in string_data:
            yield Finding(("data", key), f"Required value (a Secret of type {obj['type']} needs it)")


def _base64(value: Any, path: PathKey) -> Findings:
    """A []byte field: the JSON decoder wants standard base64 (with padding)."""
    if not isinstance(value, str):
        return
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        yield Finding(path, "illegal base64 data: the value must be base64-encoded (or use data/stringData)")


def service(obj: dict[str, Any]) -> Findings:
    name = mapping(obj.get("metadata")).get("name")
    if isinstance(name, str) and name and len(name) <= 253:
        # ValidateServiceName: a DNS-1123 label (1.36, RelaxedServiceNameValidation; before: DNS-1035, which
        # is not checked here, so an older server's refusal of a leading digit is missed, never invented)
        yield from check(("metadata", "name"), names.dns1123_label(name))
    spec = mapping(obj.get("spec"))
    kind = spec.get("type", "ClusterIP")
    yield from enum(spec, "type", ("spec",), SERVICE_TYPES)
    ports = items(spec.get("ports"))
    if not ports and kind != "ExternalName" and spec.get("clusterIP") != "None":
        yield Finding(("spec", "ports"), "Required value")
    seen: set[str] = set()
    for port, where in named(ports, ("spec", "ports")):
        name = port.get("name")
        if len(ports) > 1 and not name:
            yield Finding((*where, "name"), "Required value (each port of a Service with several ports needs a name)")
        if isinstance(name, str) and name:
            yield from check((*where, "name"), names.dns1123_label(name))
            if name in seen:
                yield Finding((*where, "name"), f"Duplicate value: {name!r}")
            seen.add(name)
        yield from check((*where, "port"), names.port_number(port.get("port")))
        if port.get("targetPort") not in (None, 0):
            yield from check((*where, "targetPort"), names.port_number_or_name(port.get("targetPort")))
        if port.get("nodePort") is not None:
            yield from check((*where, "nodePort"), names.port_number(port.get("nodePort"), allow_zero=True))
    selector = spec.get("selector")
    if isinstance(selector, dict):
        yield from scheduling.labels(selector, ("spec", "selector"))


def persistent_volume_claim(obj: dict[str, Any]) -> Findings:
    spec = mapping(obj.get("spec"))
    modes = items(spec.get("accessModes"))
    if not modes:
        yield Finding(("spec", "accessModes"), "Required value: at least 1 access mode is required")
    for index, mode in enumerate(modes):
        if mode not in ACCESS_MODES:
            yield Finding(("spec", "accessModes", index), f"Unsupported value {mode!r}")
    storage = mapping(mapping(spec.get("resources")).get("requests")).get("storage")
    if storage is None:
        yield Finding(("spec", "resources", "requests", "storage"), "Required value")
    elif isinstance(storage, str | int) and not isinstance(storage, bool):
        try:
            if parse_quantity(storage) <= 0:
                yield Finding(("spec", "resources", "requests", "storage"), f"{storage!r}: must be greater than zero")
        except ValueError:
            pass  # the schema's quantity pattern reports it


def workload(obj: dict[str, Any]) -> Findings:
    """Deployment, ReplicaSet, StatefulSet, DaemonSet: a selector that matches the template's labels."""
    spec = mapping(obj.get("spec"))
    yield from range_check(spec, "replicas", ("spec",), 0)
    yield from range_check(spec, "minReadySeconds", ("spec",), 0)
    yield from range_check(spec, "revisionHistoryLimit", ("spec",), 0)
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        yield Finding(("spec", "selector"), "Required value: empty selector is invalid for deployment"
                      if obj.get("kind") == "Deployment" else "Required value")
        return
    yield from scheduling.label_selector(selector, ("spec", "selector"))
    labels = mapping(mapping(mapping(spec.get("template")).get("metadata")).get("labels"))
    if not selector_matches(selector, labels):
        yield Finding(("spec", "template", "metadata", "labels"), "Invalid value: `selector` does not match "
                      "template `labels`")
    pod_spec = mapping(mapping(spec.get("template")).get("spec"))
    if pod_spec.get("activeDeadlineSeconds") is not None:  # ValidatePodTemplateSpecForReplicaSet and co
        yield Finding(("spec", "template", "spec", "activeDeadlineSeconds"), f"Forbidden: activeDeadlineSeconds in "
                      f"{'ReplicaSet' if obj.get('kind') == 'Deployment' else obj.get('kind')} is not Supported")
    policy = pod_spec.get("restartPolicy")
    if policy not in (None, "Always"):
        yield Finding(("spec", "template", "spec", "restartPolicy"), f"Unsupported value {policy!r}: supported "
                      "values: 'Always'")


def job(obj: dict[str, Any], base: PathKey = ("spec",)) -> Findings:
    spec = mapping(obj.get("spec")) if base == ("spec",) else obj
    for key in ("parallelism", "completions", "backoffLimit", "ttlSecondsAfterFinished", "activeDeadlineSeconds"):
        yield from range_check(spec, key, base, 0)
    policy = mapping(mapping(spec.get("template")).get("spec")).get("restartPolicy")
    if policy not in ("OnFailure", "Never"):
        yield Finding((*base, "template", "spec", "restartPolicy"), f"Unsupported value {policy!r}: supported "
                      "values: 'OnFailure', 'Never'")


def selector_matches(selector: dict[str, Any], labels: dict[str, Any]) -> bool:
    for key, value in mapping(selector.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    for requirement in items(selector.get("matchExpressions")):
        if not _requirement_matches(mapping(requirement), labels):
            return False
    return True


def _requirement_matches(requirement: dict[str, Any], labels: dict[str, Any]) -> bool:
    key, operator, values = requirement.get("key"), requirement.get("operator"), items(requirement.get("values"))
    present = key in labels
    if operator == "In":
        return bool(present and labels[str(key)] in values)
    if operator == "NotIn":
        return bool(not present or labels[str(key)] not in values)
    if operator in ("Exists", "DoesNotExist"):
        return bool(present == (operator == "Exists"))
    return True


BY_KIND: dict[str, Callable[[dict[str, Any]], Findings]] = {
    "ConfigMap": configmap, "Secret": secret, "Service": service, "PersistentVolumeClaim": persistent_volume_claim,
    "Deployment": workload, "ReplicaSet": workload, "StatefulSet": workload, "DaemonSet": workload, "Job": job,
    "ResourceClaimTemplate": dra.claim_object, "ResourceClaim": dra.claim_object, "DeviceClass": dra.device_class}
