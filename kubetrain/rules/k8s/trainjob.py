"""A TrainJob's `spec.trainer`: the Trainer copies its env, resources and image into the runtime's `node`
container, so Kubernetes' container rules apply to them (the oracle found unqualified resource names and
invalid env names passing; tests/validate/oracle.py trainer_errors)."""

from __future__ import annotations

from typing import Any

from kubetrain.rules.findings import Finding
from kubetrain.rules.k8s import containers, resources
from kubetrain.rules.k8s.base import Findings, is_int, mapping
from kubetrain.rules.k8s.versions import Rules

MAX_INDEXED_PARALLELISM = 100_000
STAGE = "(the API server accepts the TrainJob, but the Trainer's JobSet would fail to create its pods)"


def trainer_findings(obj: dict[str, Any], rules: Rules) -> Findings:
    trainer = mapping(mapping(obj.get("spec")).get("trainer"))
    base = ("spec", "trainer")
    found = [*containers.env(trainer.get("env"), (*base, "env"), rules),
             *resources.container_resources(trainer.get("resourcesPerNode"), (*base, "resourcesPerNode"))]
    nodes = trainer.get("numNodes")
    if is_int(nodes) and nodes > MAX_INDEXED_PARALLELISM:
        # validateJobSpec: the node job is an Indexed Job whose parallelism is numNodes
        found.append(Finding((*base, "numNodes"), f"{nodes}: must be less than or equal to "
                             f"{MAX_INDEXED_PARALLELISM} (the parallelism of an Indexed Job)"))
    image = trainer.get("image")
    if isinstance(image, str) and image.strip() != image:
        found.append(Finding((*base, "image"), f"{image!r}: must not have leading or trailing whitespace"))
    for finding in found:
        yield Finding(finding.path, f"{finding.message} {STAGE}", finding.severity)
