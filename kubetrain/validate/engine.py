"""Validate any manifests offline: schema (CRD or core OpenAPI), metadata and semantic checks."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from kubetrain.errors import SpecError
from kubetrain.fieldpath import PathKey, join_path
from kubetrain.kube.objects import meta_of
from kubetrain.rules import names
from kubetrain.rules.findings import Finding
from kubetrain.rules.k8s import dra
from kubetrain.rules.k8s.check import k8s_findings
from kubetrain.rules.k8s.objects import BY_KIND
from kubetrain.validate.cel import cel_findings
from kubetrain.validate.openapi import drop_null_fields, prune_nulls
from kubetrain.validate.schemas import MISSING_HINT, SchemaStore
from kubetrain.validate.semantic import misplaced_run_policies, semantic_findings
from kubetrain.yamlsrc import (
    ParsedDoc,
    compact_json,
    line_for,
    object_size_problem,
    parse_documents,
)

ANNOTATIONS_LIMIT = 256 * 1024  # ValidateAnnotationsSize (TotalAnnotationSizeLimitB)
SKIPPED_GROUPS = ("kustomize.config.k8s.io/",)
SPEC_GROUP = "kubetrain.dev/"
EMPTY_INPUT = "no Kubernetes objects (empty, only comments or only ---)"


@dataclass(frozen=True)
class Issue:
    """One problem in one document, with enough context to find it."""

    severity: str
    source: str
    document: int  # 1-based index within its file
    kind: str
    name: str
    path: str
    message: str
    line: int | None = None

    def text(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        subject = f"{self.kind}/{self.name}" if self.kind else "document"
        path = f"{self.path}: " if self.path else ""
        return f"{self.severity}: {where}: doc {self.document} {subject}: {path}{self.message}"


# Kinds whose Kubernetes (or operator) rules kubetrain ports; any other kind gets its schema checked only.
RULED_KINDS = frozenset({*BY_KIND, "Pod", "CronJob", "JobSet", "PyTorchJob", "TrainJob", "ClusterTrainingRuntime",
                         "TrainingRuntime", "TrainingJob"})
NOT_CHECKED_OFFLINE = ("admission plugins (PodSecurity, LimitRange, quotas; Priority only warned), update rules, and "
                       "what the operators create beyond kubetrain's ported rules")


@dataclass
class Report:
    issues: list[Issue] = field(default_factory=list)
    documents: int = 0
    schema_only: set[str] = field(default_factory=set)  # kinds checked against their schema only

    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "error"]

    def warnings(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "warning"]

    def failed(self, strict: bool = False) -> bool:
        return bool(self.errors() or (strict and self.warnings()))

    def as_dict(self, strict: bool = False) -> dict[str, Any]:
        return {"valid": not self.failed(strict), "documents": self.documents,
                "errors": len(self.errors()), "warnings": len(self.warnings()),
                "issues": [asdict(i) for i in self.issues]}

    def not_checked(self) -> str:
        """What the offline check left out, in one line."""
        kinds = f"Kubernetes' rules for {', '.join(sorted(self.schema_only))} (schema only); " if self.schema_only \
            else ""
        return f"not checked offline: {kinds}{NOT_CHECKED_OFFLINE}"


def validate_sources(sources: Iterable[tuple[str, str]], store: SchemaStore,
                     ignore_missing_schemas: bool = False, skip_foreign: bool = False) -> Report:
    """Validate every document of every (source name, text).

    `skip_foreign` (the pre-commit hook) passes over YAML that is not a Kubernetes object at all (workflows,
    Hydra or conda configs) instead of reporting it, and does not require a file to hold any object.
    """
    report = Report()
    for doc, source, index in documents(sources, report, skip_foreign):
        report.issues += validate_document(doc, source, index, store, ignore_missing_schemas)
        report.schema_only |= _schema_only_kinds(doc.data)
    return report


def documents(sources: Iterable[tuple[str, str]], report: Report,
              skip_foreign: bool = False) -> Iterator[tuple[ParsedDoc, str, int]]:
    """Each document of each (source name, text) as kubectl reads them, with its source and 1-based index;
    what is the input's own fault (YAML errors, duplicate keys, a file with no object) goes into `report`."""
    for source, text in sources:
        try:
            docs = parse_documents(text, source, strict_keys=False)
        except SpecError as exc:
            if not skip_foreign:
                report.issues += [Issue("error", source, 0, "", "", p.field, p.message, p.line)
                                  for p in exc.problems]
            continue
        index = 0
        for doc in docs:
            if doc.data is None or (skip_foreign and not _is_object(doc.data)):
                continue
            index += 1
            report.documents += 1
            report.issues += duplicate_key_issues(doc, source, index)
            yield doc, source, index
        if index == 0 and not skip_foreign:
            report.issues.append(Issue("error", source, 0, "", "", "", EMPTY_INPUT))


