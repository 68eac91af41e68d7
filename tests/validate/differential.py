"""A differential test of `validate` that owes nothing to kubetrain's rules: cases generated from the kinds'
OpenAPI schemas and from kubectl's YAML, each judged by the real control plane.

Generator (deterministic, a seed): for every field of a valid base object, with the field's schema (a CRD's
openAPIV3Schema, or Kubernetes' own OpenAPI as kubernetes-validate packages it) —
- a value of another type (the schema's type, not the value's), and null;
- lengths and numbers at the schema's limits ±1 (maxLength, minLength, maximum, minimum, maxItems) and a
  value outside an enum; for names, 63/64 and 253/254 characters;
- YAML 1.1 spellings written unquoted in the file (`y`, `off`, `0o17`, `0x1F`, `1_000`, `1:30`, `.inf`, `~`,
  `2024-01-01`, `1e3`);
- the same key twice in a mapping (judged as kubectl sends it: sigs.k8s.io/yaml reads YAML without
  strictness, so the last value wins); the object wrapped in a `List`.

Oracle (`server_verdict`): the file's YAML sent to the suite's kube-apiserver as YAML (so the server reads it
with its own go-yaml, not kubetrain's reader), `dryRun=All&fieldValidation=Strict`, the training-operator's
and Trainer's webhooks running; then every pod template of the object *the server returned* dry-run as a Pod;
for a TrainJob, what the running Trainer and JobSet make of it (tests/validate/oracle.py: trainer_errors: the
TrainJob created suspended, the JobSet the Trainer builds, each of its Jobs and pods dry-run).
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from kubetrain.jobs.derived import replica_restart_policy
from kubetrain.jobs.podcheck import as_pod
from kubetrain.kube.errors import ApiError, status_body
from kubetrain.rules.k8s.templates import pod_templates
from kubetrain.rules.k8s.versions import DEFAULT
from kubetrain.validate.schemas import _core_schema_dir, _kv_schema_root
from tests.validate.oracle import PLURALS, SERIAL, bases, trainer_errors

Obj = dict[str, Any]
YAML11 = ["y", "n", "off", "yes", "0o17", "0x1F", "1_000", "1:30", ".inf", "~", "2024-01-01", "1e3", "012", "+1"]
RAW, DUP = "__raw_scalar__", "__duplicate_key__"
KINDS = ("Pod", "Deployment", "ConfigMap", "Service", "PyTorchJob", "TrainJob")  # TrainJob: with the Trainer


@dataclass(frozen=True)
class Case:
    kind: str
    field: str  # the mutated path, dotted
    family: str  # type, null, limit, enum, yaml, duplicate, list
    text: str  # the file
    items: tuple[str, ...]  # each object's YAML, as the server is sent it (a List: its items)
    content_type: str = "application/yaml"


@cache
def _core_definitions() -> tuple[Path, dict[str, Any]] | None:
    root = _kv_schema_root()
    directory = _core_schema_dir(root, DEFAULT) if root else None
    if directory is None:
        return None
    return directory, json.loads((directory / "_definitions.json").read_text())["$defs"]


def kind_schema(obj: Obj, crds: dict[tuple[str, str], Obj]) -> Obj:
    if (obj["apiVersion"], obj["kind"]) in crds:
        return crds[(obj["apiVersion"], obj["kind"])]
    found = _core_definitions()
    if found is None:
        return {}
    directory, _ = found
    group = obj["apiVersion"].split("/")[0].split(".")[0] if "/" in obj["apiVersion"] else ""
    name = f"{obj['kind'].lower()}-{group}-{obj['apiVersion'].split('/')[-1]}.json" if group else \
        f"{obj['kind'].lower()}-{obj['apiVersion']}.json"
    return json.loads((directory / name).read_text())  # type: ignore[no-any-return]


def _resolve(node: Any) -> Obj:
    while isinstance(node, dict) and "$ref" in node:
        found = _core_definitions()
        node = found[1].get(node["$ref"].rsplit("/", 1)[-1], {}) if found else {}
    if isinstance(node, dict) and "allOf" in node and not node.get("properties"):
        return _resolve(node["allOf"][0])
    return node if isinstance(node, dict) else {}


def child_schema(schema: Obj, key: Any) -> Obj:
    schema = _resolve(schema)
    if isinstance(key, int):
        return _resolve(schema.get("items", {}))
    properties = schema.get("properties") or {}
    if key in properties:
        return _resolve(properties[key])
    extra = schema.get("additionalProperties")
    return _resolve(extra) if isinstance(extra, dict) else {}


def _types(schema: Obj) -> set[str]:
    declared = schema.get("type")
    types = set(declared) if isinstance(declared, list) else {declared} if declared else set()
    if schema.get("x-kubernetes-int-or-string"):
        types |= {"integer", "string"}
    for option in schema.get("oneOf", []) + schema.get("anyOf", []):
        types |= _types(_resolve(option))
    return types - {"null"}


OTHER_TYPES: dict[str, Any] = {"string": "text", "integer": 7, "boolean": True, "object": {"k": "v"},
                               "array": ["a"], "number": 1.5}


def mutations(path: tuple[Any, ...], value: Any, schema: Obj) -> Iterator[tuple[str, Any]]:
    """(family, new value) for one field."""
    types = _types(schema)
    for kind, other in OTHER_TYPES.items():
        if types and kind not in types and not (kind == "integer" and "number" in types):
            yield "type", other
    yield "null", None
    if "maxLength" in schema:
        yield from (("limit", "a" * n) for n in (schema["maxLength"], schema["maxLength"] + 1))
    if schema.get("minLength"):
        yield "limit", "a" * (schema["minLength"] - 1)
    for bound, step in (("maximum", 1), ("minimum", -1)):
        if isinstance(schema.get(bound), int | float):
            yield from (("limit", schema[bound] + d) for d in (0, step))
    if "maxItems" in schema and isinstance(value, list) and value:
        yield "limit", [copy.deepcopy(value[0]) for _ in range(schema["maxItems"] + 1)]
    if schema.get("enum"):
        yield "enum", "NotAnEnumValue"
    if path[-1:] == ("name",) and isinstance(value, str):
        yield from (("limit", "n" * n) for n in (63, 64, 253, 254))
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        yield from (("yaml", (RAW, token)) for token in YAML11)
        yield "duplicate", (DUP, value)


def render(obj: Obj, path: tuple[Any, ...], new: Any) -> str:
    """The object's YAML with `path` set to `new`: a raw scalar written unquoted, or a key written twice."""
    out = copy.deepcopy(obj)
    target: Any = out
    for key in path[:-1]:
        target = target[key]
    marker = new[0] if isinstance(new, tuple) else None
    target[path[-1]] = marker if marker else new
    text = yaml.safe_dump(out, sort_keys=False, default_flow_style=False, width=10**6)
    if marker == RAW:
        return text.replace(RAW, new[1])
    if marker == DUP:
        line = next(line for line in text.splitlines() if line.rstrip().endswith(DUP))
        head = line[: line.rindex(DUP)]
        original = json.dumps(new[1])
        return text.replace(line, f"{head}{json.dumps('first')}\n{head}{original}"
                            if not head.lstrip().startswith("- ") else f"{head}{original}")
    return text


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if path:
        yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*path, index))


