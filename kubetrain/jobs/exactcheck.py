"""`validate --exact`: the API server's own verdict on every document, and on what the operators would create.

Each object is sent to a real kube-apiserver (kubetrain.jobs.localapi) with `dryRun=All` and
`fieldValidation=Strict`, as `kubectl apply --validate=strict` sends it: with client-side apply's
last-applied-configuration annotation on a create (so a 300 KB ConfigMap is refused: the annotation exceeds
256 KiB), or as a server-side apply patch (`--server-side`). Then, for an accepted object, what its
controllers would create is sent the same way (kubetrain.jobs.derived): every pod template as a Pod (pod
validation and pod admission, e.g. Priority, which no dry run of a Deployment or PyTorchJob runs) and the
training-operator's Services, and a TrainJob's JobSet, Jobs and pods as the Trainer and JobSet build them
(from a runtime the files define, else the shipped torch-distributed). The operators' own admission webhooks
are not running here; their create-time rules come from kubetrain's port (kubetrain.validate.operators), and
say so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kubetrain.fieldpath import PathKey, join_path
from kubetrain.jobs.derived import Derived, derived_objects, operator_rule_findings
from kubetrain.jobs.trainjobset import runtime_for
from kubetrain.kube.errors import ApiError, Conflict, Invalid, NotFound, api_message, status_body
from kubetrain.kube.rest import Rest
from kubetrain.rules.findings import Finding, get
from kubetrain.rules.runtimes import runtime_of
from kubetrain.validate.engine import Issue, Report, documents, validate_document
from kubetrain.yamlsrc import ParsedDoc, line_for

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
NOT_AN_OBJECT = "not a Kubernetes object: apiVersion and kind are required"
_UNKNOWN_FIELD = re.compile(r'unknown field "([^"]+)"')
# encoding/json's error names the field without list indexes: "json: cannot unmarshal bool into Go struct
# field EnvVar.spec.containers.env.value of type string"
_UNMARSHAL = re.compile(r"cannot unmarshal (\w+)(?: [^ ]+)? into Go struct field \w+\.([\w.]+) of type")
_JSON_TYPES = {"bool": (bool,), "number": (int, float), "string": (str,), "array": (list,), "object": (dict,)}
_FIELD_PART = re.compile(r"([^.\[\]]+)|\[([^\]]*)\]")
# An operator's webhook puts its field.ErrorList in the message: 'admission webhook "..." denied the request:
# spec.pytorchReplicaSpecs[Chief]: Unsupported value: ...'
_WEBHOOK_FIELD = re.compile(r'admission webhook "[^"]+" denied the request: \[?'
                            r"([A-Za-z]\w*(?:\.[A-Za-z]\w*|\[[^\]]*\])*): ")
# JobSet's webhook refuses a JobSet whose Jobs' or pods' generated names would be too long: the name's fault
_NAME_TOO_LONG = re.compile(r"name is too long|must be no more than 63 characters")
# Refusals that depend on what a cluster holds, not on the object: warnings, not errors.
CLUSTER_STATE = ("no PriorityClass with name",)
RUNTIME_MISSING = "must be created before the TrainJob is created"  # the Trainer's webhook


@dataclass
class Discovery:
    """(apiVersion, kind) -> (plural, namespaced), from the server's discovery documents, per run."""

    rest: Rest
    _lists: dict[str, dict[str, tuple[str, bool]] | None] = field(default_factory=dict)

    def resource(self, api_version: str, kind: str) -> tuple[str, bool] | None:
        if api_version not in self._lists:
            self._lists[api_version] = self._fetch(api_version)
        return (self._lists[api_version] or {}).get(kind)

    def forget(self, api_version: str) -> None:
        self._lists.pop(api_version, None)

    def _fetch(self, api_version: str) -> dict[str, tuple[str, bool]] | None:
        path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if "/" not in api_version and api_version != "v1":
            return None
        try:
            listing = self.rest.get(path)
        except NotFound:
            return None
        return {r["kind"]: (r["name"], bool(r.get("namespaced"))) for r in listing.get("resources", [])
                if isinstance(r, dict) and "/" not in str(r.get("name"))}


