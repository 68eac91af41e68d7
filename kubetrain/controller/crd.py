"""The TrainingJob CRD, generated from the pydantic spec model (and the status model): one source of truth.

    python -m kubetrain.controller.crd > manifests/crd/trainingjobs.kubetrain.dev.yaml
    python -m kubetrain.controller.crd sweeps > manifests/crd/sweeps.kubetrain.dev.yaml

pydantic emits JSON Schema 2020-12; a CRD needs a *structural* OpenAPI v3 schema, so `structural()`
inlines `$ref`s, turns `anyOf: [X, null]` into `nullable: true`, `const` into `enum`, numeric
`exclusiveMinimum: n` into OpenAPI 3.0's `minimum: n, exclusiveMinimum: true`, and drops what the API server
rejects or would misuse: `title`, `default` (the controller defaults with the same loader as the CLI, so
`kubectl get -o yaml` shows what the user wrote), `additionalProperties: false` (structural schemas prune
unknown fields instead) and `patternProperties`.
"""

from __future__ import annotations

import sys
from typing import Any

from kubetrain.controller.statusmodel import TrainingJobStatus
from kubetrain.jobspec.model import TrainingJob
from kubetrain.jobspec.sweep import Sweep
from kubetrain.render.yamlout import dump_yaml
from kubetrain.sweeps import resource as sweep_resource