def all_cases(kind: str, crds: dict[tuple[str, str], Obj]) -> list[Case]:
    obj = bases()[kind]
    obj["metadata"] = {"name": "case"}  # in the namespace the oracle posts to (no metadata.namespace)
    schema = kind_schema(obj, crds)
    cases = []
    for path, value in _paths(obj):
        if path[0] in ("apiVersion", "kind"):
            continue
        node = schema
        for key in path:
            node = child_schema(node, key)
        for family, new in mutations(path, value, node):
            text = render(obj, path, new)
            if family == "duplicate":  # kubectl reads YAML without strictness: the last value wins (the base's)
                cases.append(Case(kind, ".".join(map(str, path)), family, text, (json.dumps(obj),),
                                  "application/json"))
            else:
                cases.append(Case(kind, ".".join(map(str, path)), family, text, (text,)))
    items = [obj, {**copy.deepcopy(obj), "metadata": {"name": "second"}}]
    listed = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}, sort_keys=False)
    cases.append(Case(kind, "", "list", listed, tuple(yaml.safe_dump(i, sort_keys=False) for i in items)))
    return cases


def sample(kinds: tuple[str, ...], crds: dict[tuple[str, str], Obj], per_kind: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    chosen = []
    for kind in kinds:
        cases = all_cases(kind, crds)
        chosen += rng.sample(cases, min(per_kind, len(cases)))
    return chosen


def crd_schemas(crds: list[Obj]) -> dict[tuple[str, str], Obj]:
    out = {}
    for crd in crds:
        spec = crd.get("spec") or {}
        for version in spec.get("versions", []):
            out[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = version["schema"]["openAPIV3Schema"]
    return out


# ---- the oracle ----------------------------------------------------------------------------------------------

REFUSED = (400, 403, 413, 422)
_YAML_ERROR = re.compile(r"yaml|json|unmarshal|decod", re.IGNORECASE)


def server_verdict(rest: Any, case: Case, namespace: str, trainer: Any = None) -> list[str]:
    """The control plane's refusals of the case's objects and of their pod templates (empty: accepted); a
    TrainJob's also of what the Trainer creates (`trainer`: a kubernetes client of the control plane running
    Trainer + JobSet)."""
    refusals = []
    for text in case.items:
        try:
            created = _post(rest, case.kind, namespace, text, case.content_type)
        except ApiError as exc:
            if exc.status not in REFUSED:
                raise
            refusals.append(f"{case.kind}: {status_body(exc).get('message', exc.reason)}")
            continue
        if case.kind == "TrainJob":
            refusals += trainer_errors(trainer, _as_created(created), namespace, next(SERIAL))
        for template in pod_templates(created):
            if template.partial or case.kind == "Pod":
                continue
            pod = as_pod(created, template.template)
            if case.kind == "PyTorchJob":  # the operator copies the replica's restartPolicy into its pods
                pod["spec"]["restartPolicy"] = replica_restart_policy(created["spec"]["pytorchReplicaSpecs"][
                    template.path[2]].get("restartPolicy"))
            try:
                _post(rest, "Pod", namespace, json.dumps(pod), "application/json")
            except ApiError as exc:
                if exc.status not in REFUSED:
                    raise
                refusals.append(f"Pod from {case.kind}: {status_body(exc).get('message', exc.reason)}")
    return refusals


GROUPS = {"Pod": "/api/v1", "ConfigMap": "/api/v1", "Service": "/api/v1", "Deployment": "/apis/apps/v1",
          "PyTorchJob": "/apis/kubeflow.org/v1", "TrainJob": "/apis/trainer.kubeflow.org/v1alpha1"}


def _as_created(obj: Obj) -> Obj:
    """The object the dry run returned, as a body to create: without the fields the server sets."""
    meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "labels", "annotations")}
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": meta, "spec": obj["spec"]}