def duplicate_key_issues(doc: ParsedDoc, source: str, index: int) -> list[Issue]:
    """A key written twice: kubectl keeps the last value (a warning); in a kubetrain.yaml spec, an error."""
    spec = _is_object(doc.data) and doc.data["apiVersion"].startswith(SPEC_GROUP)
    message = "duplicate key" if spec else "duplicate key: kubectl keeps the last value, the first is lost"
    return [Issue("error" if spec else "warning", source, index, "", "", p.field, message, p.line)
            for p in doc.duplicates]


def _schema_only_kinds(data: Any) -> set[str]:
    if not _is_object(data):
        return set()
    if data["kind"] == "List" and isinstance(data.get("items"), list):
        return {kind for item in data["items"] for kind in _schema_only_kinds(item)}
    return set() if data["kind"] in RULED_KINDS else {data["kind"]}


def _is_object(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("apiVersion"), str) and isinstance(data.get("kind"), str)


def validate_objects(objects: list[dict[str, Any]], store: SchemaStore, source: str = "<rendered>") -> Report:
    """Validate objects already in memory (what `render` produced), without re-reading YAML."""
    report = Report(documents=len(objects))
    for index, obj in enumerate(objects, 1):
        report.issues += validate_document(ParsedDoc(obj), source, index, store)
    return report


def validate_document(doc: ParsedDoc, source: str, index: int, store: SchemaStore,
                      ignore_missing_schemas: bool = False) -> list[Issue]:
    obj = doc.data
    if not _is_object(obj):
        return [Issue("error", source, index, "", "", "", "not a Kubernetes object: apiVersion and kind are required",
                      doc.start_line)]
    kind = obj["kind"]
    name = str(meta_of(obj).get("name", "")) if isinstance(obj.get("metadata"), dict) else ""

    def issue(finding: Finding) -> Issue:
        return Issue(finding.severity, source, index, kind, name, join_path(finding.path), finding.message,
                     line_for(finding.path, doc.lines))

    if obj["apiVersion"].startswith(SKIPPED_GROUPS):
        return []
    if obj["apiVersion"].startswith(SPEC_GROUP) and kind == "TrainingJob":
        return _spec_issues(doc, source, index, name)
    if kind == "List" and isinstance(obj.get("items"), list):
        return [i for item in obj["items"] for i in validate_document(ParsedDoc(item), source, index, store)]
    if (unserved := dra.unserved(obj, store.rules)) is not None:
        return [issue(unserved)]  # its schema (if any) and rules are moot: the server refuses the kind
    crd = store.crds.get((obj["apiVersion"], kind))
    obj = prune_nulls(obj, crd.schema) if crd is not None else drop_null_fields(obj)
    findings = _schema_findings(obj, store, ignore_missing_schemas)
    text = compact_json(obj)
    findings += size_findings(obj, text)
    findings += _metadata_findings(obj)
    findings += semantic_findings(obj)
    reported = {f.path for f in findings if f.severity == "error"}
    findings += [f for f in k8s_findings(obj, text, store.rules) if f.path not in reported]  # one message per field
    issues = [issue(f) for f in findings]
    return sorted(issues, key=lambda i: (i.line or 0, i.path))


def _spec_issues(doc: ParsedDoc, source: str, index: int, name: str) -> list[Issue]:
    """A kubetrain.yaml among the manifests: checked by the spec loader, exactly as `render` would."""
    from kubetrain.jobspec.load import validate_data  # the spec models cost ~100 ms to build; only when needed

    try:
        validate_data(doc.data, doc.lines, source, doc.plain)
    except SpecError as exc:
        return [Issue("error", source, index, "TrainingJob", name, p.field, p.message, p.line) for p in exc.problems]
    return []


def size_findings(obj: dict[str, Any], text: str | None = None) -> list[Finding]:
    problem = object_size_problem(obj, text)
    if problem:
        return [Finding(*problem)]
    size = len((compact_json(obj) if text is None else text).encode())
    if size > ANNOTATIONS_LIMIT:  # a warning: `kubectl create` and server-side apply add no such annotation
        return [Finding(("metadata", "annotations"), f"client-side `kubectl apply` would store the whole object "
                        f"({size} bytes) in the last-applied-configuration annotation, over the API server's "
                        f"{ANNOTATIONS_LIMIT}-byte limit on annotations: use `kubectl apply --server-side`",
                        "warning")]
    return []


