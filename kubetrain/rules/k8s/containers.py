"""Containers (k8s.io/kubernetes pkg/apis/core/validation/validation.go: validateContainers,
validateInitContainers, validateContainerCommon, validatePorts, validateEnv, validateEnvVarValueFrom,
validateEnvFrom, validateVolumeMounts, validateProbe, validateHandler, validatePullPolicy)."""

from __future__ import annotations

from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.rules.findings import Finding
from kubetrain.rules.k8s import names
from kubetrain.rules.k8s.base import Findings, check, enum, is_int, mapping, named, one_of, range_check
from kubetrain.rules.k8s.restart import container_restart
from kubetrain.rules.k8s.versions import LATEST, Rules

PULL_POLICIES = ("Always", "Never", "IfNotPresent")
PROTOCOLS = ("TCP", "UDP", "SCTP")
TERMINATION_MESSAGE_POLICIES = ("File", "FallbackToLogsOnError")
HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
LIFECYCLE_HANDLERS = ("exec", "httpGet", "tcpSocket", "sleep")
VALUE_FROM = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef", "fileKeyRef")
ENV_FROM = ("configMapRef", "secretRef")
DOWNWARD_FIELDS = frozenset({"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
                             "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP",
                             "status.podIPs"})
PROPAGATION = ("None", "HostToContainer", "Bidirectional")
DEFAULT_GRACE_SECONDS = 30  # SetDefaults_PodSpec: terminationGracePeriodSeconds


def containers(pod_spec: dict[str, Any], path: PathKey, volumes: set[str] | None, *, partial: bool,
               rules: Rules = LATEST) -> Findings:
    """Every container list of a pod spec: unique names across them, and each container's own rules.
    `partial` (a runtime patch merged into a runtime's template): the required fields may come from the runtime."""
    seen: set[str] = set()
    grace = pod_spec.get("terminationGracePeriodSeconds")
    grace = grace if is_int(grace) else DEFAULT_GRACE_SECONDS
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for container, where in named(pod_spec.get(key), (*path, key)):
            name = container.get("name")
            if isinstance(name, str) and name in seen:
                yield Finding((*where, "name"), f"Duplicate value: {name!r}")
            seen.add(name) if isinstance(name, str) else None
            yield from container_rules(container, where, volumes, init=key == "initContainers", partial=partial,
                                       rules=rules, grace=grace)


def container_rules(container: dict[str, Any], path: PathKey, volumes: set[str] | None, *, init: bool = False,
                    partial: bool = False, rules: Rules = LATEST, grace: int = DEFAULT_GRACE_SECONDS) -> Findings:
    name = container.get("name")
    if not name:
        yield Finding((*path, "name"), "Required value")
    elif isinstance(name, str):
        yield from check((*path, "name"), names.dns1123_label(name))
    image = container.get("image")
    if not image and not partial:
        yield Finding((*path, "image"), "Required value")
    elif isinstance(image, str) and image.strip() != image:
        yield Finding((*path, "image"), f"{image!r}: must not have leading or trailing whitespace")
    yield from enum(container, "imagePullPolicy", path, PULL_POLICIES)
    yield from enum(container, "terminationMessagePolicy", path, TERMINATION_MESSAGE_POLICIES)
    yield from ports(container.get("ports"), (*path, "ports"))
    yield from env(container.get("env"), (*path, "env"), rules)
    yield from env_from(container.get("envFrom"), (*path, "envFrom"), rules)
    yield from volume_mounts(container.get("volumeMounts"), (*path, "volumeMounts"), volumes)
    sidecar = init and container.get("restartPolicy") == "Always"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if isinstance(container.get(probe), dict):
            if init and not sidecar:
                yield Finding((*path, probe), "may not be set for init containers without restartPolicy=Always")
            yield from probe_rules(container[probe], (*path, probe), liveness=probe != "readinessProbe")
    for hook in ("postStart", "preStop"):
        handler = mapping(container.get("lifecycle")).get(hook)
        if isinstance(handler, dict):
            yield from handler_rules(handler, (*path, "lifecycle", hook), LIFECYCLE_HANDLERS)
            yield from sleep_rules(handler.get("sleep"), (*path, "lifecycle", hook, "sleep"), grace, rules)
    yield from container_restart(container, path, rules, init=init)


def sleep_rules(sleep: Any, path: PathKey, grace: int, rules: Rules) -> Findings:
    """validateSleepAction: 0 < seconds <= terminationGracePeriodSeconds; 0 too from 1.33."""
    seconds = mapping(sleep).get("seconds")
    low = 0 if rules.sleep_zero else 1
    if is_int(seconds) and not low <= seconds <= grace:
        bound = "non-negative" if rules.sleep_zero else f"greater than 0 ({rules.name}; 0 needs 1.33)"
        yield Finding((*path, "seconds"), f"{seconds}: must be {bound} and not more than "
                      f"terminationGracePeriodSeconds ({grace})")


