"""CRD `x-kubernetes-validations` (CEL) rules, evaluated the way the apiserver does on create.

Library: cel-expr-python, the Python binding of the CEL team's C++ implementation (the same language
definition and conformance suite as cel-go, which the apiserver uses). We measured cel-python (pure Python)
too: both evaluate every create-time rule of the Trainer v2.3 and JobSet CRDs correctly, but cel-python
spends ~0.7 s importing and ~1.4 s building its parser in every process; cel-expr-python imports in ~20 ms
(docs/validate.md, "CEL").

Create semantics: a rule that mentions `oldSelf` is a transition rule, which the apiserver only runs on
update, so it is skipped. A rule runs for every value present in the object at its schema node (absent
optional fields are not validated, as in Kubernetes). An evaluation error (e.g. no such key) fails the
request on the apiserver, so it is reported too.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.rules.findings import Finding

RULES = "x-kubernetes-validations"
MAX_MESSAGE_BYTES = 5 * 1024  # celconfig.MaxEvaluatedMessageExpressionSizeBytes


def cel_findings(schema: dict[str, Any], obj: Any) -> list[Finding]:
    """Every create-time rule of `schema` (an openAPIV3Schema) that `obj` fails."""
    if not has_create_rules(_Key(schema)):
        return []
    return [finding for path, rule, value in _applicable(schema, obj, ()) if (finding := _check(rule, value, path))]


class _Key:
    """Hash a schema by identity, so `has_create_rules` is computed once per loaded CRD."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema

    def __hash__(self) -> int:
        return id(self.schema)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Key) and other.schema is self.schema


@cache
def has_create_rules(key: _Key) -> bool:
    """Most CRD rules are immutability rules (`self == oldSelf`); PyTorchJob has no other kind at all."""
    return any(True for _ in _create_rules(key.schema))


def _create_rules(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        for rule in node.get(RULES) or []:
            if isinstance(rule, dict) and "oldSelf" not in str(rule.get("rule", "")):
                yield rule
        for value in node.values():
            yield from _create_rules(value)
    elif isinstance(node, list):
        for item in node:
            yield from _create_rules(item)


def _applicable(schema: dict[str, Any], value: Any, path: PathKey) -> Iterator[tuple[PathKey, dict[str, Any], Any]]:
    for rule in schema.get(RULES) or []:
        if isinstance(rule, dict) and "oldSelf" not in str(rule.get("rule", "")):
            yield path, rule, value
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            child_schema = properties.get(key) if key in properties else extra
            if isinstance(child_schema, dict):
                yield from _applicable(child_schema, child, (*path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            yield from _applicable(schema["items"], item, (*path, index))


def _check(rule: dict[str, Any], value: Any, path: PathKey) -> Finding | None:
    text = str(rule.get("rule", ""))
    try:
        result = _evaluate(text, value)
    except _EvalError as exc:
        return Finding(path, f"CEL rule {text!r} could not be evaluated: {exc}")
    if result is True:
        return None
    field = rule.get("fieldPath")
    if isinstance(field, str) and field.startswith(".") and "[" not in field:  # e.g. fieldPath: .spec.x
        path = (*path, *field[1:].split("."))
    return Finding(path, message_for(rule, value))


def message_for(rule: dict[str, Any], value: Any) -> str:
    """The apiserver's message for a failed rule: `messageExpression`'s string when it evaluates to a usable
    one, else `message`, else "failed rule: RULE" (apiextensions-apiserver's evalMessageExpression and
    ruleMessageOrDefault). Unusable: an evaluation error, not a string, empty or blank, a line break, or more
    than 5 KiB after trimming; the apiserver then logs the reason and falls back, as here."""
    expression = rule.get("messageExpression")
    if isinstance(expression, str) and expression.strip():
        try:
            message = _evaluate(expression, value)
        except _EvalError:
            message = None
        if isinstance(message, str) and (trimmed := message.strip()) and "\n" not in trimmed \
                and len(trimmed.encode()) <= MAX_MESSAGE_BYTES:
            return trimmed
    fallback = str(rule.get("message") or "").strip()
    return fallback or f"failed rule: {str(rule.get('rule', '')).strip()}"


class _EvalError(Exception):
    """A CEL expression failed to compile or to evaluate (no such key, division by zero, ...)."""


def _evaluate(expression: str, value: Any) -> Any:
    """The plain Python value of `expression` with `self` bound to `value`. cel-expr-python returns a runtime
    error as a value of type ERROR (whose .value() is its text), not as an exception."""
    try:
        result = _compiled(expression).eval(data={"self": value})
    except Exception as exc:  # compile errors (RuntimeError), unsupported values (TypeError)
        raise _EvalError(" ".join(str(exc).split())) from None
    if result.type() == _environment_types().ERROR:
        raise _EvalError(" ".join(str(result.value()).split()))
    return result.value()


@cache
def _environment() -> Any:
    from cel_expr_python import cel  # imported only when an object has CEL rules to check

    return cel.NewEnv(variables={"self": cel.Type.DYN})


@cache
def _environment_types() -> Any:
    from cel_expr_python import cel  # only when this kind of check runs (validate's start-up, docs/performance.md)

    return cel.Type


@cache
def _compiled(rule: str) -> Any:
    return _environment().compile(rule)
