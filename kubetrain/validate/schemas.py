"""Where schemas come from, compiled once per kind.

CRDs (PyTorchJob, TrainJob, ...) come from, in order: the live cluster (--from-cluster), files or URLs the
user gives (--schema), and the cache filled by `kubetrain schemas fetch`. Core kinds (ConfigMap, Service,
...) use the Kubernetes OpenAPI schemas shipped in the `kubernetes-validate` package.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kubetrain.cachedir import cache_dir
from kubetrain.errors import SchemaError
from kubetrain.rules.k8s.versions import DEFAULT, Rules, rules_for
from kubetrain.validate.fastcheck import Check, compile_check
from kubetrain.validate.openapi import structural_json_schema

DEFAULT_KUBERNETES_VERSION = DEFAULT
MISSING_HINT = ("run `kubetrain schemas fetch` (pinned upstream CRDs), pass --schema FILE|URL, "
                "or use --from-cluster")


def schema_cache_dir() -> Path:
    return cache_dir() / "schemas"


@dataclass(frozen=True)
class CrdVersion:
    group: str
    kind: str
    version: str
    schema: dict[str, Any]
    source: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


@dataclass
class SchemaStore:
    """Validators by (apiVersion, kind), compiled on first use and then reused: a compiled check that passes
    valid documents (`passes`), and jsonschema's validator that explains the others (`validator`)."""

    crds: dict[tuple[str, str], CrdVersion] = field(default_factory=dict)
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    _compiled: dict[tuple[str, str], Any] = field(default_factory=dict)
    _checks: dict[tuple[str, str], Check | None] = field(default_factory=dict)
    _structural: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    @property
    def rules(self) -> Rules:
        """The pod rules of `kubernetes_version` (a one-line SchemaError outside the versions kubetrain covers)."""
        return rules_for(self.kubernetes_version)

    def add_crd(self, crd: dict[str, Any], source: str) -> None:
        for version in crd_versions(crd, source):
            self.crds.setdefault((version.api_version, version.kind), version)

    def validator(self, api_version: str, kind: str) -> tuple[Any, str] | None:
        """(jsonschema validator, where the schema came from), or None when no schema is known."""
        key = (api_version, kind)
        if key not in self._compiled:
            self._compiled[key] = self._compile(api_version, kind)
        return self._compiled[key]  # type: ignore[no-any-return]

    def passes(self, obj: dict[str, Any]) -> bool:
        """True when the compiled check finds no schema error in `obj`. False means "not known valid": ask
        `validator` (also when there is no compiled check, e.g. for built-in kinds)."""
        key = (obj["apiVersion"], obj["kind"])
        if key not in self._checks:
            self._checks[key] = compile_check(self._structural_schema(key)) if key in self.crds else None
        check = self._checks[key]
        return check is not None and check(obj)

    def _structural_schema(self, key: tuple[str, str]) -> dict[str, Any]:
        if key not in self._structural:
            self._structural[key] = structural_json_schema(self.crds[key].schema)
        return self._structural[key]

    def _compile(self, api_version: str, kind: str) -> tuple[Any, str] | None:
        crd = self.crds.get((api_version, kind))
        if crd is not None:
            from kubetrain.validate.jsonschema_ext import KubernetesValidator  # ~80 ms; only to explain errors

            return KubernetesValidator(self._structural_schema((api_version, kind))), crd.source
        return core_validator(api_version, kind, self.kubernetes_version)


def crd_versions(crd: dict[str, Any], source: str) -> list[CrdVersion]:
    if crd.get("kind") != "CustomResourceDefinition" or not isinstance(crd.get("spec"), dict):
        raise SchemaError(f"{source}: not a CustomResourceDefinition")
    spec = crd["spec"]
    try:
        group, kind = spec["group"], spec["names"]["kind"]
        return [CrdVersion(group, kind, v["name"], v["schema"]["openAPIV3Schema"], source)
                for v in spec["versions"] if v.get("served", True) and "schema" in v]
    except (KeyError, TypeError) as exc:
        raise SchemaError(f"{source}: CustomResourceDefinition without {exc} in its spec") from None


def load_crd_source(location: str) -> list[tuple[dict[str, Any], str]]:
    """CRDs from a file, a directory of YAML files, or an http(s) URL."""
    if location.startswith(("http://", "https://")):
        text = download(location).decode("utf-8", errors="replace")
        return [(doc, location) for doc in _yaml_docs(text, location)]
    path = Path(location)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in {".yaml", ".yml", ".json"} and p.is_file())
    elif path.is_file():
        files = [path]
    else:
        raise SchemaError(f"--schema {location}: no such file, directory or URL")
    return [(doc, str(f)) for f in files for doc in _parsed_file(f)
            if doc.get("kind") == "CustomResourceDefinition"]


