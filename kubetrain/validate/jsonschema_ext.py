"""A jsonschema validator class that understands Kubernetes' list-type extensions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
from jsonschema import ValidationError

from kubetrain.validate.openapi import list_type_problems


def _list_type(validator: Any, list_type: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    keys = schema.get("x-kubernetes-list-map-keys") or []
    for index, message in list_type_problems(list_type, keys, instance):
        yield ValidationError(message, path=[index])


KubernetesValidator = jsonschema.validators.extend(
    jsonschema.Draft7Validator, {"x-kubernetes-list-type": _list_type})

# kubernetes-validate's schemas for built-in kinds are written as draft 2020-12 with $defs references.
CoreValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"x-kubernetes-list-type": _list_type})
