"""Security contexts (pkg/apis/core/validation/validation.go: ValidatePodSecurityContext,
ValidateSecurityContext, validateSeccompProfileField, validateAppArmorProfileField, validateSysctls;
apimachinery IsValidUserID / IsValidGroupID)."""

from __future__ import annotations

import re
from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.rules.findings import Finding
from kubetrain.rules.k8s.base import Findings, enum, is_int, items, mapping

ID_MAX = 2**31 - 1
PROFILE_TYPES = ("RuntimeDefault", "Unconfined", "Localhost")
SYSCTL = re.compile(r"^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$")


def pod_security(context: Any, path: PathKey) -> Findings:
    context = mapping(context)
    yield from _ids(context, path, ("runAsUser", "runAsGroup", "fsGroup"))
    for index, group in enumerate(items(context.get("supplementalGroups"))):
        if is_int(group) and not 0 <= group <= ID_MAX:
            yield Finding((*path, "supplementalGroups", index), f"{group}: must be between 0 and {ID_MAX}, inclusive")
    yield from _profile(context.get("seccompProfile"), (*path, "seccompProfile"))
    yield from _profile(context.get("appArmorProfile"), (*path, "appArmorProfile"))
    for index, sysctl in enumerate(items(context.get("sysctls"))):
        name = mapping(sysctl).get("name")
        if not name:
            yield Finding((*path, "sysctls", index, "name"), "Required value")
        elif isinstance(name, str) and (len(name) > 253 or not SYSCTL.match(name)):
            yield Finding((*path, "sysctls", index, "name"), f"{name!r}: must have at most 253 characters and "
                          "match the regex [a-z0-9]([-_a-z0-9]*[a-z0-9])?")
    yield from enum(context, "fsGroupChangePolicy", path, ("OnRootMismatch", "Always"))


def container_security(context: Any, path: PathKey) -> Findings:
    context = mapping(context)
    yield from _ids(context, path, ("runAsUser", "runAsGroup"))
    yield from _profile(context.get("seccompProfile"), (*path, "seccompProfile"))
    yield from _profile(context.get("appArmorProfile"), (*path, "appArmorProfile"))
    if context.get("privileged") is True and context.get("allowPrivilegeEscalation") is False:
        yield Finding((*path, "allowPrivilegeEscalation"), "cannot set `allowPrivilegeEscalation` to false and "
                      "`privileged` to true")
    added = items(mapping(context.get("capabilities")).get("add"))
    if "CAP_SYS_ADMIN" in added and context.get("allowPrivilegeEscalation") is False:
        yield Finding((*path, "allowPrivilegeEscalation"), "cannot set `allowPrivilegeEscalation` to false and "
                      "`capabilities.Add` CAP_SYS_ADMIN")
    yield from enum(context, "procMount", path, ("Default", "Unmasked"))


def _ids(context: dict[str, Any], path: PathKey, keys: tuple[str, ...]) -> Findings:
    for key in keys:
        value = context.get(key)
        if is_int(value) and not 0 <= value <= ID_MAX:
            yield Finding((*path, key), f"{value}: must be between 0 and {ID_MAX}, inclusive")


def _profile(profile: Any, path: PathKey) -> Findings:
    if not isinstance(profile, dict):
        return
    kind, local = profile.get("type"), profile.get("localhostProfile")
    if kind == "Localhost":
        if local is None:  # upstream checks the pointer: an empty profile name passes validation
            yield Finding((*path, "localhostProfile"), "Required value: must be set when seccomp type is Localhost"
                          if "seccomp" in str(path[-1]) else "Required value: must be set when AppArmor type is "
                          "Localhost")
    elif local is not None:
        yield Finding((*path, "localhostProfile"), "Invalid value: can only be set when the type is Localhost")
    if kind is None:
        yield Finding((*path, "type"), "Required value")
    elif kind not in PROFILE_TYPES:
        yield Finding((*path, "type"), f"Unsupported value {kind!r}: supported values: "
                      f"{', '.join(map(repr, PROFILE_TYPES))}")