class ExactChecker:
    """Dry-runs documents on one server; `server_side` sends them as server-side apply patches; `install`
    (apiVersion, kind) installs the CRD of a kind, if we have it and the server does not serve it as given
    (True when it installed one now)."""

    def __init__(self, rest: Rest, server_side: bool = False, ignore_missing: bool = False,
                 install: Callable[[str, str], bool] | None = None,
                 admission: Callable[[str, str], bool] | None = None,
                 keep: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.rest, self.server_side, self.ignore_missing = rest, server_side, ignore_missing
        self.install, self._seen = install, set[tuple[str, str]]()
        self.admission = admission
        self.webhooks = set[str]()  # kinds whose operator's own webhooks run on the server
        self.keep = keep  # an accepted object that later ones need on the server for real (a Trainer runtime)
        self.discovery = Discovery(rest)
        self._namespaces: dict[str, str | None] = {}
        self.accepted: dict[str, Any] | None = None  # the last object the server accepted, as it would store it
        self.runtimes: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, namespace, name): accepted

    def check_sources(self, sources: Iterable[tuple[str, str]], store: Any, skip_foreign: bool = False) -> Report:
        report = Report()
        for doc, source, index in documents(sources, report, skip_foreign):
            report.issues += self.check_document(doc, source, index, store)
        return report

    def check_document(self, doc: ParsedDoc, source: str, index: int, store: Any) -> list[Issue]:
        obj = doc.data
        if not _is_object(obj):
            return [Issue("error", source, index, "", "", "", NOT_AN_OBJECT, doc.start_line)]
        if obj["apiVersion"].startswith("kubetrain.dev/"):  # a job spec: the spec loader's verdict
            return validate_document(doc, source, index, store)
        if obj["kind"].endswith("List") and isinstance(obj.get("items"), list):  # kubectl applies each item
            return [i for n, item in enumerate(obj["items"]) for i in self.check_document(
                ParsedDoc(item, _sublines(doc.lines, ("items", n))), source, index, store)]
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        kind, name = str(obj["kind"]), str(meta.get("name") or meta.get("generateName") or "")

        def issue(finding: Finding) -> Issue:
            return Issue(finding.severity, source, index, kind, name, join_path(finding.path), finding.message,
                         line_for(finding.path, doc.lines))

        self.accepted = None
        findings = self.object_findings(obj)
        if self.accepted is not None and not any(f.severity == "error" for f in findings):
            # the operators see the object as stored: nulls pruned, defaults set
            self.remember_runtime(self.accepted)
            if self.keep is not None:
                self.keep(obj)
            if kind not in self.webhooks:  # the operator's webhook did not run: kubetrain's port of its rules
                findings += list(operator_rule_findings(self.accepted))
            findings += self.derived_findings(self.accepted)
        return sorted((issue(f) for f in findings), key=lambda i: (i.line or 0, i.path))

    def object_findings(self, obj: dict[str, Any]) -> list[Finding]:
        found = self.resource(obj["apiVersion"], obj["kind"])
        if found is None:
            return [Finding((), f'no matches for kind "{obj["kind"]}" in version "{obj["apiVersion"]}": the API '
                            "server does not serve it (install its CRD: --schema FILE, or `kubetrain schemas "
                            "fetch` for the training operators' CRDs)", "warning" if self.ignore_missing else "error")]
        plural, namespaced = found
        namespace = None
        if namespaced:
            namespace = str(_meta(obj).get("namespace") or "default")
            if problem := self.ensure_namespace(namespace):
                return [Finding(("metadata", "namespace"), problem)]
        return [_shipped_runtime_missing(obj, f) for f in self.dry_run(obj, plural, namespace, ())]

    def resource(self, api_version: str, kind: str) -> tuple[str, bool] | None:
        """(plural, namespaced) of a kind the server serves. The first time a kind is seen its CRD, when we
        have one, is installed (or replaced, if it changed): a cold server gets only the CRDs its documents
        need, each of which takes seconds to be established."""
        if self.install is not None and (api_version, kind) not in self._seen:
            self._seen.add((api_version, kind))
            if self.install(api_version, kind):
                self.discovery.forget(api_version)
        found = self.discovery.resource(api_version, kind)
        if found is not None and self.admission is not None and kind not in self.webhooks and \
                self.admission(api_version, kind):
            self.webhooks.add(kind)
        return found

    def remember_runtime(self, obj: dict[str, Any]) -> None:
        """A (Cluster)TrainingRuntime the files define: the TrainJobs after it that name it are derived from it."""
        kind = obj.get("kind")
        if kind in ("TrainingRuntime", "ClusterTrainingRuntime"):
            namespace = str(_meta(obj).get("namespace") or "default") if kind == "TrainingRuntime" else ""
            self.runtimes[(str(kind), namespace, str(_meta(obj).get("name")))] = obj

    def derived_findings(self, obj: dict[str, Any]) -> list[Finding]:
        findings: list[Finding] = []
        namespace = str(_meta(obj).get("namespace") or "default")
        runtime = runtime_for(obj, self.runtimes) if obj.get("kind") == "TrainJob" else None
        broken = False  # a refused object of a chain: what is made from it is not sent
        for item in derived_objects(obj, runtime):
            found = self.resource(item.body["apiVersion"], item.body["kind"])
            if (broken and item.chained) or found is None or (found[1] and self.ensure_namespace(namespace)):
                continue
            refusals = self.dry_run(item.body, found[0], namespace if found[1] else None, item.path, item)
            broken = broken or (item.chained and any(f.severity == "error" for f in refusals))
            findings += refusals
        return findings

    def ensure_namespace(self, namespace: str) -> str | None:
        """Namespaces are cluster state: one the manifest names is created (for real) on the local server."""
        if namespace not in self._namespaces:
            self._namespaces[namespace] = self._create_namespace(namespace)
        return self._namespaces[namespace]

    def _create_namespace(self, namespace: str) -> str | None:
        try:
            self.rest.json("POST", "/api/v1/namespaces", None, {"apiVersion": "v1", "kind": "Namespace",
                                                                "metadata": {"name": namespace}})
        except Conflict:
            return None  # it exists
        except ApiError as exc:
            return api_message(exc)
        return None

    def dry_run(self, obj: dict[str, Any], plural: str, namespace: str | None, base: PathKey,
                derived: Derived | None = None) -> list[Finding]:
        group_version = obj["apiVersion"]
        prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        collection = f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"
        query = {"dryRun": "All", "fieldValidation": "Strict"}
        try:
            if self.server_side and derived is None:
                name = _meta(obj).get("name")
                if not isinstance(name, str) or not name:
                    return [Finding(("metadata", "name"), "server-side apply needs metadata.name")]
                response = self.rest.request("PATCH", f"{collection}/{name}", {**query, "fieldManager": "kubectl"},
                                             json.dumps(obj), content_type="application/apply-patch+yaml")
            else:
                body = obj if derived is not None else with_last_applied(obj)
                response = self._create(collection, {**query, "fieldManager": "kubectl-client-side-apply"}, body)
        except ApiError as exc:
            return list(_refusal(exc, base, derived, obj))
        if derived is None:
            self.accepted = _json_object(response.data)
        return [Finding(base, f"{_prefix(derived)}{warning}", "warning") for warning in _warnings(response.headers)]

    def _create(self, collection: str, query: dict[str, str], body: dict[str, Any]) -> Any:
        """A dry-run create; for an object the local server holds for real (a namespace, a runtime kubetrain
        created for the Trainer's webhook), a dry-run update instead, as `kubectl apply` would send."""
        try:
            return self.rest.request("POST", collection, query, json.dumps(body))
        except Conflict as exc:
            name = _meta(body).get("name")
            if status_body(exc).get("reason") != "AlreadyExists" or not isinstance(name, str):
                raise
            current = self.rest.get(f"{collection}/{name}")
            version = _meta(current).get("resourceVersion")
            update = {**body, "metadata": {**_meta(body), "resourceVersion": version}}
            return self.rest.request("PUT", f"{collection}/{name}", query, json.dumps(update))


