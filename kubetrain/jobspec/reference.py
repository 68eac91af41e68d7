"""Generate docs/spec.md, the field reference, from the pydantic model (the single source of truth).

    python -m kubetrain.jobspec.reference > docs/spec.md
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from kubetrain.jobspec.fielddocs import document, models_in
from kubetrain.jobspec.model import TrainingJob

HEADER = """# kubetrain.yaml reference

Generated from `kubetrain/jobspec/` by `python -m kubetrain.jobspec.reference`; do not edit by hand.
Unknown keys are errors. Every problem is reported at once as `file:line: field.path: message` (exit 2).
"""


def type_name(annotation: Any) -> str:
    """A short, readable type: `int`, `list[Volume]`, `map[str, str]`, `'fp32' | 'bf16'`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(type_name(arg) for arg in args if arg is not type(None))
    if origin is typing.Literal:
        return " \\| ".join(repr(arg) for arg in args)
    if origin is list:
        return f"list[{type_name(args[0])}]"
    if origin is dict:
        return f"map[{type_name(args[0])}, {type_name(args[1])}]"
    return getattr(annotation, "__name__", str(annotation))


def default_text(field: Any) -> str:
    if field.default is not PydanticUndefined and not isinstance(field.default, BaseModel):
        return f"`{field.default!r}`" if field.default is not None else "—"
    if field.default_factory is not None:
        return "see below" if models_in(field.annotation) else "`{}`" if "dict" in str(field.annotation) else "`[]`"
    return "**required**"


def render_model(model: type[BaseModel], path: str, lines: list[str], seen: set[str]) -> None:
    lines += [f"\n## `{path}`\n", (model.__doc__ or "").strip(), "", "| field | type | default | description |",
              "|---|---|---|---|"]
    children = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        description = " ".join((field.description or "").split()).replace("|", "\\|")
        lines.append(f"| `{key}` | {type_name(field.annotation)} | {default_text(field)} | {description} |")
        for child in models_in(field.annotation):
            children.append((child, f"{path}.{key}" if path else key))
    for child, child_path in children:
        if child.__name__ not in seen:
            seen.add(child.__name__)
            render_model(child, child_path, lines, seen)


def reference_markdown() -> str:
    document(TrainingJob)
    lines = [HEADER]
    render_model(TrainingJob, "", lines, {"TrainingJob"})
    return "\n".join(lines).replace("## ``\n", "## Top level\n") + "\n"


def undocumented_fields() -> list[str]:
    document(TrainingJob)
    missing = []
    stack: list[tuple[type[BaseModel], str]] = [(TrainingJob, "")]
    while stack:
        model, path = stack.pop()
        for name, field in model.model_fields.items():
            key = f"{path}.{field.alias or name}".lstrip(".")
            if not (field.description or "").strip():
                missing.append(key)
            stack += [(child, key) for child in models_in(field.annotation)]
    return missing


if __name__ == "__main__":
    print(reference_markdown(), end="")