def ports(value: Any, path: PathKey) -> Findings:
    """validateContainerPorts."""
    seen: set[str] = set()
    for port, where in named(value, path):
        name = port.get("name")
        if isinstance(name, str) and name:
            yield from check((*where, "name"), names.port_name(name))
            if name in seen:
                yield Finding((*where, "name"), f"Duplicate value: {name!r}")
            seen.add(name)
        if port.get("containerPort") is None:
            yield Finding((*where, "containerPort"), "Required value")
        else:
            yield from check((*where, "containerPort"), names.port_number(port.get("containerPort")))
        if port.get("hostPort") is not None:
            yield from check((*where, "hostPort"), names.port_number(port.get("hostPort"), allow_zero=True))
        yield from enum(port, "protocol", where, PROTOCOLS)


def env(value: Any, path: PathKey, rules: Rules = LATEST) -> Findings:
    """validateEnv and validateEnvVarValueFrom."""
    for var, where in named(value, path):
        name = var.get("name")
        yield from check((*where, "name"), _env_name(name, rules) if isinstance(name, str) else
                         "Required value" if name is None else None)
        source = var.get("valueFrom")
        if source is None:
            continue
        if var.get("value"):
            yield Finding((*where, "valueFrom"), "may not be specified when `value` is not empty")
        if isinstance(source, dict):
            if source.get("fileKeyRef") is not None and not rules.env_files:
                yield Finding((*where, "valueFrom", "fileKeyRef"), f"not supported by {rules.name}: EnvFiles is "
                              "off by default there (beta, on, in 1.35), so the env var is left without a source")
            yield from one_of(source, (*where, "valueFrom"), VALUE_FROM, "source")
            if isinstance(source.get("fileKeyRef"), dict):
                yield from file_key_selector(source["fileKeyRef"], (*where, "valueFrom", "fileKeyRef"))
            field_path = mapping(source.get("fieldRef")).get("fieldPath")
            if isinstance(source.get("fieldRef"), dict) and not _downward_field(field_path):
                yield Finding((*where, "valueFrom", "fieldRef", "fieldPath"), f"Unsupported value {field_path!r}: "
                              f"supported values: {', '.join(map(repr, sorted(DOWNWARD_FIELDS)))}")
            for key in ("configMapKeyRef", "secretKeyRef"):
                if isinstance(source.get(key), dict):
                    yield from key_selector(source[key], (*where, "valueFrom", key))


def _downward_field(value: Any) -> bool:
    """validateObjectFieldSelector with validEnvDownwardAPIFieldPathExpressions (and a label or annotation)."""
    if not isinstance(value, str):
        return False
    for prefix in ("metadata.labels['", "metadata.annotations['"):
        if value.startswith(prefix) and value.endswith("']"):
            return True
    return value in DOWNWARD_FIELDS


def key_selector(selector: dict[str, Any], path: PathKey) -> Findings:
    """validateConfigMapKeySelector / validateSecretKeySelector."""
    name, key = selector.get("name"), selector.get("key")
    if isinstance(name, str) or name is None:  # an empty name is not a subdomain either
        yield from check((*path, "name"), names.dns1123_subdomain(name or ""))
    if not key:
        yield Finding((*path, "key"), "Required value")
    elif isinstance(key, str):
        yield from check((*path, "key"), names.configmap_key(key))


def file_key_selector(selector: dict[str, Any], path: PathKey) -> Findings:
    """validateFileKeySelector."""
    key, volume, file = selector.get("key"), selector.get("volumeName"), selector.get("path")
    for field, value in (("key", key), ("volumeName", volume), ("path", file)):
        if not value:
            yield Finding((*path, field), "Required value")
    if isinstance(key, str) and key:
        yield from check((*path, "key"), names.env_var_name(key))
    if isinstance(volume, str) and volume:
        yield from check((*path, "volumeName"), names.dns1123_label(volume))
    if isinstance(file, str) and ".." in file.replace("\\", "/").split("/"):
        yield Finding((*path, "path"), f"{file!r}: must not contain '..'")


def file_key_volumes(pod_spec: dict[str, Any], path: PathKey, empty_dirs: set[str], volumes: set[str], *,
                     partial: bool) -> Findings:
    """validateFileKeyRefVolumes: a fileKeyRef names an emptyDir volume of the pod (of a runtime patch: maybe
    one of the runtime's)."""
    if partial:
        return
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for container, where in named(pod_spec.get(key), (*path, key)):
            for var, at in named(container.get("env"), (*where, "env")):
                ref = mapping(mapping(var.get("valueFrom")).get("fileKeyRef"))
                name = ref.get("volumeName")
                if not isinstance(name, str) or not name:
                    continue
                if name not in volumes:
                    yield Finding((*at, "valueFrom", "fileKeyRef", "volumeName"), f"Not found: {name!r}")
                elif name not in empty_dirs:
                    yield Finding((*at, "valueFrom", "fileKeyRef", "volumeName"),
                                  f"{name!r}: referenced volume must be of type emptyDir")


