"""A jsonschema validator class that understands Kubernetes' list-type extensions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
from jsonschema import ValidationError


def _list_type(validator: Any, list_type: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not isinstance(instance, list):
        return
    if list_type == "set":
        seen = [json.dumps(item, sort_keys=True) for item in instance]
        for index, key in enumerate(seen):
            if key in seen[:index]:
                yield ValidationError(f"duplicate entry {instance[index]!r} in a set", path=[index])
    elif list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        found: set[str] = set()
        for index, item in enumerate(instance):
            if not isinstance(item, dict):
                continue
            key = json.dumps([item.get(k) for k in keys])
            if key in found:
                shown = ", ".join(f"{k}={item.get(k)!r}" for k in keys)
                yield ValidationError(f"duplicate entry with {shown}", path=[index])
            found.add(key)


KubernetesValidator = jsonschema.validators.extend(
    jsonschema.Draft7Validator, {"x-kubernetes-list-type": _list_type})

# kubernetes-validate's schemas for built-in kinds are written as draft 2020-12 with $defs references.
CoreValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"x-kubernetes-list-type": _list_type})