def _schema_findings(obj: dict[str, Any], store: SchemaStore, ignore_missing: bool) -> list[Finding]:
    crd = store.crds.get((obj["apiVersion"], obj["kind"]))
    if store.passes(obj):  # the compiled check: no schema error, so jsonschema has nothing to explain
        return cel_findings(crd.schema, obj) if crd is not None else []
    found = store.validator(obj["apiVersion"], obj["kind"])
    if found is None:
        message = f"no schema for {obj['apiVersion']} {obj['kind']}: {MISSING_HINT}"
        return [Finding((), message, "warning" if ignore_missing else "error")]
    validator, _ = found
    misplaced = set(misplaced_run_policies(obj)) if obj["kind"] == "PyTorchJob" else set()
    findings: list[Finding] = []
    for error in validator.iter_errors(obj):
        findings += [f for f in _humanize(error) if f.path not in misplaced]
    if crd is not None and not findings:  # the apiserver runs CEL rules only on a schema-valid object
        findings += cel_findings(crd.schema, obj)
    return findings


def _humanize(error: Any) -> list[Finding]:
    path: PathKey = tuple(error.absolute_path)
    validator, instance, schema = error.validator, error.instance, error.schema
    if validator == "additionalProperties" and isinstance(instance, dict):
        known = list(schema.get("properties", {}))
        return [Finding((*path, extra), "unknown field" + _did_you_mean(extra, known))
                for extra in instance if extra not in known]
    if validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else ""
        return [Finding((*path, missing), "required field is missing")]
    if validator == "type":
        return [Finding(path, f"must be {_type_words(error.validator_value)}, not {_describe(instance)}")]
    if validator == "anyOf" and {"integer", "string"} == {s.get("type") for s in error.validator_value}:
        pattern = next((s.get("pattern", "") for s in error.validator_value if s.get("type") == "string"), "")
        if isinstance(instance, str) and "KMGTPE" in pattern:
            return [Finding(path, f"{instance!r} is not a Kubernetes quantity (e.g. '8', '500m', '32Gi')")]
        if isinstance(instance, str):
            return [Finding(path, f"{instance!r} does not match {pattern}")]
        return [Finding(path, f"must be an integer or a string, not {_describe(instance)}")]
    if validator == "enum":
        return [Finding(path, f"must be one of {', '.join(map(repr, error.validator_value))}, not {instance!r}")]
    return [Finding(path, error.message)]


def _metadata_findings(obj: dict[str, Any]) -> list[Finding]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return [Finding(("metadata",), "required field is missing")]
    findings = [Finding(("metadata", key), f"must be a string, not {_describe(metadata[key])}")
                for key in ("name", "generateName", "namespace") if key in metadata
                and not isinstance(metadata[key], str)]  # ObjectMeta, as Go's JSON decoder reads it
    findings += [Finding(("metadata", key), f"must be a mapping, not {_describe(metadata[key])}")
                 for key in ("labels", "annotations") if key in metadata and not isinstance(metadata[key], dict)]
    name = metadata.get("name")
    if not name and not metadata.get("generateName"):
        findings.append(Finding(("metadata", "name"), "required field is missing"))
    elif isinstance(name, str) and (error := names.subdomain_error(name)):
        findings.append(Finding(("metadata", "name"), error))
    for section, check_values in (("labels", True), ("annotations", False)):
        for key, value in (metadata.get(section) or {}).items() if isinstance(metadata.get(section), dict) else ():
            # ValidateAnnotations checks the lower-cased key; ValidateLabels the key as written
            error = names.qualified_name_error(str(key) if check_values else str(key).lower())
            if not error and check_values and isinstance(value, str):
                error = names.label_value_error(value)
            if error:
                findings.append(Finding(("metadata", section, key), error))
    return findings


def _did_you_mean(word: str, known: list[str]) -> str:
    close = difflib.get_close_matches(word, known, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _type_words(expected: Any) -> str:
    kinds = expected if isinstance(expected, list) else [expected]
    words = {"integer": "an integer", "string": "a string", "object": "a mapping", "array": "a list",
             "boolean": "a boolean", "number": "a number", "null": "null"}
    return " or ".join(words.get(str(k), str(k)) for k in kinds)


def _describe(value: Any) -> str:
    kind = {dict: "a mapping", list: "a list", str: "the string", bool: "the boolean", int: "the integer",
            float: "the number"}.get(type(value), type(value).__name__)
    if isinstance(value, dict | list):
        return kind
    return f"{kind} {value!r}"
