"""YAML read with line numbers and hard limits: every problem can point at `file:line` of the field it is about,
and no input, however hostile, costs more than a bounded amount of time and memory.

The limits (docs/validate.md lists them): each document's text, nesting depth, alias references, and the
number of nodes after aliases are expanded (a "billion laughs" file has few aliases but expands
exponentially). They are checked while composing, before any Python object is built.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import yaml

from kubetrain.errors import Problem, SpecError
from kubetrain.fieldpath import PathKey, join_path

MAX_INPUT_BYTES = 8 * 2**20  # one manifest file or stdin (a job spec: MAX_SPEC_BYTES in spec.load)
MAX_DOCUMENT_BYTES = 3 * 2**20  # the apiserver's limit on a request body
MAX_DEPTH = 100  # Kubernetes objects nest ~20 levels; Python's recursion limit is 1000
MAX_ALIASES = 1000
MAX_NODES = 200_000  # per document, counting every alias expansion
MAX_OBJECT_BYTES = 1536 * 1024  # etcd's default --max-request-bytes, which bounds one stored object
CONFIGMAP_LIMIT = 2**20  # the apiserver's limit on a ConfigMap's data + binaryData
_STR_TAG = "tag:yaml.org,2002:str"
_SURROGATE = re.compile("[\ud800-\udfff]")


class _LimitExceeded(yaml.MarkedYAMLError):
    pass


class _Limits:
    """Composer hooks that refuse nesting deeper than MAX_DEPTH and more than MAX_ALIASES aliases. Hooks on
    the rare paths only (an alias, a collection), so normal files pay almost nothing."""

    _depth = 0
    _aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):  # type: ignore[attr-defined]
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _LimitExceeded(None, None, f"more than {MAX_ALIASES} aliases (*name)", self._mark())
        return super().compose_node(parent, index)  # type: ignore[misc]

    def compose_sequence_node(self, anchor: Any) -> yaml.SequenceNode:
        with self._nested():
            return super().compose_sequence_node(anchor)  # type: ignore[misc,no-any-return]

    def compose_mapping_node(self, anchor: Any) -> yaml.MappingNode:
        with self._nested():
            return super().compose_mapping_node(anchor)  # type: ignore[misc,no-any-return]

    @contextlib.contextmanager
    def _nested(self) -> Iterator[None]:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _LimitExceeded(None, None, f"nested deeper than {MAX_DEPTH} levels", self._mark())
            yield
        finally:
            self._depth -= 1

    def _mark(self) -> Any:
        return self.peek_event().start_mark  # type: ignore[attr-defined]


class _KubectlScalars(yaml.constructor.SafeConstructor):
    """Scalars as kubectl reads them (sigs.k8s.io/yaml over go-yaml v2, into interface{}, then JSON):
    timestamps stay the string written (go-yaml keeps them as strings for interface{}), and a `!!binary` value
    is its decoded bytes as a string, invalid UTF-8 replaced (as Go's JSON encoder does); a surrogate written
    as an escape ("\\ud800") is U+FFFD, as go-yaml writes it (Python would keep a string it cannot encode)."""

    bool_values: ClassVar[dict[str, bool]] = {**yaml.constructor.SafeConstructor.bool_values, "y": True, "n": False}

    def construct_yaml_str(self, node: yaml.ScalarNode) -> str:
        value = str(self.construct_scalar(node))
        return _SURROGATE.sub("\ufffd", value) if _SURROGATE.search(value) else value

    def construct_go_int(self, node: yaml.ScalarNode) -> int | str:
        """YAML 1.1's base-60 `1:30` is the string written to go-yaml."""
        return str(node.value) if ":" in str(node.value) else int(self.construct_yaml_int(node))

    def construct_go_float(self, node: yaml.ScalarNode) -> float | int | str:
        """A float as kubectl sends it: Go's JSON encoder writes a whole float64 below 1e21 without a dot
        (`1e3` and `1.0` become 1000 and 1), so it is an integer to the API server; base 60 is a string."""
        if ":" in str(node.value):
            return str(node.value)
        value: float = self.construct_yaml_float(node)
        return int(value) if value.is_integer() and abs(value) < 1e21 else value

    def construct_timestamp_text(self, node: yaml.ScalarNode) -> str:
        return str(self.construct_scalar(node))

    def construct_binary_text(self, node: yaml.ScalarNode) -> str:
        data: bytes = self.construct_yaml_binary(node)
        return data.decode("utf-8", "replace")


_KubectlScalars.yaml_constructors = {
    **yaml.constructor.SafeConstructor.yaml_constructors, _STR_TAG: _KubectlScalars.construct_yaml_str,
    "tag:yaml.org,2002:float": _KubectlScalars.construct_go_float,
    "tag:yaml.org,2002:int": _KubectlScalars.construct_go_int,
    "tag:yaml.org,2002:timestamp": _KubectlScalars.construct_timestamp_text,
    "tag:yaml.org,2002:binary": _KubectlScalars.construct_binary_text}


class _KubectlResolver(yaml.resolver.Resolver):
    """YAML 1.1's implicit types plus go-yaml's float without a dot: `1e0`, `2E+3` are numbers to kubectl
    (PyYAML's YAML 1.1 grammar wants `1.0e+0` and reads `1e0` as a string)."""


# go-yaml v2 (resolve.go) reads y, Y, n, N as booleans too, so `value: y` is a boolean to kubectl.
_KubectlResolver.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN"))
# Go's strconv.ParseInt(s, 0, 64), which go-yaml v2 resolves ints with, also reads 0o17 and 0b101.
_KubectlResolver.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?0(?:o[0-7_]+|b[01_]+)$"),
                                       list("-+0"))
