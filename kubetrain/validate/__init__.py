"""Offline validation of Kubernetes manifests against CRD and core schemas, plus semantic checks."""

from kubetrain.validate.engine import Issue, Report, validate_objects, validate_sources
from kubetrain.validate.schemas import SchemaStore

__all__ = ["Issue", "Report", "SchemaStore", "validate_objects", "validate_sources"]
