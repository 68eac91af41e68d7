"""Offline validation of Kubernetes manifests against CRD and core schemas, plus semantic checks.

The names below load on first use, so that `render` and the spec loader can use the rule modules
(kubetrain.rules.k8s, kubetrain.validate.operators) without loading the schema machinery."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubetrain.validate.engine import Issue, Report, validate_objects, validate_sources
    from kubetrain.validate.schemas import SchemaStore

__all__ = ["Issue", "Report", "SchemaStore", "validate_objects", "validate_sources"]
_HOME = {"SchemaStore": "kubetrain.validate.schemas"}


# mypy reads the names from the TYPE_CHECKING imports above, so a missing one is an error; a module
# __getattr__ it could see would type every unknown name as Any.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name not in __all__:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(_HOME.get(name, "kubetrain.validate.engine")), name)