_KubectlResolver.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"), list("-+0123456789"))


class _BoundedLoader(_Limits, _KubectlScalars, _KubectlResolver, yaml.SafeLoader):
    """PyYAML's pure-Python SafeLoader with the limits: the reference, and what reports every YAML error."""


def _fast_loader() -> type | None:
    """The same composer, constructor and limits over libyaml's parser events (PyYAML's C extension), ~10x
    faster than the pure-Python scanner and parser. Not yaml.CSafeLoader: that one composes in C, where the
    limits cannot hook in (a nine-level alias bomb is fine to compose, but must not be walked or built)."""
    try:
        from yaml._yaml import CParser  # libyaml may be missing: the pure-Python parser then
    except ImportError:  # PyYAML built without libyaml
        return None

    class FastBoundedLoader(_Limits, yaml.composer.Composer, CParser, _KubectlScalars, _KubectlResolver):
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            yaml.composer.Composer.__init__(self)
            _KubectlScalars.__init__(self)
            _KubectlResolver.__init__(self)

    return FastBoundedLoader


_FAST_LOADER = _fast_loader()


@dataclass(frozen=True)
class ParsedDoc:
    """One YAML document: its data and the line of each path in it (1-based)."""

    data: Any
    lines: dict[PathKey, int] = field(default_factory=dict)
    plain: dict[PathKey, str] = field(default_factory=dict)
    """Unquoted scalars that YAML 1.1 read as something other than a string (3.10, 010, yes), as written."""
    duplicates: tuple[Problem, ...] = ()
    """Keys written twice in one mapping (parse_documents(strict_keys=False) keeps the last value)."""

    @property
    def start_line(self) -> int:
        return self.lines.get((), 1)


def parse_documents(text: str, source: str, strict_keys: bool = True) -> list[ParsedDoc]:
    """Every document in `text`. A syntax error or a duplicate key raises SpecError with file:line; with
    `strict_keys=False` a duplicate key keeps its last value, as kubectl reads manifests (sigs.k8s.io/yaml over
    go-yaml v2, not strict), and is listed in the document's `duplicates`.

    libyaml's parser reads it; when it finds the YAML invalid, PyYAML's pure-Python parser reads it again, so
    that every message (and the set of accepted inputs' errors) is PyYAML's own."""
    if _FAST_LOADER is not None:
        try:
            return _parse_documents(text, source, _FAST_LOADER, strict_keys)
        except SpecError as exc:
            if any(not p.message.startswith("invalid YAML") for p in exc.problems):
                raise  # a limit or a duplicate key: the same either way
        except ValueError:  # e.g. a lone surrogate, which libyaml's UTF-8 input cannot carry
            pass
    return _parse_documents(text, source, _BoundedLoader, strict_keys)


