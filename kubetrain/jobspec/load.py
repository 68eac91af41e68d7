"""Load `kubetrain.yaml`: read → parse YAML (keeping line numbers) → typed model → cross-field checks.

Every problem is collected and reported together as `file:line: field.path: message`.
"""

from __future__ import annotations

import copy
import difflib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from kubetrain.errors import Problem, SpecError
from kubetrain.fieldpath import PathKey, join_path
from kubetrain.jobspec.checks import spec_problems
from kubetrain.jobspec.fielddocs import models_in
from kubetrain.jobspec.model import TrainingJob
from kubetrain.yamlsrc import MAX_INPUT_BYTES, ParsedDoc, line_for, parse_documents, split_path

DEFAULT_SPEC = "kubetrain.yaml"
TEXT_FIELDS = {("spec", "command"), ("spec", "args"), ("spec", "env")}
MAX_SPEC_BYTES = 2**20  # a job spec is a page of YAML; a bigger one is a mistake or an attack


@dataclass(frozen=True)
class LoadedSpec:
    """A validated job and where it came from (relative paths in the spec resolve against `base_dir`)."""

    job: TrainingJob
    source: str
    base_dir: Path
    lines: dict[PathKey, int] = field(default_factory=dict, compare=False, repr=False)  # for messages

    def where(self, message: str) -> str:
        """`message` ("spec.field: ...") prefixed with the file and the field's line, when known."""
        field_name = message.split(": ", 1)[0]
        if not field_name.startswith(("spec.", "metadata.", "sweep.")) or " " in field_name:
            return message
        line = line_for(split_path(field_name), self.lines)
        return f"{self.source}:{line}: {message}" if line else message


def read_text(path: str, limit: int = MAX_INPUT_BYTES) -> tuple[str, str]:
    """(display name, text) of a file, or of stdin for '-', reading at most `limit` bytes.

    Undecodable, unreadable, closed or oversized input is a SpecError.
    """
    name = "<stdin>" if path == "-" else path
    try:
        raw = _read_stdin(limit) if path == "-" else _read_file(Path(path), limit)
    except FileNotFoundError:
        raise SpecError([Problem("", "no such file (create one with `kubetrain init`)", name)]) from None
    except IsADirectoryError:
        raise SpecError([Problem("", "is a directory, not a file", name)]) from None
    except OSError as exc:
        raise SpecError([Problem("", f"cannot read: {exc.strerror or exc}", name)]) from None
    if len(raw) > limit:
        raise SpecError([Problem("", f"input limit: larger than {limit // 2**20} MiB", name)])
    try:
        return name, raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError([Problem("", f"not UTF-8 text (byte {exc.start})", name)]) from None


def _read_file(path: Path, limit: int) -> bytes:
    with path.open("rb") as handle:
        return handle.read(limit + 1)


def _read_stdin(limit: int) -> bytes:
    stream = sys.stdin.buffer if sys.stdin is not None and not sys.stdin.closed else None
    if stream is None:
        raise OSError(0, "stdin is closed")
    try:
        return stream.read(limit + 1)
    except ValueError:  # the descriptor was closed under Python's file object
        raise OSError(0, "stdin is closed") from None


def load_spec(path: str = DEFAULT_SPEC) -> LoadedSpec:
    name, text = read_text(path, MAX_SPEC_BYTES)
    base = Path.cwd() if path == "-" else Path(path).resolve().parent
    doc = _document(text, name)
    return LoadedSpec(validate_data(doc.data, doc.lines, name, doc.plain), name, base, doc.lines)


def parse_spec(text: str, source: str = DEFAULT_SPEC) -> TrainingJob:
    """Parse and validate spec text; raises SpecError listing every problem."""
    doc = _document(text, source)
    return validate_data(doc.data, doc.lines, source, doc.plain)


def _document(text: str, source: str) -> ParsedDoc:
    docs = parse_documents(text, source)
    if len(docs) > 1:
        raise SpecError([Problem("", "expected one YAML document, found several (---)", source,
                                 docs[1].start_line)])
    return docs[0] if docs else ParsedDoc(None)


