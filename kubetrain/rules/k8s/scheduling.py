"""Scheduling (pkg/apis/core/validation/validation.go: validateTolerations, ValidateNodeSelector,
validateAffinity, ValidateNodeSelectorRequirement, validatePodAffinityTerm, validateTopologySpreadConstraints;
apimachinery metav1validation.ValidateLabelSelector)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.rules.findings import Finding
from kubetrain.rules.k8s import names
from kubetrain.rules.k8s.base import Findings, check, enum, is_int, items, mapping, named, range_check

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def labels(value: Any, path: PathKey) -> Findings:
    """ValidateLabels: qualified-name keys and label values (nodeSelector, metadata.labels)."""
    for key, label in mapping(value).items():
        yield from check((*path, key), names.qualified_name(str(key)))
        if isinstance(label, str):
            yield from check((*path, key), names.label_value(label))


def tolerations(value: Any, path: PathKey) -> Findings:
    for toleration, where in named(value, path):
        key, operator, effect = toleration.get("key"), toleration.get("operator"), toleration.get("effect")
        if isinstance(key, str) and key:
            yield from check((*where, "key"), names.qualified_name(key))
        elif operator != "Exists":
            yield Finding((*where, "operator"), f"{operator!r}: operator must be Exists when `key` is empty, "
                          "which means \"match all values and all keys\"")
        if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
            yield Finding((*where, "effect"), f"{effect!r}: effect must be 'NoExecute' when `tolerationSeconds` "
                          "is set")
        value_ = toleration.get("value")
        if operator in (None, "", "Equal"):
            if isinstance(value_, str):
                yield from check((*where, "value"), names.label_value(value_))
        elif operator == "Exists":
            if value_:
                yield Finding((*where, "operator"), f"{value_!r}: value must be empty when `operator` is 'Exists'")
        else:
            yield Finding((*where, "operator"), f"Unsupported value {operator!r}: supported values: 'Equal', 'Exists'")
        if effect not in (None, ""):
            yield from enum(toleration, "effect", where, EFFECTS)


def affinity(value: Any, path: PathKey) -> Findings:
    value = mapping(value)
    node = mapping(value.get("nodeAffinity"))
    base = (*path, "nodeAffinity")
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if isinstance(required, dict):
        where = (*base, "requiredDuringSchedulingIgnoredDuringExecution")
        if not items(required.get("nodeSelectorTerms")):
            yield Finding((*where, "nodeSelectorTerms"), "Required value: must have at least one node selector term")
        for term, term_path in named(required.get("nodeSelectorTerms"), (*where, "nodeSelectorTerms")):
            yield from node_selector_term(term, term_path)
    yield from _preferred(node, base, "preference", node_selector_term)
    for kind in ("podAffinity", "podAntiAffinity"):
        section, where = mapping(value.get(kind)), (*path, kind)
        for term, term_path in named(section.get("requiredDuringSchedulingIgnoredDuringExecution"),
                                     (*where, "requiredDuringSchedulingIgnoredDuringExecution")):
            yield from pod_affinity_term(term, term_path)
        yield from _preferred(section, where, "podAffinityTerm", pod_affinity_term)


def _preferred(section: dict[str, Any], path: PathKey, key: str,
               term_rules: Callable[[dict[str, Any], PathKey], Findings]) -> Findings:
    """preferredDuringSchedulingIgnoredDuringExecution: a weight of 1-100 and a valid term."""
    for weighted, where in named(section.get("preferredDuringSchedulingIgnoredDuringExecution"),
                                 (*path, "preferredDuringSchedulingIgnoredDuringExecution")):
        yield from range_check(weighted, "weight", where, 1, 100)
        if isinstance(weighted.get(key), dict):
            yield from term_rules(weighted[key], (*where, key))


def node_selector_term(term: dict[str, Any], path: PathKey) -> Findings:
    for requirement, where in named(term.get("matchExpressions"), (*path, "matchExpressions")):
        key = requirement.get("key")
        if isinstance(key, str):
            yield from check((*where, "key"), names.qualified_name(key))
        yield from _requirement(requirement, where, NODE_OPERATORS)
    for requirement, where in named(term.get("matchFields"), (*path, "matchFields")):
        if requirement.get("key") != "metadata.name":
            yield Finding((*where, "key"), f"{requirement.get('key')!r}: not a valid field selector key")
        operator, values = requirement.get("operator"), items(requirement.get("values"))
        if operator not in ("In", "NotIn"):
            yield Finding((*where, "operator"), f"Unsupported value {operator!r}: supported values: 'In', 'NotIn'")
        elif len(values) != 1:
            yield Finding((*where, "values"), "must have one element")


def _requirement(requirement: dict[str, Any], path: PathKey, operators: tuple[str, ...]) -> Findings:
    operator, values = requirement.get("operator"), items(requirement.get("values"))
    if operator in ("In", "NotIn") and not values:
        yield Finding((*path, "values"), "Required value: must be specified when `operator` is 'In' or 'NotIn'")
    elif operator in ("Exists", "DoesNotExist") and values:
        yield Finding((*path, "values"), "Forbidden: may not be specified when `operator` is 'Exists' or "
                      "'DoesNotExist'")
    elif operator in ("Gt", "Lt") and operator in operators:
        if len(values) != 1:  # the value's integer form is the scheduler's concern, not validation's
            yield Finding((*path, "values"), "Required value: must be specified single value when `operator` is "
                          "'Lt' or 'Gt'")
    elif operator not in operators:
        yield Finding((*path, "operator"), f"Unsupported value {operator!r}: supported values: "
                      f"{', '.join(map(repr, operators))}")
    for index, value in enumerate(values):  # label values whatever the operator (ValidateNodeSelectorRequirement)
        if isinstance(value, str):
            yield from check((*path, "values", index), names.label_value(value))


def label_selector(selector: Any, path: PathKey) -> Findings:
    """metav1validation.ValidateLabelSelector."""
    selector = mapping(selector)
    yield from labels(selector.get("matchLabels"), (*path, "matchLabels"))
    for requirement, where in named(selector.get("matchExpressions"), (*path, "matchExpressions")):
        key = requirement.get("key")
        if isinstance(key, str):
            yield from check((*where, "key"), names.qualified_name(key))
        yield from _requirement(requirement, where, LABEL_OPERATORS)


def pod_affinity_term(term: dict[str, Any], path: PathKey) -> Findings:
    topology = term.get("topologyKey")
    if not topology:
        yield Finding((*path, "topologyKey"), "Required value: can not be empty")
    elif isinstance(topology, str):
        yield from check((*path, "topologyKey"), names.qualified_name(topology))
    for key in ("labelSelector", "namespaceSelector"):
        if isinstance(term.get(key), dict):
            yield from label_selector(term[key], (*path, key))


def topology_spread(value: Any, path: PathKey) -> Findings:
    for constraint, where in named(value, path):
        skew = constraint.get("maxSkew")
        if is_int(skew) and skew <= 0:
            yield Finding((*where, "maxSkew"), f"{skew}: must be greater than zero")
        if not constraint.get("topologyKey"):  # ValidateTopologyKey: only not empty
            yield Finding((*where, "topologyKey"), "Required value: can not be empty")
        yield from enum(constraint, "whenUnsatisfiable", where, ("DoNotSchedule", "ScheduleAnyway"))
        if isinstance(constraint.get("labelSelector"), dict):
            yield from label_selector(constraint["labelSelector"], (*where, "labelSelector"))