def _parse_documents(text: str, source: str, loader_class: Any, strict_keys: bool = True) -> list[ParsedDoc]:
    docs: list[ParsedDoc] = []
    problems: list[Problem] = []
    loader: Any = None
    try:
        loader = loader_class(text)  # the reader already vets the first characters here
        while loader.check_node():
            start = loader._mark()
            node = loader.get_node()
            assert node is not None  # check_node() said there is one
            _check_document_size(start.index, node.end_mark.index, start)
            index = _Index(source)
            index.walk(node, ())
            if strict_keys:
                problems += index.duplicates
            docs.append(ParsedDoc(loader.construct_document(node), index.lines, index.plain,
                                  tuple(index.duplicates)))
    except _LimitExceeded as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise SpecError([Problem("", f"input limit: {exc.problem}", source, line)]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise SpecError([Problem("", f"invalid YAML: {exc.problem or exc.context}", source, line)]) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        message = f"invalid YAML: character U+{char:04X} is not allowed ({exc.reason})"
        raise SpecError([Problem("", message, source, line)]) from None
    except yaml.YAMLError as exc:
        raise SpecError([Problem("", "invalid YAML: " + " ".join(str(exc).split()), source)]) from None
    finally:
        if loader is not None and hasattr(loader, "dispose"):
            loader.dispose()
    if problems:
        raise SpecError(problems)
    return docs


def _check_document_size(start: int, end: int, mark: Any) -> None:
    if end - start > MAX_DOCUMENT_BYTES:
        raise _LimitExceeded(None, None, f"a document of {(end - start) / 2**20:.1f} MiB; the limit is "
                             f"{MAX_DOCUMENT_BYTES // 2**20} MiB (the apiserver's request limit)", mark)


class _Index:
    """Walks a composed document (aliases expanded, at most MAX_NODES nodes): the line of every path, the
    duplicate keys, and the plain scalars YAML 1.1 turned into non-strings."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: dict[PathKey, int] = {}
        self.plain: dict[PathKey, str] = {}
        self.duplicates: list[Problem] = []
        self.nodes = 0

    def walk(self, node: yaml.Node, path: PathKey) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _LimitExceeded(None, None, f"more than {MAX_NODES} nodes once aliases are expanded",
                                 node.start_mark)
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, value_node in node.value:
                key = str(key_node.value)
                if key in seen:
                    self.duplicates.append(Problem(join_path((*path, key)), "duplicate key", self.source,
                                                   key_node.start_mark.line + 1))
                seen.add(key)
                self.lines[(*path, key)] = key_node.start_mark.line + 1
                self.walk(value_node, (*path, key))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self.walk(item, (*path, index))
        elif isinstance(node, yaml.ScalarNode) and not node.style and node.tag != _STR_TAG:  # plain: None or ""
            self.plain[path] = node.value


def line_for(loc: PathKey, lines: dict[PathKey, int]) -> int | None:
    """The line of the deepest part of `loc` present in the file (a missing field points at its parent)."""
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def split_path(field: str) -> PathKey:
    parts: list[str | int] = []
    for chunk in field.replace("]", "").split("."):
        name, *indexes = chunk.split("[")
        parts.append(name)
        parts.extend(int(i) for i in indexes)
    return tuple(parts)


def compact_json(obj: Any) -> str:
    """`obj` as the API server would store it (for its size); values JSON cannot hold are written as text."""
    return json.dumps(obj, separators=(",", ":"), default=str)


def object_size_problem(obj: dict[str, Any], text: str | None = None) -> tuple[PathKey, str] | None:
    """(path, message) when etcd could not store `obj`, or a ConfigMap's data exceeds 1 MiB; else None.
    `text`: compact_json(obj), when the caller has it already."""
    size = len((compact_json(obj) if text is None else text).encode())
    if size > MAX_OBJECT_BYTES:
        return (), f"the object is {size / 2**20:.2f} MiB as JSON; etcd stores at most 1.5 MiB per object"
    if obj.get("kind") == "ConfigMap" and obj.get("apiVersion") == "v1":
        sections = [obj.get("data") or {}, obj.get("binaryData") or {}]
        if all(isinstance(s, dict) for s in sections):
            data = sum(len(str(k)) + len(str(v).encode()) for k, v in sections[0].items())
            data += sum(len(str(k)) + len(str(v)) * 3 // 4 for k, v in sections[1].items())  # base64 -> bytes
            if data > CONFIGMAP_LIMIT:
                return ("data",), f"data and binaryData hold {data} bytes; a ConfigMap holds at most {CONFIGMAP_LIMIT}"
    return None
