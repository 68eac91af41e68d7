"""Dynamic Resource Allocation: ResourceClaimTemplate, ResourceClaim and DeviceClass objects, and a pod's
claims (k8s.io/kubernetes pkg/apis/resource/validation: validateDeviceClaim, validateDeviceRequest,
validateExactDeviceRequest, validateDeviceAllocationMode, validateSelector; pkg/apis/core/validation:
validatePodResourceClaims, validateResourceClaimNames; pkg/controlplane/instance.go: which resource.k8s.io
versions are served by default).

resource.k8s.io/v1 is served from Kubernetes 1.34 (DynamicResourceAllocation GA, on by default); v1beta1,
v1beta2 and v1alpha3 are disabled by default in every version (betaAPIGroupVersionsDisabledByDefault), and
before 1.34 the gate is off, so the API server drops a pod's `resourceClaims` and containers' `claims`: the
pods start without the devices.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.rules.findings import Finding
from kubetrain.rules.k8s import names
from kubetrain.rules.k8s.base import Findings, check, items, mapping, named
from kubetrain.rules.k8s.versions import Rules

GROUP = "resource.k8s.io"
KINDS = ("ResourceClaimTemplate", "ResourceClaim", "DeviceClass", "ResourceSlice")
MAX_REQUESTS = 32  # resource.DeviceRequestsMaxSize
MAX_SELECTORS = 32  # resource.DeviceSelectorsMaxSize
MAX_EXPRESSION = 10 * 1024  # resource.CELSelectorExpressionMaxLength
MODES = ("ExactCount", "All")
MAX_POD_CLAIMS = 128  # core validatePodResourceClaims (maxPodResourceClaims)


def unserved(obj: dict[str, Any], rules: Rules) -> Finding | None:
    """A resource.k8s.io object the API server of `rules` does not serve with its defaults."""
    group, _, version = str(obj.get("apiVersion", "")).partition("/")
    if group != GROUP:
        return None
    if version == "v1" and rules.dra:
        return None
    if version == "v1":
        why = (f"{rules.name} does not serve {GROUP}/v1 (GA in Kubernetes 1.34); before, DRA is a feature gate "
               f"that is off by default, with {GROUP}/v1beta1 (1.32, 1.33) behind --runtime-config")
    else:
        why = (f"{GROUP}/{version} is disabled by default in {rules.name} (beta and alpha versions of {GROUP} need "
               f"--runtime-config{'' if rules.dra else ' and the DynamicResourceAllocation feature gate'})"
               + (f"; use {GROUP}/v1" if rules.dra else ""))
    return Finding(("apiVersion",), why)


def claim_object(obj: dict[str, Any]) -> Findings:
    """ResourceClaim (spec) and ResourceClaimTemplate (spec.spec): validateResourceClaimSpec."""
    spec = mapping(obj.get("spec"))
    path: PathKey = ("spec",)
    if obj.get("kind") == "ResourceClaimTemplate":
        spec, path = mapping(spec.get("spec")), ("spec", "spec")
    devices = mapping(spec.get("devices"))
    yield from device_requests(devices.get("requests"), (*path, "devices", "requests"))


def device_requests(requests: Any, path: PathKey) -> Findings:
    listed = items(requests)
    if len(listed) > MAX_REQUESTS:
        yield Finding(path, f"Too many: {len(listed)}: must have at most {MAX_REQUESTS} items")
    seen: set[str] = set()
    for request, where in named(listed, path):
        name = request.get("name")
        yield from check((*where, "name"), names.dns1123_label(name) if isinstance(name, str) and name
                         else "Required value")
        if isinstance(name, str) and name in seen:
            yield Finding((*where, "name"), f"Duplicate value: {name!r}")
        seen.add(str(name))
        kinds = [key for key in ("exactly", "firstAvailable") if request.get(key)]
        if not kinds:
            yield Finding(where, "Required value: exactly one of `exactly` or `firstAvailable` is required")
        elif len(kinds) > 1:
            yield Finding(where, "Invalid value: exactly one of `exactly` or `firstAvailable` is required, but "
                          "multiple fields are set")
        elif kinds == ["exactly"]:
            yield from exact_request(mapping(request["exactly"]), (*where, "exactly"))
        else:
            for sub, at in named(request["firstAvailable"], (*where, "firstAvailable")):
                yield from check((*at, "name"), names.dns1123_label(str(sub.get("name") or "")))
                yield from exact_request(sub, at)


def exact_request(request: dict[str, Any], path: PathKey) -> Findings:
    """validateExactDeviceRequest: a device class, selectors, the allocation mode and its count."""
    device_class = request.get("deviceClassName")
    if not device_class:
        yield Finding((*path, "deviceClassName"), "Required value")
    elif isinstance(device_class, str):
        yield from check((*path, "deviceClassName"), names.dns1123_subdomain(device_class))
    yield from selectors(request.get("selectors"), (*path, "selectors"))
    mode, count = request.get("allocationMode") or "ExactCount", request.get("count")
    if mode not in MODES:
        yield Finding((*path, "allocationMode"), f"Unsupported value: {mode!r}: supported values: \"All\", "
                      "\"ExactCount\"")
    elif mode == "All" and count not in (None, 0):
        yield Finding((*path, "count"), f"Invalid value: {count}: must not be specified when allocationMode is 'All'")
    elif mode == "ExactCount" and isinstance(count, int) and count < 0:  # 0 (unset) is defaulted to 1
        yield Finding((*path, "count"), f"Invalid value: {count}: must be greater than zero")


def selectors(value: Any, path: PathKey) -> Findings:
    listed = items(value)
    if len(listed) > MAX_SELECTORS:
        yield Finding(path, f"Too many: {len(listed)}: must have at most {MAX_SELECTORS} items")
    for selector, where in named(listed, path):
        cel = selector.get("cel")
        if not isinstance(cel, dict):
            yield Finding((*where, "cel"), "Required value")
            continue
        expression = cel.get("expression")
        if not isinstance(expression, str) or not expression.strip():
            yield Finding((*where, "cel", "expression"), "Required value")
        elif len(expression) > MAX_EXPRESSION:
            yield Finding((*where, "cel", "expression"), f"Too long: may not be more than {MAX_EXPRESSION} bytes")


def device_class(obj: dict[str, Any]) -> Findings:
    yield from selectors(mapping(obj.get("spec")).get("selectors"), ("spec", "selectors"))


def _pod_claim_entries(claims: list[Any], path: PathKey) -> Generator[Finding, None, set[str]]:
    """The pod's resourceClaims; returns (as the generator's value) the names they declare."""
    if len(claims) > MAX_POD_CLAIMS:
        yield Finding((*path, "resourceClaims"), f"Too many: {len(claims)}: must have at most {MAX_POD_CLAIMS} items")
    declared: set[str] = set()
    for claim, where in named(claims, (*path, "resourceClaims")):
        name = claim.get("name")
        yield from check((*where, "name"), names.dns1123_label(name) if isinstance(name, str) and name
                         else "Required value")
        if name in declared:
            yield Finding((*where, "name"), f"Duplicate value: {name!r}")
        declared.add(str(name))
        sources = [key for key in ("resourceClaimName", "resourceClaimTemplateName") if claim.get(key)]
        if len(sources) != 1:
            yield Finding(where, "Invalid value: must specify exactly one of resourceClaimName or "
                          "resourceClaimTemplateName" if sources else "Required value: must specify one of: "
                          "`resourceClaimName`, `resourceClaimTemplateName`")
        for key in sources:
            yield from check((*where, key), names.dns1123_subdomain(str(claim[key])))
    return declared


def pod_claims(spec: dict[str, Any], path: PathKey, rules: Rules) -> Generator[Finding, None, None]:
    """validatePodResourceClaims and each container's `resources.claims` (validateResourceClaimNames)."""
    claims = items(spec.get("resourceClaims"))
    used = [(c, w) for key in ("initContainers", "containers") for c, w in named(spec.get(key), (*path, key))
            if items(mapping(c.get("resources")).get("claims"))]
    if not claims and not used:
        return
    if not rules.dra:
        where = (*path, "resourceClaims") if claims else (*used[0][1], "resources", "claims")
        yield Finding(where, f"{rules.name} drops pod resourceClaims and container claims (DynamicResourceAllocation "
                      "is off by default before 1.34): the pods would start without their devices")
        return
    declared = yield from _pod_claim_entries(claims, path)
    for container, where in used:
        seen: set[tuple[str, str]] = set()
        for ref, at in named(mapping(container.get("resources")).get("claims"), (*where, "resources", "claims")):
            name = str(ref.get("name") or "")
            if not name:
                yield Finding((*at, "name"), "Required value")
            elif name not in declared:
                yield Finding((*at, "name"), f"Not found: {name!r}: must be one of the pod's resourceClaims")
            key = (name, str(ref.get("request") or ""))
            if key in seen:
                yield Finding(at, f"Duplicate value: {name!r}")
            seen.add(key)
