"""One finding of a validation rule, and the dict walking the rules share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubetrain.fieldpath import PathKey


@dataclass(frozen=True)
class Finding:
    path: PathKey
    message: str
    severity: str = "error"  # or "warning"


def get(obj: Any, *keys: str) -> Any:
    """obj[k1][k2]..., or None as soon as a level is missing or not a mapping."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj
