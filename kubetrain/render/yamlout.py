"""YAML in and out for manifests: safe scalar quoting for templates, and deterministic block output."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import yaml

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\0": "\\0"}


def quote(value: Any) -> str:
    """A YAML double-quoted scalar that reads back as exactly `value`, whatever it contains.

    Only printable ASCII is written as itself; everything else is escaped (\\x, \\u, \\U), so no newline,
    quote, `#`, `---`, anchor, alias, tag or template syntax can change the document's structure.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    return '"' + "".join(_escape_char(c) for c in str(value)) + '"'


def _escape_char(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    code = ord(char)
    if 0x20 <= code < 0x7F:
        return char
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def flow(value: Any) -> str:
    """Any JSON-like structure as a one-line YAML flow collection, every scalar quoted by `quote`."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{quote(k)}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    return quote(value)


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Block-style output; strings with newlines as literal blocks for readability. libyaml's emitter when
    PyYAML has it (the same documents, a third of render's time in the pure-Python one)."""


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if "\n" in data and all(c.isprintable() or c == "\n" for c in data):
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _str_presenter)


def dump_yaml(objects: Iterable[dict[str, Any]]) -> str:
    """Objects as a multi-document YAML stream (`---` separated), keys in template order."""
    docs = [yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=False,
                      width=4096) for obj in objects]
    return "---\n".join(docs)


def dump_json(objects: list[dict[str, Any]]) -> str:
    """One object as JSON, several as a v1 List (what kubectl prints for -o json)."""
    if len(objects) == 1:
        return json.dumps(objects[0], indent=2, ensure_ascii=False) + "\n"
    wrapper = {"apiVersion": "v1", "kind": "List", "items": objects}
    return json.dumps(wrapper, indent=2, ensure_ascii=False) + "\n"
