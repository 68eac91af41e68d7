"""Integers the API server cannot decode: beyond int64 anywhere, beyond int32 in the fields Kubernetes and the
operators declare as int32 (the Go JSON decoder rejects the whole request)."""

from __future__ import annotations

import re
from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.rules.findings import Finding
from kubetrain.rules.k8s import names
from kubetrain.rules.k8s.base import is_int
from kubetrain.yamlsrc import compact_json

INT32_FIELDS = frozenset({
    "containerPort", "hostPort", "port", "targetPort", "nodePort", "initialDelaySeconds", "timeoutSeconds",
    "periodSeconds", "successThreshold", "failureThreshold", "weight", "defaultMode", "mode", "priority", "maxSkew",
    "minDomains", "replicas", "backoffLimit", "parallelism", "completions", "minReadySeconds", "revisionHistoryLimit",
    "progressDeadlineSeconds", "numNodes", "minReplicas", "maxReplicas", "maxRestarts", "backoffLimitPerIndex",
    "maxFailedIndexes", "numProcPerNode"})
INT64 = 2**63
TEN_DIGITS = re.compile(r"[:\[,]-?\d{10}")  # a JSON number of 10 digits or more; fewer fit in an int32


def overflow_findings(obj: Any, text: str | None = None) -> list[Finding]:
    """Fast path: most objects have no number of 10 digits or more in their (compact) JSON text; a string
    that looks like one only costs the full walk."""
    return overflows(obj) if TEN_DIGITS.search(compact_json(obj) if text is None else text) else []


def overflows(obj: Any, path: PathKey = ()) -> list[Finding]:
    found: list[Finding] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if is_int(value):
                problem = names.int32(value) if key in INT32_FIELDS else _int64(value)
                if problem:
                    found.append(Finding((*path, key), problem))
            elif isinstance(value, dict | list):
                found += overflows(value, (*path, key))
    elif isinstance(obj, list):
        for index, item in enumerate(obj):
            if is_int(item) and (problem := _int64(item)):
                found.append(Finding((*path, index), problem))
            elif isinstance(item, dict | list):
                found += overflows(item, (*path, index))
    return found


def _int64(value: int) -> str | None:
    if not -INT64 <= value < INT64:
        return f"{value} does not fit in a 64-bit integer"
    return None
