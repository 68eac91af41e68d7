"""Load `kubetrain.yaml`: read → parse YAML (keeping line numbers) → typed model → cross-field checks.

Every problem is collected and reported together as `file:line: field.path: message`.
"""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from kubetrain.errors import Problem, SpecError
from kubetrain.spec.checks import spec_problems
from kubetrain.spec.model import TrainingJob

PathKey = tuple[str | int, ...]
DEFAULT_SPEC = "kubetrain.yaml"


@dataclass(frozen=True)
class LoadedSpec:
    """A validated job and where it came from (relative paths in the spec resolve against `base_dir`)."""

    job: TrainingJob
    source: str
    base_dir: Path


def read_text(path: str) -> tuple[str, str]:
    """(display name, text) of a file, or of stdin for '-'. Undecodable or unreadable input is a SpecError."""
    name = "<stdin>" if path == "-" else path
    try:
        raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except FileNotFoundError:
        raise SpecError([Problem("", "no such file (create one with `kubetrain init`)", name)]) from None
    except OSError as exc:
        raise SpecError([Problem("", f"cannot read: {exc.strerror}", name)]) from None
    try:
        return name, raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError([Problem("", f"not UTF-8 text (byte {exc.start})", name)]) from None


def load_spec(path: str = DEFAULT_SPEC) -> LoadedSpec:
    name, text = read_text(path)
    base = Path.cwd() if path == "-" else Path(path).resolve().parent
    return LoadedSpec(parse_spec(text, name), name, base)


def parse_spec(text: str, source: str = DEFAULT_SPEC) -> TrainingJob:
    """Parse and validate spec text; raises SpecError listing every problem."""
    data, lines = parse_yaml(text, source)
    return validate_data(data, lines, source)


def validate_data(data: Any, lines: dict[PathKey, int], source: str) -> TrainingJob:
    if not isinstance(data, dict):
        found = "an empty file" if data is None else f"a {_type_name(data)}"
        raise SpecError([Problem("", f"expected a mapping with apiVersion, kind, metadata and spec; found {found}",
                                 source, lines.get((), 1))])
    try:
        job = TrainingJob.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_problems_from_pydantic(exc, lines, source)) from None
    problems = [Problem(field, message, source, _line_for(_split_path(field), lines))
                for field, message in spec_problems(job)]
    if problems:
        raise SpecError(problems)
    return job


def parse_yaml(text: str, source: str) -> tuple[Any, dict[PathKey, int]]:
    """One YAML document → (data, {path: line}). Syntax errors and duplicate keys become SpecError."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise SpecError([Problem("", f"invalid YAML: {exc.problem or exc.context}", source, line)]) from None
    except yaml.YAMLError as exc:
        raise SpecError([Problem("", f"invalid YAML: {exc}", source)]) from None
    finally:
        loader.dispose()
    lines: dict[PathKey, int] = {}
    duplicates: list[Problem] = []
    if node is not None:
        _index_lines(node, (), lines, duplicates, source)
    if duplicates:
        raise SpecError(duplicates)
    return data, lines


def _index_lines(node: yaml.Node, path: PathKey, lines: dict[PathKey, int],
                 duplicates: list[Problem], source: str) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in seen:
                duplicates.append(Problem(_join_path(path + (key,)), "duplicate key", source,
                                          key_node.start_mark.line + 1))
            seen.add(key)
            lines[path + (key,)] = key_node.start_mark.line + 1
            _index_lines(value_node, path + (key,), lines, duplicates, source)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index_lines(item, path + (index,), lines, duplicates, source)


def _problems_from_pydantic(exc: ValidationError, lines: dict[PathKey, int], source: str) -> list[Problem]:
    problems = []
    for error in exc.errors(include_url=False):
        loc: PathKey = tuple(error["loc"])
        message = _humanize(error, loc)
        problems.append(Problem(_join_path(loc), message, source, _line_for(loc, lines)))
    return sorted(problems, key=lambda p: (p.line or 0, p.field))


def _humanize(error: Any, loc: PathKey) -> str:
    kind, message, ctx = error["type"], str(error["msg"]), error.get("ctx") or {}
    if kind == "extra_forbidden":
        return "unknown field" + _suggestion(loc)
    if kind == "missing":
        return "required field is missing"
    if kind in {"greater_than_equal", "less_than_equal", "greater_than", "less_than"}:
        op = {"greater_than_equal": ">=", "less_than_equal": "<=", "greater_than": ">", "less_than": "<"}[kind]
        limit = next(iter(ctx.values()), "")
        return f"must be {op} {limit}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '')} (got {error['input']!r})"
    if kind == "string_pattern_mismatch":
        return f"{error['input']!r} does not match {ctx.get('pattern')}"
    if kind == "model_type" or kind == "dict_type":
        return f"must be a mapping, not {_type_name(error['input'])}"
    if kind == "list_type":
        return f"must be a list, not {_type_name(error['input'])}"
    return message.removeprefix("Value error, ").replace("Input should be", "must be")


def _suggestion(loc: PathKey) -> str:
    """For an unknown key, the closest known field name ("did you mean ...?")."""
    model: type[BaseModel] | None = TrainingJob
    for part in loc[:-1]:
        if model is None or isinstance(part, int):
            continue
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        model = _model_of(field.annotation) if field else None
    if model is None:
        return ""
    known = [f.alias or n for n, f in model.model_fields.items()]
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    if str(loc[-1]) == "runPolicy" and len(loc) > 1:
        hint = "; runPolicy belongs directly under spec"
    return hint


def _model_of(annotation: Any) -> type[BaseModel] | None:
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
        inner = _model_of(candidate) if getattr(candidate, "__args__", None) else None
        if inner:
            return inner
    return None


def _line_for(loc: PathKey, lines: dict[PathKey, int]) -> int | None:
    """The line of the deepest part of `loc` present in the file (a missing field points at its parent)."""
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def _join_path(loc: PathKey) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _split_path(field: str) -> PathKey:
    parts: list[str | int] = []
    for chunk in field.replace("]", "").split("."):
        name, *indexes = chunk.split("[")
        parts.append(name)
        parts.extend(int(i) for i in indexes)
    return tuple(parts)


def _type_name(value: Any) -> str:
    return {dict: "mapping", list: "list", str: "string", int: "number", float: "number",
            bool: "boolean"}.get(type(value), type(value).__name__)