GROUP, VERSION, KIND, PLURAL = "kubetrain.dev", "v1alpha1", "TrainingJob", "trainingjobs"
NAME = f"{PLURAL}.{GROUP}"
SHORT_NAMES = ["tj", "tjob"]
CATEGORIES = ["kubetrain", "kubeflow"]
DROP = {"title", "default", "$defs", "patternProperties"}
PRINTER_COLUMNS = [
    {"name": "Target", "type": "string", "jsonPath": ".status.target", "description": "pytorchjob or trainjob"},
    {"name": "Nodes", "type": "integer", "jsonPath": ".spec.nodes", "description": "pods"},
    {"name": "GPUs", "type": "integer", "jsonPath": ".spec.gpusPerNode", "description": "GPUs per pod"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "mirrored from the child"},
    {"name": "Step", "type": "string", "jsonPath": ".status.progress.stepText", "description": "step/total"},
    {"name": "Loss", "type": "string", "jsonPath": ".status.progress.loss", "description": "last training loss"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def structural(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """A pydantic JSON schema (node) as a structural OpenAPI v3 schema for a CRD."""
    defs = schema.get("$defs", {}) if defs is None else defs
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        return structural({**target, **{k: v for k, v in schema.items() if k != "$ref"}}, defs)
    if "anyOf" in schema:
        return _nullable(schema, defs)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in DROP or (key == "additionalProperties" and value is False):
            continue
        if key == "properties":
            out[key] = {name: structural(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = structural(value, defs)
        elif key == "const":
            out["enum"] = [value]
        elif key == "exclusiveMinimum":
            out.update(minimum=value, exclusiveMinimum=True)
        else:
            out[key] = value
    if "patternProperties" in schema and "additionalProperties" not in out:
        # env: dict[EnvName, str]. Keys are checked by the controller's loader (Valid=False names the key).
        out["additionalProperties"] = structural(next(iter(schema["patternProperties"].values())), defs)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def _nullable(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    options = [o for o in schema["anyOf"] if o.get("type") != "null"]
    if len(options) != 1:
        raise ValueError(f"cannot express anyOf {schema['anyOf']} structurally")
    merged = structural({**options[0], **{k: v for k, v in schema.items() if k != "anyOf"}}, defs)
    return {**merged, "nullable": True}


def open_api_schema() -> dict[str, Any]:
    """The version's schema: spec from the TrainingJob model, status from TrainingJobStatus."""
    job = TrainingJob.model_json_schema(by_alias=True)
    job["properties"].pop("sweep")  # a TrainingJob resource is one job; a trial's spec has no sweep section
    spec = structural(job)
    status = structural(TrainingJobStatus.model_json_schema(by_alias=True))
    properties = spec["properties"]
    return {
        "type": "object",
        "description": spec.get("description", ""),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": properties["apiVersion"]["description"]},
            "kind": {"type": "string", "description": properties["kind"]["description"]},
            # The API server owns metadata's schema; a CRD may only say "object" here.
            "metadata": {"type": "object"},
            "spec": properties["spec"],
            "status": status,
        },
    }


SWEEP_PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Running, Succeeded, Stopped..."},
    {"name": "Complete", "type": "string", "jsonPath": ".status.completed", "description": "complete/trials"},
    {"name": "Running", "type": "integer", "jsonPath": ".status.trials.running", "description": "trials running"},
    {"name": "Best", "type": "number", "jsonPath": ".status.best.value", "description": "the best objective"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def sweep_schema() -> dict[str, Any]:
    """The Sweep's schema: the sweep section (a parameter's `choice` mixes types, which a structural schema
    cannot say: parameters are checked by the controller's loader) with the trials' job spec under `trial`."""
    raw = Sweep.model_json_schema(by_alias=True)
    raw["properties"]["parameters"]["items"] = {**OPEN, "description": "choice, uniform, logUniform or int"}
    section = structural(raw)
    job_spec = open_api_schema()["properties"]["spec"]
    spec = {**section, "required": [*section.get("required", []), "trial"], "properties": {
        **section["properties"],
        "trial": {**job_spec, "description": "The spec of the job every trial runs, with its values applied."},
        "stop": {"type": "boolean", "description": "true: start no more trials and delete the running ones."}}}
    status = {"type": "object", "properties": {
        "phase": {"type": "string", "description": "Running, Stopping, Stopped, Succeeded, Failed or Invalid."},
        "message": {"type": "string", "description": "Why the sweep is Invalid."},
        "observedGeneration": {"type": "integer"},
        "completed": {"type": "string", "description": "complete/trials, for kubectl get."},
        "trials": {"type": "object", "description": "Trials by state.",
                   "additionalProperties": {"type": "integer"}},
        "best": {**OPEN, "description": "The best complete trial: its number, value and parameters."},
        "state": {**OPEN, "description": "The search engine's whole state: every trial, its parameters, state, "
                                         "intermediate values and result (docs/sweeps.md)."}}}
    return {"type": "object", "description": section.get("description", ""), "required": ["spec"],
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "metadata": {"type": "object"}, "spec": spec, "status": status}}


def _definition(group: str, kind: str, plural: str, short: list[str], schema: dict[str, Any],
                columns: list[dict[str, Any]]) -> dict[str, Any]:
    version = {
        "name": VERSION, "served": True, "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "subresources": {"status": {}},
        "additionalPrinterColumns": columns,
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}", "labels": {"app.kubernetes.io/name": "kubetrain",
                                                             "app.kubernetes.io/component": "crd"}},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower(),
                      "shortNames": short, "categories": CATEGORIES},
            "versions": [version],
        },
    }


def crd() -> dict[str, Any]:
    """The TrainingJob CustomResourceDefinition object."""
    return _definition(GROUP, KIND, PLURAL, SHORT_NAMES, open_api_schema(), PRINTER_COLUMNS)


def sweep_crd() -> dict[str, Any]:
    """The Sweep CustomResourceDefinition object."""
    return _definition(sweep_resource.GROUP, sweep_resource.KIND, sweep_resource.PLURAL, ["sw"], sweep_schema(),
                       SWEEP_PRINTER_COLUMNS)


HEADER = "# Generated from kubetrain/jobspec by `python -m kubetrain.controller.crd`; do not edit by hand.\n"
SWEEP_HEADER = HEADER.replace("crd`", "crd sweeps`")


def crd_yaml() -> str:
    return HEADER + dump_yaml([crd()])


def sweep_crd_yaml() -> str:
    return SWEEP_HEADER + dump_yaml([sweep_crd()])


if __name__ == "__main__":
    print(sweep_crd_yaml() if sys.argv[1:] == ["sweeps"] else crd_yaml(), end="")