CrdSource = tuple[dict[str, Any], str]  # a CRD and where it came from


def schema_store(cluster: Callable[[], list[CrdSource]] | None = None, schemas: Iterable[str] = (),
                 kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> SchemaStore:
    """The schemas every check uses (validate, submit, kubetrain.api), in the one order of precedence: the
    cluster's own CRDs (`cluster` reads them, once the version is known to be covered), then `schemas` (files,
    directories, URLs), then the cache of `kubetrain schemas fetch`. The first CRD of a kind and version wins."""
    store = SchemaStore(kubernetes_version=kubernetes_version)
    store.rules  # noqa: B018 - refuses an unsupported version before anything is read
    found = [*(cluster() if cluster else []), *(crd for location in schemas for crd in load_crd_source(location))]
    for crd, source in [*found, *cached_crds()]:
        store.add_crd(crd, source)
    return store


def cached_crds() -> list[tuple[dict[str, Any], str]]:
    directory = schema_cache_dir()
    if not directory.is_dir():
        return []
    return load_crd_source(str(directory))


def _parsed_file(path: Path) -> list[dict[str, Any]]:
    """A CRD file's documents. CRDs are large (~1 MB of YAML, ~0.5 s to parse), so the parsed form is kept
    as JSON under the cache, keyed by the file's sha256: a changed file is simply parsed again."""
    raw = path.read_bytes()
    parsed = cache_dir() / "parsed" / f"{hashlib.sha256(raw).hexdigest()}.json"
    try:
        return json.loads(parsed.read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        pass
    docs = _yaml_docs(raw.decode("utf-8", errors="replace"), str(path))
    try:
        parsed.parent.mkdir(parents=True, exist_ok=True)
        tmp = parsed.with_name(f".{parsed.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(docs))
        tmp.replace(parsed)
    except OSError:
        pass  # a read-only cache only costs speed
    return docs


def _yaml_docs(text: str, source: str) -> list[dict[str, Any]]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return [doc for doc in yaml.load_all(text, Loader=loader) if isinstance(doc, dict)]
    except yaml.YAMLError as exc:
        raise SchemaError(f"{source}: invalid YAML: {' '.join(str(exc).split())}") from None


def download(url: str, timeout: float = 30.0, hint: str = "") -> bytes:
    """The body at `url`; any failure is a one-line SchemaError (with `hint` appended)."""
    import urllib.request  # with http.client and ssl, ~25 ms: only for a URL

    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bytes(response.read())
    except (OSError, ValueError) as exc:
        raise SchemaError(f"cannot download {url}: {exc}{hint}") from None


# --- core kinds, from the kubernetes-validate package's JSON schemas -------------------------------

def _kv_schema_root() -> Path | None:
    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "kubernetes-json-schema"


def core_validator(api_version: str, kind: str, kubernetes_version: str) -> tuple[Any, str] | None:
    """A strict validator for a built-in kind, from the newest schema set not newer than the version asked."""
    root = _kv_schema_root()
    directory = _core_schema_dir(root, kubernetes_version) if root else None
    if directory is None:
        return None
    group_version = api_version.split("/")
    group = group_version[0].split(".")[0] if len(group_version) == 2 else ""
    name = f"{kind.lower()}-{group}-{group_version[-1]}.json" if group else f"{kind.lower()}-{api_version}.json"
    path = directory / name
    if not path.is_file():
        return None
    # only when this kind of check runs (validate's start-up, docs/performance.md)
    from referencing import Registry, Resource

    # only when this kind of check runs (validate's start-up, docs/performance.md)
    from kubetrain.validate.jsonschema_ext import CoreValidator

    schema = json.loads(path.read_text())
    registry: Registry[Any] = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(_definitions(directory)) @ registry
    return CoreValidator(schema, registry=registry), f"Kubernetes {directory.name.split('-')[0]} OpenAPI"


_DEFINITIONS: dict[Path, Any] = {}


def _definitions(directory: Path) -> Any:
    if directory not in _DEFINITIONS:
        _DEFINITIONS[directory] = json.loads((directory / "_definitions.json").read_text())
    return _DEFINITIONS[directory]


def _core_schema_dir(root: Path, kubernetes_version: str) -> Path | None:
    wanted = _version_tuple(kubernetes_version.lstrip("v"))
    candidates = []
    for entry in root.glob("v*-local-strict"):
        version = _version_tuple(entry.name[1:].split("-")[0])
        if version[:2] <= wanted[:2]:
            candidates.append((version, entry))
    return max(candidates)[1] if candidates else None


def _version_tuple(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(".") if part)
    except ValueError:
        raise SchemaError(f"--kubernetes-version {text!r}: expected a version like {DEFAULT}") from None
