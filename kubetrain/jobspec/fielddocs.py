"""Field descriptions from attribute docstrings, read only when something shows them.

Every spec field documents itself with a docstring under it. pydantic can read those itself
(`use_attribute_docstrings`), but it does so while creating each class: it finds the class's source through
the call stack, tokenizes the rest of the file and parses it, for each of the ~20 models. That was ~20 % of
`render`'s start-up, for descriptions that only `docs/spec.md` and the controller's CRD schema use. Here the
three spec modules are parsed once, on first need, with the same rule as pydantic (a string statement right
after an annotated assignment), and the models are rebuilt so that their JSON schema carries them too.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import sys
import typing
from typing import Any

from pydantic import BaseModel

_documented: set[type[BaseModel]] = set()


def attribute_docstrings(cls: type) -> dict[str, str]:
    """{attribute: docstring} of a class defined at the top level of its module (pydantic's rule)."""
    module = sys.modules[cls.__module__]
    try:
        tree = _module_tree(module.__name__, inspect.getsource(module))
    except (OSError, TypeError):  # no source (a .pyc-only install): no descriptions, as with pydantic's own
        return {}
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__), None)
    docs: dict[str, str] = {}
    for previous, statement in itertools.pairwise(node.body if node else []):
        if (isinstance(previous, ast.AnnAssign) and isinstance(previous.target, ast.Name)
                and isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                and isinstance(statement.value.value, str)):
            docs[previous.target.id] = inspect.cleandoc(statement.value.value)
    return docs


_TREES: dict[str, ast.Module] = {}


def _module_tree(name: str, source: str) -> ast.Module:
    if name not in _TREES:
        _TREES[name] = ast.parse(source)
    return _TREES[name]


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models inside an annotation such as `Elastic | None` or `list[Volume]`."""
    found = []
    stack = [annotation]
    while stack:
        candidate = stack.pop()
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            found.append(candidate)
        else:
            stack.extend(typing.get_args(candidate))
    return found


def document(root: type[BaseModel]) -> None:
    """Give every field of `root` and of the models inside it its docstring as description (once)."""
    order: list[type[BaseModel]] = []
    stack, seen = [root], {root}
    while stack:  # every model reachable from root; rebuilt children first, parents last
        model = stack.pop()
        order.append(model)
        for field in model.model_fields.values():
            for child in models_in(field.annotation):
                if child not in seen:
                    seen.add(child)
                    stack.append(child)
    for model in reversed(order):
        if model in _documented:
            continue
        docs = attribute_docstrings(model)
        for name, field in model.model_fields.items():
            if field.description is None and name in docs:
                field.description = docs[name]
        model.model_rebuild(force=True)
        _documented.add(model)

