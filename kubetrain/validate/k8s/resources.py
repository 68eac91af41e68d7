"""Container resources (pkg/apis/core/validation/validation.go: ValidateContainerResourceRequirements,
validateContainerResourceName, ValidateResourceQuantityValue; pkg/apis/core/helper: IsStandardContainerResourceName,
IsExtendedResourceName, IsIntegerResourceName). Negative quantities, requests over limits and unequal extended
requests and limits are checked for every `resources` block by kubetrain/validate/operators.py."""

from __future__ import annotations

from typing import Any

from kubetrain.spec.quantity import parse_quantity
from kubetrain.validate.findings import Finding
from kubetrain.validate.k8s import names
from kubetrain.validate.k8s.base import Findings, mapping
from kubetrain.yamlsrc import PathKey

STANDARD = ("cpu", "memory", "ephemeral-storage")


def is_extended(name: str) -> bool:
    """IsExtendedResourceName: domain-prefixed outside kubernetes.io, and a qualified name once 'requests.' is
    put in front (what a ResourceQuota would call it)."""
    native = "/" not in name or name.split("/", 1)[0].endswith("kubernetes.io")
    return not native and not name.startswith("requests.") and names.qualified_name("requests." + name) is None


def container_resources(resources: Any, path: PathKey) -> Findings:
    resources = mapping(resources)
    for section in ("limits", "requests"):
        for key, value in mapping(resources.get(section)).items():
            where, name = (*path, section, key), str(key)
            if name.startswith("hugepages-") or name in STANDARD:
                continue
            if not is_extended(name):
                if "/" in name and names.qualified_name(name) is None:
                    reason = "must be a standard resource for containers"
                else:
                    reason = ("must be a standard resource type (cpu, memory, ephemeral-storage, hugepages-<size>) or "
                              "fully qualified (e.g. nvidia.com/gpu)")
                yield Finding(where, f"{name!r}: {reason}")
                continue
            if _fractional(value):
                yield Finding(where, f"{value!r}: must be an integer (extended resources are counted in whole units)")


def _fractional(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return False
    try:
        amount = parse_quantity(value)
    except ValueError:
        return False
    return amount != amount.to_integral_value()