def _env_name(name: str, rules: Rules) -> str | None:
    """IsRelaxedEnvVarName from 1.32 (RelaxedEnvironmentVariableValidation), IsEnvVarName before."""
    if rules.relaxed_env_names:
        return names.env_var_name(name)
    problem = names.strict_env_var_name(name)
    return f"{problem} ({rules.name}; other printable ASCII needs 1.32)" if problem else None


def env_from(value: Any, path: PathKey, rules: Rules = LATEST) -> Findings:
    """validateEnvFrom."""
    for source, where in named(value, path):
        prefix = source.get("prefix")
        if isinstance(prefix, str) and prefix:
            yield from check((*where, "prefix"), _env_name(prefix, rules))
        yield from one_of(source, where, ENV_FROM, "source")
        for key in ENV_FROM:
            if not isinstance(source.get(key), dict):
                continue
            name = source[key].get("name")
            if not name:
                yield Finding((*where, key, "name"), "Required value")
            elif isinstance(name, str):
                # ValidateConfigMapName / ValidateSecretName(name, prefix=true): a trailing '-' passes, as
                # apimachinery's maskTrailingDash replaces the last two characters with "a" before the check.
                masked = name[:-2] + "a" if len(name) > 1 and name.endswith("-") else name
                if names.dns1123_subdomain(masked):
                    yield from check((*where, key, "name"), names.dns1123_subdomain(name))


def volume_mounts(value: Any, path: PathKey, volumes: set[str] | None) -> Findings:
    """validateVolumeMounts: each names a volume of the pod (`volumes`; None: not known, as in a patch of a
    runtime whose volumes are not), at a unique absolute-or-relative mountPath."""
    paths: set[str] = set()
    for mount, where in named(value, path):
        name, mount_path = mount.get("name"), mount.get("mountPath")
        if not name:
            yield Finding((*where, "name"), "Required value")
        elif volumes is not None and (not isinstance(name, str) or name not in volumes):
            yield Finding((*where, "name"), f"Not found: {name!r} (no volume of the pod has this name)")
        if not mount_path:
            yield Finding((*where, "mountPath"), "Required value")
        elif isinstance(mount_path, str):
            if mount_path in paths:
                yield Finding((*where, "mountPath"), f"{mount_path!r}: must be unique")
            paths.add(mount_path)
        sub_path = mount.get("subPath")
        if isinstance(sub_path, str) and sub_path:
            yield from check((*where, "subPath"), relative_path_problem(sub_path))
        yield from enum(mount, "mountPropagation", where, PROPAGATION)


def relative_path_problem(value: str) -> str | None:
    """validateLocalDescendingPath."""
    if value.startswith("/"):
        return f"{value!r}: must be a relative path"
    if ".." in value.replace("\\", "/").split("/"):
        return f"{value!r}: must not contain '..'"
    return None


def non_reserved_path_problem(value: str) -> str | None:
    """validateLocalNonReservedPath (a projected file's path)."""
    if value.startswith(".."):
        return f"{value!r}: must not start with '..'"
    return relative_path_problem(value)


def probe_rules(probe: dict[str, Any], path: PathKey, *, liveness: bool) -> Findings:
    """validateProbe."""
    yield from handler_rules(probe, path, HANDLERS)
    for key in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"):
        yield from range_check(probe, key, path, 0)
    grace = probe.get("terminationGracePeriodSeconds")
    if is_int(grace) and grace <= 0:
        yield Finding((*path, "terminationGracePeriodSeconds"), f"{grace}: must be greater than 0")
    success = probe.get("successThreshold")
    if liveness and is_int(success) and success not in (0, 1):  # 0 is defaulted to 1
        yield Finding((*path, "successThreshold"), f"{success}: must be 1")


def handler_rules(handler: dict[str, Any], path: PathKey, kinds: tuple[str, ...]) -> Findings:
    """validateHandler / validateLifecycleHandler: exactly one handler, and its port a number or name."""
    yield from one_of(handler, path, kinds, "handler type")
    for kind in ("httpGet", "tcpSocket", "grpc"):
        action = handler.get(kind)
        if not isinstance(action, dict):
            continue
        port = action.get("port")
        if port is None:
            yield Finding((*path, kind, "port"), "Required value")
        elif kind == "grpc":
            yield from check((*path, kind, "port"), names.port_number(port))
        else:
            yield from check((*path, kind, "port"), names.port_number_or_name(port))
    command = mapping(handler.get("exec")).get("command")
    if isinstance(handler.get("exec"), dict) and not command:
        yield Finding((*path, "exec", "command"), "Required value")