def _shipped_runtime_missing(obj: dict[str, Any], finding: Finding) -> Finding:
    """A TrainJob naming a runtime the local server lacks is refused by the Trainer's webhook. A runtime Trainer
    v2.3.0 ships is installed with it in a cluster: a warning (cluster state). Any other runtime must be in
    the files validated, or the cluster refuses the TrainJob too: an error."""
    if finding.severity != "error" or RUNTIME_MISSING not in finding.message or runtime_of(
            get(obj, "spec", "runtimeRef")) is None:
        return finding
    return Finding(finding.path, f"{finding.message} (a runtime Trainer v2.3.0 installs: check that your "
                   "cluster has it)", "warning")


def with_last_applied(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as client-side `kubectl apply` creates it: with its own JSON (without this annotation) in
    the last-applied-configuration annotation, encoded as Go's encoding/json does (sorted keys, HTML-safe).
    An object without a metadata mapping is sent as it is, for the server to refuse."""
    if not isinstance(obj.get("metadata"), dict):
        return obj
    meta = dict(_meta(obj))
    annotations = dict(meta.get("annotations") or {}) if isinstance(meta.get("annotations"), dict) else {}
    annotations.pop(LAST_APPLIED, None)
    original = {**obj, "metadata": {**meta, "annotations": annotations}} if annotations else \
        {**obj, "metadata": {k: v for k, v in meta.items() if k != "annotations"}}
    text = json.dumps(original, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                          ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    annotations[LAST_APPLIED] = text + "\n"
    return {**obj, "metadata": {**meta, "annotations": annotations}}


def unmarshal_path(message: str, obj: Any) -> PathKey | None:
    """Where in `obj` the value is that encoding/json could not decode (the first match of the field's names,
    list indexes filled in, holding a value of the JSON type named)."""
    match = _UNMARSHAL.search(message)
    if match is None:
        return None
    types = _JSON_TYPES.get(match.group(1), ())
    return _find(obj, match.group(2).split("."), types, ())


def _find(value: Any, names: list[str], types: tuple[type, ...], path: PathKey) -> PathKey | None:
    if isinstance(value, list):
        for index, item in enumerate(value):
            if (found := _find(item, names, types, (*path, index))) is not None:
                return found
        return None
    if not names:
        return path if isinstance(value, types) and not (bool in types) ^ isinstance(value, bool) else None
    if isinstance(value, dict) and names[0] in value:
        return _find(value[names[0]], names[1:], types, (*path, names[0]))
    return None


def _refusal(exc: ApiError, base: PathKey, derived: Derived | None, obj: Any = None) -> Iterator[Finding]:
    body = status_body(exc)
    message = api_message(exc)
    severity = "warning" if any(s in message for s in CLUSTER_STATE) else "error"
    if derived is not None and derived.named_by is not None and _NAME_TOO_LONG.search(message):
        yield Finding(derived.named_by, f"{_prefix(derived)}{message}", severity)
        return
    causes = [c for c in (body.get("details") or {}).get("causes") or [] if isinstance(c, dict) and c.get("field")]
    if isinstance(exc, Invalid) and causes:
        for cause in causes:
            text = str(cause.get("message") or message)
            if derived is not None and not derived.mirrors:  # the field is the derived object's, not the file's
                yield Finding(base, f"{_prefix(derived)}{derived.body['kind']} {cause['field']}: {text}", severity)
            else:
                yield Finding((*base, *field_path(str(cause["field"]))), f"{_prefix(derived)}{text}", severity)
        return
    if (where := unmarshal_path(message, obj)) is not None:
        yield Finding((*base, *where), f"{_prefix(derived)}{message}", severity)
        return
    if (webhook := _WEBHOOK_FIELD.search(message)) is not None and (derived is None or derived.mirrors):
        where = _as_spelled(obj, field_path(webhook.group(1))) if derived is None else field_path(webhook.group(1))
        yield Finding((*base, *where), f"{_prefix(derived)}{message}", severity)
        return
    fields = _UNKNOWN_FIELD.findall(message)
    if fields:
        for name in fields:
            yield Finding((*base, *field_path(name)), f"{_prefix(derived)}unknown field \"{name}\" ({message})",
                          severity)
        return
    yield Finding(base, f"{_prefix(derived)}{message}", severity)


def _as_spelled(obj: Any, path: PathKey) -> PathKey:
    """`path` with each name as the document spells it: the Trainer's webhook names `spec.RuntimeRef`."""
    out: list[str | int] = []
    for named in path:
        part = named
        if isinstance(obj, dict) and isinstance(named, str) and named not in obj:
            part = next((key for key in obj if isinstance(key, str) and key.lower() == named.lower()), named)
        out.append(part)
        obj = obj.get(part) if isinstance(obj, dict) else obj[part] if isinstance(obj, list) and isinstance(
            part, int) and 0 <= part < len(obj) else None
    return tuple(out)


def _prefix(derived: Derived | None) -> str:
    return f"{derived.stage}: " if derived is not None else ""





def _warnings(headers: Any) -> list[str]:
    values = headers.get_all("Warning") if hasattr(headers, "get_all") else None
    out = []
    for value in values or []:
        text = str(value)
        if text.startswith("299 "):
            text = text.split(" ", 2)[-1]
        out.append(text.strip().strip('"'))
    return out


def field_path(field: str) -> PathKey:
    """The API server's field path ('spec.containers[0].resources.requests[memory]') as a path key."""
    parts: list[str | int] = []
    for name, index in _FIELD_PART.findall(field):
        if name:
            parts.append(name)
        else:
            parts.append(int(index) if index.isdigit() else index)
    return tuple(parts)


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data or b"{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _sublines(lines: dict[PathKey, int], prefix: PathKey) -> dict[PathKey, int]:
    return {path[len(prefix):]: line for path, line in lines.items() if path[:len(prefix)] == prefix}


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _is_object(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("apiVersion"), str) and isinstance(data.get("kind"), str)
