"""The docs name only what exists: every `kubetrain VERB --flag` in README.md and docs/*.md is a real command
and option, and every TrainingJob in the docs loads with the spec loader (so every field it names exists)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from kubetrain.cli.main import cli
from kubetrain.jobspec.load import parse_spec
from kubetrain.jobspec.model import TrainingJob

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
# A command starts a line (after a `$ ` prompt, `time` or an env assignment) or follows a shell operator;
# elsewhere "kubetrain ..." is prose or program output.
_COMMAND = re.compile(r"(?:^|[|;&(]\s*)(?:\$ )?(?:time )?(?:[A-Z_]+=\S* )*kubetrain ([a-z][a-z-]*(?=\s|$)[^|;&#>\n]*)")
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"`([^`\n]+)`")
_END = {"|", "||", "&&", ";", ">", "2>", "2>&1", "<"}


def _code(text: str) -> Iterator[str]:
    """Code in a markdown file: fenced blocks (continued lines joined), then inline spans outside them."""
    for block in _FENCE.finditer(text):
        yield from block.group(1).replace("\\\n", " ").splitlines()
    yield from (span.replace("\\|", "|").strip() for span in _INLINE.findall(_FENCE.sub("", text)))  # tables escape |


def command_lines() -> Iterator[tuple[str, str]]:
    for doc in DOCS:
        for code in _code(doc.read_text()):
            for match in _COMMAND.finditer(code):
                yield doc.name, match.group(1).strip()


def _tokens(line: str) -> list[str]:
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        words = line.split()
    for index, word in enumerate(words):
        if word in _END:
            return words[:index]
    return words


def _resolve(words: list[str]) -> tuple[click.Command, list[str], str]:
    command: click.Command = cli
    path = "kubetrain"
    ctx = click.Context(cli)
    while isinstance(command, click.Group) and words and not words[0].startswith("-"):
        sub = command.get_command(ctx, words[0])
        if sub is None:
            raise LookupError(f"{path} has no command {words[0]!r}")
        command, path, words = sub, f"{path} {words[0]}", words[1:]
    return command, words, path


def _options(command: click.Command) -> set[str]:
    names = {"--help", "-h"}
    for param in command.params:
        names.update(getattr(param, "opts", ()))
        names.update(getattr(param, "secondary_opts", ()))
    return names


def _unknown(line: str) -> str | None:
    try:
        command, words, path = _resolve(_tokens(line))
    except LookupError as exc:
        return str(exc)
    known = _options(command)
    for word in words:
        flag = word.split("=", 1)[0]
        if re.fullmatch(r"--?[A-Za-z][\w-]*", flag) and flag not in known:
            return f"{path} has no option {flag}"
    return None


def test_every_documented_command_and_flag_exists() -> None:
    lines = list(command_lines())
    assert len(lines) > 50  # the docs are full of examples: if this finds none, the parser broke
    problems = sorted({f"{doc}: `kubetrain {line}`: {why}" for doc, line in lines if (why := _unknown(line))})
    assert not problems, "\n".join(problems)


def test_the_checker_catches_a_missing_flag_and_verb() -> None:
    assert _unknown("status --frobnicate x") == "kubetrain status has no option --frobnicate"
    assert _unknown("launch job.yaml") == "kubetrain has no command 'launch'"
    assert _unknown("submit -f kubetrain.yaml -n team --dry-run=server | kubectl apply -f -") is None


_SCHEMA = TrainingJob.model_json_schema(by_alias=True)
_FIELD = re.compile(r"((?:spec\.)?[a-z][A-Za-z]*(?:\.[a-z][A-Za-z]*)+)(?:$|[:= ])")
_NOT_FIELDS = re.compile(r"\.(?:py|ya?ml|md|json|sh|txt|toml|pt|log|j2|html|csv)\b")


# Paths the docs name on other objects (the rendered PyTorchJob, its webhook's rules), not on a TrainingJob.
_OTHER_OBJECTS = {"runPolicy.managedBy", "spec.managedBy", "spec.runPolicy.suspend", "resources.claims"}


def _properties(node: dict[str, object]) -> dict[str, dict[str, object]]:
    """The object properties under a JSON-schema node ({} for maps, lists of scalars and scalars)."""
    if "$ref" in node:
        return _properties(_SCHEMA["$defs"][str(node["$ref"]).rsplit("/", 1)[-1]])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in node:
            merged: dict[str, dict[str, object]] = {}
            for option in node[key]:  # type: ignore[attr-defined]
                merged.update(_properties(option))
            return merged
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        return _properties(node["items"])  # type: ignore[arg-type]
    return node.get("properties", {})  # type: ignore[return-value]


def _unknown_field(path: str) -> str | None:
    """None when `a.b.c` is a spec field path (or not one at all); else what is missing."""
    if path in _OTHER_OBJECTS:
        return None
    level = _properties(_SCHEMA["properties"]["spec"])
    parts = path.removeprefix("spec.").split(".")
    if parts[0] not in level:
        return None  # not a spec path (a module, a file, a domain)
    walked = []
    for part in parts:
        if not level:
            return None  # below a map or a free-form value: any key is fine
        if part not in level:
            return f"spec.{'.'.join(walked)} has no field {part!r}" if walked else None
        walked.append(part)
        level = _properties(level[part])
    return None


def field_paths() -> Iterator[tuple[str, str]]:
    for doc in DOCS:
        for span in _INLINE.findall(_FENCE.sub("", doc.read_text())):
            match = _FIELD.match(span.strip())
            if match and not _NOT_FIELDS.search(span):
                yield doc.name, match.group(1)


def test_every_documented_spec_field_exists() -> None:
    paths = list(field_paths())
    assert len(paths) > 20
    problems = sorted({f"{doc}: `{path}`: {why}" for doc, path in paths if (why := _unknown_field(path))})
    assert not problems, "\n".join(problems)
    assert _unknown_field("train.strategy") is None
    assert _unknown_field("checkpoint.frequency") == "spec.checkpoint has no field 'frequency'"
    assert _unknown_field("spec.train.frobnicate") == "spec.train has no field 'frobnicate'"


def trainingjob_examples() -> Iterator[tuple[str, str]]:
    for doc in DOCS:
        for block in re.finditer(r"^```ya?ml\n(.*?)^```", doc.read_text(), re.MULTILINE | re.DOTALL):
            if re.search(r"^kind: TrainingJob$", block.group(1), re.MULTILINE):
                line = doc.read_text()[: block.start()].count("\n") + 2
                yield f"{doc.name}:{line}", block.group(1)


@pytest.mark.parametrize(("where", "text"), list(trainingjob_examples()))
def test_every_trainingjob_in_the_docs_loads(where: str, text: str) -> None:
    parse_spec(text, source=where)
