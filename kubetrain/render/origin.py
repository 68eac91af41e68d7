"""Which spec field a refused rendered value came from, so that render's last check names the field and the
line of kubetrain.yaml instead of the rendered object's path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kubetrain.errors import Problem, RejectedRender
from kubetrain.fieldpath import PathKey, join_path
from kubetrain.jobspec.load import LoadedSpec


def traced_problems(exc: RejectedRender, loaded: LoadedSpec) -> list[Problem]:
    """One Problem per refusal traced to the spec, or [] when any refusal cannot be traced (the rendered
    field is then the better message). A refusal is traced by its value: the message quotes the refused
    string (the value at the rendered path, or the last key of that path), and a field of the file holds
    exactly that string (or has it as a key)."""
    data = loaded.job.model_dump(mode="json", by_alias=True)
    problems: list[Problem] = []
    for path, message, value in exc.rejected:
        quoted = [v for v in (value, path[-1] if path else None)
                  if isinstance(v, str) and v and (repr(v) in message or f'"{v}"' in message)]
        origin = next((where for where, found in _scalars(data) if found in quoted and where in loaded.lines), None)
        if origin is None:
            return []
        if not any(p.field == join_path(origin) and p.message.startswith(message) for p in problems):
            problems.append(Problem(join_path(origin), f"{message} (rendered as {exc.where} {join_path(path)})",
                                    loaded.source, loaded.lines[origin]))
    return problems


def _scalars(data: Any, path: PathKey = ()) -> Iterator[tuple[PathKey, Any]]:
    """(path, value) of every scalar, and (path, key) of every mapping key, in document order."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield (*path, key), key
            yield from _scalars(value, (*path, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _scalars(value, (*path, index))
    else:
        yield path, data
