"""All of Kubernetes' rules that apply to one object: its metadata, its kind's own rules, and every pod
template in it (the package's other modules are the rule families, each importable alone)."""


from __future__ import annotations

from typing import Any

from kubetrain.rules.findings import Finding
from kubetrain.rules.k8s import integers, metadata, objects, podspec, trainjob
from kubetrain.rules.k8s.templates import pod_templates
from kubetrain.rules.k8s.versions import LATEST, Rules


def k8s_findings(obj: dict[str, Any], text: str | None = None, rules: Rules = LATEST) -> list[Finding]:
    """`text`: the object as compact JSON (kubetrain.yamlsrc.compact_json), when the caller has it; `rules`: the
    Kubernetes version's (kubetrain/rules/k8s/versions.py)."""
    findings = list(metadata.object_metadata(obj.get("metadata")))
    findings += integers.overflow_findings(obj, text)
    kind_rules = objects.BY_KIND.get(str(obj.get("kind")))
    if kind_rules is not None:
        findings += kind_rules(obj)
    if obj.get("kind") == "TrainJob":
        findings += trainjob.trainer_findings(obj, rules)
    for template in pod_templates(obj):
        for finding in podspec.pod_template(template.template, template.path, partial=template.partial,
                                            rules=rules, runtime_volumes=template.runtime_volumes):
            if template.sets_restart_policy and finding.path == (*template.path, "spec", "restartPolicy"):
                continue
            message = finding.message if template.stage is None else (
                f"{finding.message} (the API server accepts the {obj['kind']}, but {template.stage})")
            findings.append(Finding(finding.path, message, finding.severity))
    return findings
