"""A container's restartPolicy and restartPolicyRules, by version (pkg/apis/core/validation/validation.go:
validateInitContainerRestartPolicy, validateContainerRestartPolicy, validateContainers; pkg/api/pod/util.go:
dropContainerRestartRules)."""

from __future__ import annotations

from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.rules.findings import Finding
from kubetrain.rules.k8s.base import Findings, items, mapping, named
from kubetrain.rules.k8s.versions import Rules

POLICIES = ("Always", "Never", "OnFailure")
OPERATORS = ("In", "NotIn")
MAX_RULES = 20
MAX_EXIT_CODES = 255


def container_restart(container: dict[str, Any], path: PathKey, rules: Rules, *, init: bool) -> Findings:
    policy, restart_rules = container.get("restartPolicy"), container.get("restartPolicyRules")
    if policy is None and not restart_rules:
        return
    if rules.container_restart_rules:
        yield from _with_rules(policy, restart_rules, path, rules, init=init)
    elif rules.drops_container_restart_rules:
        sidecar = init and policy == "Always"
        if not (sidecar and not restart_rules):
            yield Finding((*path, "restartPolicy" if policy is not None and not sidecar else "restartPolicyRules"),
                          f"ignored by {rules.name}: ContainerRestartRules is off by default there (beta, on, in "
                          "1.35), so the API server drops it (an init container keeps only `Always`)", "warning")
    elif init and policy not in (None, "Always"):
        yield Finding((*path, "restartPolicy"), f"Unsupported value {policy!r}: supported values: 'Always' "
                      f"({rules.name}; 'OnFailure' and 'Never' need 1.35)")
    elif not init and policy is not None:
        yield Finding((*path, "restartPolicy"), f"Forbidden: may not be set for non-init containers ({rules.name}; "
                      "container restart policies need 1.35)")


def _with_rules(policy: Any, restart_rules: Any, path: PathKey, rules: Rules, *, init: bool) -> Findings:
    """validateInitContainerRestartPolicy / validateContainerRestartPolicy with ContainerRestartRules on."""
    if policy is None:
        yield Finding((*path, "restartPolicy"),
                      "Required value: must specify restartPolicy when restart rules are used")
    elif policy not in POLICIES:
        yield Finding((*path, "restartPolicy"),
                      f"Unsupported value {policy!r}: supported values: {', '.join(map(repr, POLICIES))}")
    if init and policy == "Always" and restart_rules and not rules.restart_all_containers:
        yield Finding((*path, "restartPolicyRules"), "Forbidden: restartPolicyRules are not allowed for init "
                      f"containers with restart policy Always ({rules.name})")
        return
    if len(items(restart_rules)) > MAX_RULES:
        yield Finding((*path, "restartPolicyRules"), f"Too many: {len(restart_rules)}: must have at most "
                      f"{MAX_RULES} items")
    actions = ("Restart", "RestartAllContainers") if rules.restart_all_containers else ("Restart",)
    for rule, where in named(restart_rules, (*path, "restartPolicyRules")):
        action = rule.get("action")
        if action not in actions:
            later = " (RestartAllContainers needs 1.36)" if action == "RestartAllContainers" else ""
            yield Finding((*where, "action"), f"Unsupported value {action!r}: supported values: "
                          f"{', '.join(map(repr, actions))}{later}")
        exit_codes = rule.get("exitCodes")
        if exit_codes is None:
            yield Finding((*where, "exitCodes"), "Required value: must be specified")
            continue
        operator = mapping(exit_codes).get("operator")
        if operator not in OPERATORS:
            yield Finding((*where, "exitCodes", "operator"), f"Unsupported value {operator!r}: supported values: "
                          f"{', '.join(map(repr, OPERATORS))}")
        values = items(mapping(exit_codes).get("values"))
        if len(values) > MAX_EXIT_CODES:
            yield Finding((*where, "exitCodes", "values"), f"Too many: {len(values)}: must have at most "
                          f"{MAX_EXIT_CODES} items")
