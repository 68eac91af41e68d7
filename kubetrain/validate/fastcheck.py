"""A compiled schema check for the common case, a valid document; jsonschema explains the others.

jsonschema (pure Python) takes ~10 ms to walk a rendered PyTorchJob against its CRD and ~80 ms to import.
jsonschema-rs (Rust, maintained, abi3 wheels on PyPI) checks the same converted schema
(`openapi.structural_json_schema`) in ~0.1 ms and compiles it in ~30 ms. It only decides: a document it
passes has no schema error; any other document is walked by jsonschema as before, so every message (and the
verdict of every document with an error) comes from one implementation and stays byte-identical.

The check must never pass what jsonschema would fail. Where the two could differ, they differ the safe way:
- formats are not checked by either (`validate_formats=False`; jsonschema checks none without a checker);
- patterns: Rust's ECMA-style `$` does not match before a trailing newline and its `\\d`/`\\w` are ASCII,
  so it is stricter than Python's `re.search`, never looser;
- values Rust cannot represent (NaN, integers beyond 64 bits, non-string mapping keys) raise: not passed;
- a schema Rust cannot compile (a regex it does not support) gets no fast check at all.
tests/validate/test_fastcheck.py checks this on the whole parity corpus and on the edge cases above.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubetrain.validate.openapi import list_type_problems

Check = Callable[[Any], bool]
LIST_TYPE = "x-kubernetes-list-type"


class _ListType:
    """`x-kubernetes-list-type` as a jsonschema-rs keyword (the same rule as jsonschema_ext's)."""

    def __init__(self, parent_schema: dict[str, Any], value: Any, schema_path: list[str | int]) -> None:
        self.list_type = value
        self.map_keys = parent_schema.get("x-kubernetes-list-map-keys") or []

    def validate(self, instance: Any) -> None:
        for _, message in list_type_problems(self.list_type, self.map_keys, instance):
            raise ValueError(message)


def compile_check(schema: dict[str, Any]) -> Check | None:
    """A function that is True only for documents valid against the (draft 7) `schema`; None when the compiled
    validator is not available for it (jsonschema-rs missing, or a pattern Rust cannot compile)."""
    try:
        import jsonschema_rs  # only when this kind of check runs (validate's start-up, docs/performance.md)
    except ImportError:  # a platform without a wheel: jsonschema alone, slower
        return None
    try:
        validator = jsonschema_rs.Draft7Validator(schema, validate_formats=False, keywords={LIST_TYPE: _ListType})
    except Exception:  # any compile failure only means "no fast path"
        return None

    def check(instance: Any) -> bool:
        try:
            return bool(validator.is_valid(instance))
        except Exception:  # a value Rust cannot represent: let jsonschema decide
            return False

    return check
