"""A TrainJob's `spec.trainer`: the Trainer copies its env, resources and image into the runtime's `node`
container, so Kubernetes' container rules apply to them (the oracle found unqualified resource names and
invalid env names passing; tests/validate/oracle.py trainer_errors)."""

from __future__ import annotations

from typing import Any

from kubetrain.validate.findings import Finding
from kubetrain.validate.k8s import containers, resources
from kubetrain.validate.k8s.base import Findings, mapping
from kubetrain.validate.k8s.versions import Rules

STAGE = "(the API server accepts the TrainJob, but the Trainer's JobSet would fail to create its pods)"


def trainer_findings(obj: dict[str, Any], rules: Rules) -> Findings:
    trainer = mapping(mapping(obj.get("spec")).get("trainer"))
    base = ("spec", "trainer")
    found = [*containers.env(trainer.get("env"), (*base, "env"), rules),
             *resources.container_resources(trainer.get("resourcesPerNode"), (*base, "resourcesPerNode"))]
    image = trainer.get("image")
    if isinstance(image, str) and image.strip() != image:
        found.append(Finding((*base, "image"), f"{image!r}: must not have leading or trailing whitespace"))
    for finding in found:
        yield Finding(finding.path, f"{finding.message} {STAGE}", finding.severity)
