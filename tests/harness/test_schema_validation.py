"""Scenario 3: the PyTorchJob CRD's schema rejects a bad manifest on server-side
dry-run, with field-level detail, and nothing is persisted.

Two real apiserver behaviours are pinned here, because a client must handle both:
* OpenAPI validation (required fields, patterns): 422 Invalid with
  details.causes[].field.
* Server-side apply cannot even build its typed patch for a wrong type or an
  undeclared field: the apiserver answers 500 "failed to create typed patch
  object" with the field path in the message (upstream behaviour of SSA).
"""

from __future__ import annotations

import json
from typing import Any

import kubernetes
import pytest

from tests.harness.helpers import GROUP, PLURAL, VERSION, pytorchjob, server_side_apply

pytestmark = pytest.mark.controlplane


def _container(job: dict[str, Any], role: str) -> dict[str, Any]:
    return job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"][0]


def _no_containers(job: dict[str, Any]) -> None:
    del job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]


def _bad_quantity(job: dict[str, Any]) -> None:
    _container(job, "Worker")["resources"]["limits"]["nvidia.com/gpu"] = "eight"


def _string_replicas(job: dict[str, Any]) -> None:
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "two"


def _unknown_field(job: dict[str, Any]) -> None:
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicaz"] = 1


INVALID = [  # (mutation, field in details.causes, cause reason)
    (_no_containers, "spec.pytorchReplicaSpecs.Master.template.spec.containers", "FieldValueRequired"),
    (
        _bad_quantity,
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits.nvidia.com/gpu",
        "FieldValueInvalid",
    ),
]
UNTYPABLE = [  # (mutation, field path and problem in the message)
    (
        _string_replicas,
        ".spec.pytorchReplicaSpecs.Master.replicas: expected numeric (int or float), got string",
    ),
    (_unknown_field, ".spec.pytorchReplicaSpecs.Master.replicaz: field not declared in schema"),
]


def _rejected(client: kubernetes.client.ApiClient, job: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    with pytest.raises(kubernetes.client.ApiException) as err:
        server_side_apply(client, job, dry_run=True)
    return err.value.status, json.loads(err.value.body)


def _assert_not_persisted(client: kubernetes.client.ApiClient, namespace: str) -> None:
    with pytest.raises(kubernetes.client.ApiException) as gone:
        kubernetes.client.CustomObjectsApi(client).get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "bad"
        )
    assert gone.value.status == 404


@pytest.mark.parametrize(("mutate", "field", "reason"), INVALID, ids=lambda v: getattr(v, "__name__", "")[:20])
def test_openapi_schema_violation_is_422_with_causes(controlplane, namespace, mutate, field, reason):
    client = controlplane.api_client()
    job = pytorchjob("bad", namespace, workers=1, gpus=8)
    server_side_apply(client, job, dry_run=True)  # the unbroken manifest passes
    mutate(job)
    code, status = _rejected(client, job)
    assert (code, status["reason"]) == (422, "Invalid"), status
    assert {"field": field, "reason": reason} in [
        {k: c.get(k) for k in ("field", "reason")} for c in status["details"]["causes"]
    ], status
    _assert_not_persisted(client, namespace)


@pytest.mark.parametrize(("mutate", "detail"), UNTYPABLE, ids=lambda v: getattr(v, "__name__", "")[:20])
def test_untypable_apply_is_500_naming_the_field(controlplane, namespace, mutate, detail):
    client = controlplane.api_client()
    job = pytorchjob("bad", namespace, workers=1, gpus=8)
    mutate(job)
    code, status = _rejected(client, job)
    assert code == 500, status
    assert "failed to create typed patch object" in status["message"] and detail in status["message"], status
    _assert_not_persisted(client, namespace)