def _post(rest: Any, kind: str, namespace: str, body: str, content_type: str) -> Obj:
    path = f"{GROUPS[kind]}/namespaces/{namespace}/{PLURALS[kind]}"
    return rest.json("POST", path, {"dryRun": "All", "fieldValidation": "Strict"}, body.encode(),  # type: ignore
                     content_type=content_type)


@dataclass(frozen=True)
class Verdicts:
    case: Case
    server: list[str]  # the control plane's refusals (empty: accepted)
    exact: list[str]  # `validate --exact`'s errors
    offline: list[str]  # the offline mode's errors

    @property
    def exact_disagrees(self) -> bool:
        return bool(self.server) != bool(self.exact)

    @property
    def false_red(self) -> bool:
        return bool(self.offline) and not self.server

    @property
    def false_green(self) -> bool:
        return not self.offline and bool(self.server)

    def describe(self) -> str:
        return (f"{self.case.kind} {self.case.field or '(whole object)'} ({self.case.family}):\n{self.case.text}"
                f"  server: {self.server or 'accepted'}\n  exact: {self.exact or 'valid'}\n"
                f"  offline: {self.offline or 'valid'}")


def judge(cases: list[Case], cluster: Any, namespace: str, local: Any, store: Any,
          trainer: Any = None, webhooks: Any = None) -> list[Verdicts]:
    """Each case by the control plane (`cluster`, a kubetrain Rest; `trainer`, a kubernetes client of it, for
    TrainJobs), by --exact on the local server (`local`, a Rest to it, CRDs installed; `webhooks`, the
    operators' webhooks beside it, a kubetrain.jobs.localwebhooks.LocalWebhooks) and offline."""
    from kubetrain.jobs.exactcheck import ExactChecker
    from kubetrain.validate import validate_sources

    checker = ExactChecker(local, admission=webhooks.admit if webhooks else None,
                           keep=webhooks.keep if webhooks else None)
    out = []
    for case in cases:
        sources = [(f"{case.kind}.yaml", case.text)]
        exact = [i.text() for i in checker.check_sources(sources, store).errors()]
        offline = [i.text() for i in validate_sources(sources, store).errors()]
        out.append(Verdicts(case, server_verdict(cluster, case, namespace, trainer), exact, offline))
    return out
