"""Container resources (pkg/apis/core/validation/validation.go: ValidateContainerResourceRequirements,
validateContainerResourceName, ValidateResourceQuantityValue; pkg/apis/core/helper: IsStandardContainerResourceName,
IsExtendedResourceName, IsIntegerResourceName). Negative quantities, requests over limits and unequal extended
requests and limits are checked for every `resources` block by kubetrain/validate/operators.py."""

from __future__ import annotations

from decimal import Decimal
from functools import lru_cache
from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.rules.findings import Finding
from kubetrain.rules.k8s import names
from kubetrain.rules.k8s.base import Findings, mapping
from kubetrain.rules.quantity import is_quantity, parse_quantity

STANDARD = ("cpu", "memory", "ephemeral-storage")


def is_native(name: str) -> bool:
    """IsNativeResource: no domain, or a kubernetes.io one."""
    return "/" not in name or "kubernetes.io/" in name


@lru_cache(names.CACHE)
def is_extended(name: str) -> bool:
    """IsExtendedResourceName: not native, and a qualified name once 'requests.' is put in front (what a
    ResourceQuota would call it)."""
    return not is_native(name) and not name.startswith("requests.") and names.qualified_name("requests." + name) is None


@lru_cache(names.CACHE)
def resource_name_problem(name: str) -> str | None:
    """validateContainerResourceName."""
    if problem := names.qualified_name(name):
        return problem
    if "/" not in name:
        if name not in STANDARD and not name.startswith("hugepages-"):
            return (f"{name!r}: must be a standard resource for containers (cpu, memory, ephemeral-storage, "
                    "hugepages-<size>) or a domain-qualified extended resource (e.g. nvidia.com/gpu)")
    elif not is_native(name) and not is_extended(name):
        return f"{name!r}: doesn't follow extended resource name standard"
    return None


def container_resources(resources: Any, path: PathKey) -> Findings:
    resources = mapping(resources)
    for section in ("limits", "requests"):
        for key, value in mapping(resources.get(section)).items():
            where, name = (*path, section, key), str(key)
            if problem := resource_name_problem(name):
                yield Finding(where, problem)
            elif isinstance(value, str) and not is_quantity(value.strip()):  # resource.Quantity's UnmarshalJSON
                yield Finding(where, f"{value!r} is not a Kubernetes quantity (e.g. '8', '500m', '32Gi'): the API "
                              "server cannot decode it")
            elif is_extended(name) and _fractional(value):
                yield Finding(where, f"{value!r}: must be an integer (extended resources are counted in whole units)")
            elif name.startswith("hugepages-") and (problem := _huge_page_problem(name, value)):
                yield Finding(where, problem)
    yield from _huge_pages(resources, path)


def _huge_pages(resources: dict[str, Any], path: PathKey) -> Findings:
    """Huge pages cannot be overcommitted (a request equals its limit), and need a cpu or memory amount."""
    limits, requests = mapping(resources.get("limits")), mapping(resources.get("requests"))
    pages = [n for n in (*limits, *requests) if str(n).startswith("hugepages-")]
    for name in requests:
        if str(name).startswith("hugepages-"):
            if name not in limits:
                yield Finding((*path, "limits"), "Required value: Limit must be set for non overcommitable resources")
            elif _amount(requests[name]) != _amount(limits[name]):
                yield Finding((*path, "requests", name), f"{requests[name]!r}: must be equal to {name} limit of "
                              f"{limits[name]}")
    if pages and not any(n in ("cpu", "memory") for n in (*limits, *requests)):
        yield Finding(path, "Forbidden: HugePages require cpu or memory")


def _huge_page_problem(name: str, value: Any) -> str | None:
    """validateResourceQuantityHugePageValue: a positive whole number of pages."""
    amount, page = _amount(value), _amount(name.removeprefix("hugepages-"))
    if amount is None or page is None or page <= 0:
        return None
    if amount <= 0 or amount % page:
        return f"{value!r} is not positive integer multiple of {name}"
    return None


def _amount(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        return parse_quantity(value)
    except ValueError:
        return None


def _fractional(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return False
    try:
        amount = parse_quantity(value)
    except ValueError:
        return False
    return amount != amount.to_integral_value()
