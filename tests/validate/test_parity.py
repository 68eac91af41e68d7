"""Parity with the real control plane: every case of the corpus (tests/validate/corpus.py) is created with
`dryRun=All` against a real kube-apiserver with the training-operator v1.9.4 webhook (and, for TrainJobs,
Trainer v2.3.0 + JobSet with theirs) installed.

- nothing the server rejects is accepted offline;
- nothing the server accepts is rejected offline, except by a later-stage rule that says so (checked offline
  in test_rules.py, which also checks the exact field).
"""

from __future__ import annotations

import json
from typing import Any

import kubernetes
import pytest

from tests.validate.corpus import ACCEPT, CASES, REJECT, Case

pytestmark = pytest.mark.controlplane
PLURALS = {"PyTorchJob": "pytorchjobs", "TrainJob": "trainjobs"}


def server_verdict(client: kubernetes.client.ApiClient, obj: dict[str, Any]) -> tuple[str, str]:
    group, version = obj["apiVersion"].split("/")
    try:
        kubernetes.client.CustomObjectsApi(client).create_namespaced_custom_object(
            group, version, obj["metadata"]["namespace"], PLURALS[obj["kind"]], obj, dry_run="All")
    except kubernetes.client.ApiException as exc:
        if exc.status not in (400, 403, 422):  # 403: a webhook's denial; 400/422: schema and CEL
            raise
        return REJECT, str(json.loads(exc.body).get("message", exc.body))[:500]
    return ACCEPT, ""


def _check(case: Case, client: kubernetes.client.ApiClient, namespace: str) -> None:
    verdict, message = server_verdict(client, case.manifest(namespace=namespace))
    assert verdict == case.server, f"{case.id}: the server says {verdict} ({message}); the corpus says {case.server}"
    if case.server == REJECT:
        assert case.path is not None, f"{case.id}: rejected by the server but accepted offline"


PYTORCHJOBS = [c for c in CASES if c.base != "trainjob.yaml"]
TRAINJOBS = [c for c in CASES if c.base == "trainjob.yaml"]


@pytest.mark.parametrize("case", PYTORCHJOBS, ids=[c.id for c in PYTORCHJOBS])
def test_pytorchjob_parity(case: Case, k8s: kubernetes.client.ApiClient, namespace: str) -> None:
    _check(case, k8s, namespace)


@pytest.mark.parametrize("case", TRAINJOBS, ids=[c.id for c in TRAINJOBS])
def test_trainjob_parity(case: Case, trainer: Any, k8s: kubernetes.client.ApiClient, namespace: str) -> None:
    _check(case, k8s, namespace)
