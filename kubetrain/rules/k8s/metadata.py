"""Object metadata (apimachinery pkg/api/validation/objectmeta.go: ValidateObjectMeta, ValidateAnnotations,
ValidateAnnotationsSize; metav1validation.ValidateLabels; pkg/apis/core/validation: ValidateNamespaceName).
metadata.name and the top-level label and annotation keys are checked by kubetrain/validate/engine.py."""

from __future__ import annotations

import json
from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.rules.findings import Finding
from kubetrain.rules.k8s import names
from kubetrain.rules.k8s.base import Findings, check, mapping

ANNOTATIONS_LIMIT = 256 * 1024  # TotalAnnotationSizeLimitB


def object_metadata(meta: Any, path: PathKey = ("metadata",)) -> Findings:
    meta = mapping(meta)
    namespace = meta.get("namespace")
    if isinstance(namespace, str) and namespace:
        yield from check((*path, "namespace"), names.dns1123_label(namespace))
    generate = meta.get("generateName")
    if isinstance(generate, str) and generate and not meta.get("name"):
        # ValidateObjectMeta checks the prefix with a trailing '-' removed, as a DNS subdomain
        yield from check((*path, "generateName"), names.dns1123_subdomain(generate.removesuffix("-") or "x"))
    yield from annotations_size(meta.get("annotations"), (*path, "annotations"))


def annotations_size(annotations: Any, path: PathKey) -> Findings:
    total = sum(len(str(k).encode()) + len((v if isinstance(v, str) else json.dumps(v)).encode())
                for k, v in mapping(annotations).items())
    if total > ANNOTATIONS_LIMIT:
        yield Finding(path, f"Too long: may not be more than {ANNOTATIONS_LIMIT} bytes (annotations hold {total})")


def labels_and_annotations(meta: Any, path: PathKey) -> Findings:
    """A template's metadata: label keys and values, annotation keys and size."""
    meta = mapping(meta)
    for key, value in mapping(meta.get("labels")).items():
        problem = names.qualified_name(str(key)) or (names.label_value(value) if isinstance(value, str) else None)
        yield from check((*path, "labels", key), problem)
    for key in mapping(meta.get("annotations")):
        yield from check((*path, "annotations", key), names.qualified_name(str(key).lower()))
    yield from annotations_size(meta.get("annotations"), (*path, "annotations"))
