"""What the rule families share: typed access to a manifest that may hold any JSON value anywhere."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeGuard

from kubetrain.fieldpath import PathKey
from kubetrain.rules.findings import Finding

Findings = Iterator[Finding]


def mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def named(items_: Any, path: PathKey) -> Iterator[tuple[dict[str, Any], PathKey]]:
    """Each mapping of a list with its path."""
    for index, item in enumerate(items(items_)):
        if isinstance(item, dict):
            yield item, (*path, index)


def check(path: PathKey, problem: str | None) -> Findings:
    if problem:
        yield Finding(path, problem)


def range_check(obj: dict[str, Any], key: str, path: PathKey, low: int, high: int | None = None) -> Findings:
    """A number field that must lie in [low, high] (ValidateNonnegativeField and friends)."""
    value = obj.get(key)
    if is_int(value) and (value < low or (high is not None and value > high)):
        bound = f"between {low} and {high}, inclusive" if high is not None else f"greater than or equal to {low}"
        yield Finding((*path, key), f"{value}: must be {bound}")


def one_of(obj: dict[str, Any], path: PathKey, choices: tuple[str, ...], what: str, *,
           required: bool = True) -> Findings:
    """Exactly one of `choices` is set (volume sources, probe handlers, valueFrom sources)."""
    present = [c for c in choices if obj.get(c) is not None]
    if len(present) > 1:
        yield Finding((*path, present[1]), f"may not specify more than 1 {what} (found {', '.join(present)})")
    elif not present and required:
        yield Finding(path, f"must specify a {what}")


def enum(obj: dict[str, Any], key: str, path: PathKey, allowed: tuple[str, ...]) -> Findings:
    value = obj.get(key)
    if value not in (None, "") and value not in allowed:  # "": the API server's defaulting fills it in
        yield Finding((*path, key), f"Unsupported value {value!r}: supported values: {', '.join(map(repr, allowed))}")
