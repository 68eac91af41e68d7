"""The TrainingJob CRD, generated from the pydantic spec model (and the status model): one source of truth.

    python -m kubetrain.controller.crd > manifests/crd/trainingjobs.kubetrain.dev.yaml

pydantic emits JSON Schema 2020-12; a CRD needs a *structural* OpenAPI v3 schema, so `structural()`
inlines `$ref`s, turns `anyOf: [X, null]` into `nullable: true`, `const` into `enum`, numeric
`exclusiveMinimum: n` into OpenAPI 3.0's `minimum: n, exclusiveMinimum: true`, and drops what the API server
rejects or would misuse: `title`, `default` (the controller defaults with the same loader as the CLI, so
`kubectl get -o yaml` shows what the user wrote), `additionalProperties: false` (structural schemas prune
unknown fields instead) and `patternProperties`.
"""

from __future__ import annotations

from typing import Any

from kubetrain.controller.statusmodel import TrainingJobStatus
from kubetrain.jobspec.model import TrainingJob
from kubetrain.render.yamlout import dump_yaml

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


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition object."""
    version = {
        "name": VERSION, "served": True, "storage": True,
        "schema": {"openAPIV3Schema": open_api_schema()},
        "subresources": {"status": {}},
        "additionalPrinterColumns": PRINTER_COLUMNS,
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/name": "kubetrain",
                                              "app.kubernetes.io/component": "crd"}},
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": KIND.lower(),
                      "shortNames": SHORT_NAMES, "categories": CATEGORIES},
            "versions": [version],
        },
    }


HEADER = "# Generated from kubetrain/jobspec by `python -m kubetrain.controller.crd`; do not edit by hand.\n"


def crd_yaml() -> str:
    return HEADER + dump_yaml([crd()])


if __name__ == "__main__":
    print(crd_yaml(), end="")
