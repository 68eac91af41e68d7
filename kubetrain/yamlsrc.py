"""YAML read with line numbers: every problem can point at `file:line` of the field it is about."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from kubetrain.errors import Problem, SpecError

PathKey = tuple[str | int, ...]
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class ParsedDoc:
    """One YAML document: its data and the line of each path in it (1-based)."""

    data: Any
    lines: dict[PathKey, int] = field(default_factory=dict)

    @property
    def start_line(self) -> int:
        return self.lines.get((), 1)


def parse_documents(text: str, source: str) -> list[ParsedDoc]:
    """Every document in `text`. A syntax error or a duplicate key raises SpecError with file:line."""
    docs: list[ParsedDoc] = []
    problems: list[Problem] = []
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)  # the reader already vets the first characters here
        while loader.check_node():
            node = loader.get_node()
            assert node is not None  # check_node() said there is one
            lines: dict[PathKey, int] = {}
            _index_lines(node, (), lines, problems, source)
            docs.append(ParsedDoc(loader.construct_document(node), lines))
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
        if loader is not None:
            loader.dispose()
    if problems:
        raise SpecError(problems)
    return docs


def _index_lines(node: yaml.Node, path: PathKey, lines: dict[PathKey, int],
                 duplicates: list[Problem], source: str) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in seen:
                duplicates.append(Problem(join_path((*path, key)), "duplicate key", source,
                                          key_node.start_mark.line + 1))
            seen.add(key)
            lines[(*path, key)] = key_node.start_mark.line + 1
            _index_lines(value_node, (*path, key), lines, duplicates, source)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index_lines(item, (*path, index), lines, duplicates, source)


def line_for(loc: PathKey, lines: dict[PathKey, int]) -> int | None:
    """The line of the deepest part of `loc` present in the file (a missing field points at its parent)."""
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def join_path(loc: PathKey) -> str:
    """("spec", "volumes", 0, "name") -> "spec.volumes[0].name"."""
    text = ""
    for part in loc:
        if part == "[key]":  # pydantic's marker for an error in a mapping's key
            continue
        if isinstance(part, int):
            text += f"[{part}]"
        elif not _PLAIN_KEY.match(str(part)):
            text += f'["{part}"]'  # label-style keys such as nvidia.com/gpu
        else:
            text += f".{part}" if text else str(part)
    return text


def split_path(field: str) -> PathKey:
    parts: list[str | int] = []
    for chunk in field.replace("]", "").split("."):
        name, *indexes = chunk.split("[")
        parts.append(name)
        parts.extend(int(i) for i in indexes)
    return tuple(parts)