def validate_data(data: Any, lines: dict[PathKey, int], source: str,
                  plain: dict[PathKey, str] | None = None) -> TrainingJob:
    if not isinstance(data, dict):
        found = "an empty file" if data is None else f"a {_type_name(data)}"
        raise SpecError([Problem("", f"expected a mapping with apiVersion, kind, metadata and spec; found {found}",
                                 source, lines.get((), 1))])
    lossy = _lossy_text(data, plain or {}, lines, source)
    try:
        job = TrainingJob.model_validate(data)
    except ValidationError as exc:
        problems = lossy + _problems_from_pydantic(exc, lines, source, plain or {})
        problems += _rules_without(data, exc, lines, source, {p.field for p in problems})
        raise SpecError(sorted(problems, key=lambda p: (p.line or 0, p.field))) from None
    if lossy:
        raise SpecError(lossy)
    problems = [Problem(field, message, source, line_for(split_path(field), lines))
                for field, message in spec_problems(job)]
    if problems:
        raise SpecError(sorted(problems, key=lambda p: p.line or 0))
    return job


def _rules_without(data: dict[str, Any], exc: ValidationError, lines: dict[PathKey, int], source: str,
                   reported: set[str]) -> list[Problem]:
    """The whole-spec rules (spec_problems), judged with the fields that failed left out, so that one bad field
    (`nodes: 0`) does not hide the rest (a trainjob-only field, a missing command). Nothing if the spec is not
    valid even then (a required field is what failed)."""
    trimmed = copy.deepcopy(data)
    for error in exc.errors():
        _drop(trimmed, [part for part in error["loc"] if isinstance(part, (str, int))])
    try:
        job = TrainingJob.model_validate(trimmed)
    except ValidationError:
        return []
    return [Problem(field, message, source, line_for(split_path(field), lines))
            for field, message in spec_problems(job) if field not in reported]


def _drop(data: Any, loc: list[str | int]) -> None:
    """Remove the mapping key nearest to pydantic's error location `loc` (list items stay: removing one would
    shift the locations of the other errors)."""
    for depth in range(len(loc), 0, -1):
        parent: Any = data
        for key in loc[:depth - 1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and loc[depth - 1] in parent:
            del parent[loc[depth - 1]]
            return


def _lossy_text(data: dict[str, Any], plain: dict[PathKey, str], lines: dict[PathKey, int],
                source: str) -> list[Problem]:
    """Unquoted numbers in string fields whose text YAML changed (3.10 -> 3.1, 010 -> 8, 1_000 -> 1000)."""
    problems = []
    for path, raw in plain.items():
        if path[:2] not in TEXT_FIELDS:
            continue
        value = _at(data, path)
        if isinstance(value, int | float) and not isinstance(value, bool) and str(value) != raw:
            problems.append(Problem(join_path(path), f"YAML reads the unquoted {raw} as the number {value}; "
                                    f"quote it: \"{raw}\"", source, line_for(path, lines)))
    return problems


def _at(data: Any, path: PathKey) -> Any:
    for part in path:
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return None
    return data


def _problems_from_pydantic(exc: ValidationError, lines: dict[PathKey, int], source: str,
                            plain: dict[PathKey, str]) -> list[Problem]:
    problems = []
    for error in exc.errors(include_url=False):
        loc: PathKey = tuple(error["loc"])
        message = _humanize(error, loc)
        if loc in plain and message.startswith("must be a string"):
            message = (f"must be a string: YAML reads the unquoted {plain[loc]} as {error['input']!r}; "
                       f"quote it: \"{plain[loc]}\"")
        problems.append(Problem(join_path(loc), message, source, line_for(loc, lines)))
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
    if kind in {"model_type", "dict_type"}:
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
        model = next(iter(models_in(field.annotation)), None) if field else None
    if model is None:
        return ""
    known = [f.alias or n for n, f in model.model_fields.items()]
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    if str(loc[-1]) == "runPolicy" and len(loc) > 1:
        hint = "; runPolicy belongs directly under spec"
    return hint


def _type_name(value: Any) -> str:
    return {dict: "mapping", list: "list", str: "string", int: "number", float: "number",
            bool: "boolean"}.get(type(value), type(value).__name__)
