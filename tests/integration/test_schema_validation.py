"""Scenario 3: the PyTorchJob CRD's structural schema rejects a bad manifest on
server-side dry-run, with field-level detail, and nothing is persisted."""

from __future__ import annotations

import json

import kubernetes
import pytest

from tests.integration.helpers import GROUP, PLURAL, VERSION, pytorchjob, server_side_apply

pytestmark = pytest.mark.controlplane


def _bad_replicas(job):
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "two"
    return ".spec.pytorchReplicaSpecs.Master.replicas"


def _nameless_container(job):
    del job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"]
    return "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].name"


def _unknown_field(job):
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicaz"] = 1
    return ".spec.pytorchReplicaSpecs.Master.replicaz"


@pytest.mark.parametrize("break_it", [_bad_replicas, _nameless_container, _unknown_field])
def test_schema_rejects_on_server_dry_run(controlplane, namespace, break_it):
    client = controlplane.api_client()
    job = pytorchjob("bad", namespace, workers=1, gpus=8)
    server_side_apply(client, job, dry_run=True)  # the unbroken manifest is fine

    field = break_it(job)
    with pytest.raises(kubernetes.client.ApiException) as err:
        server_side_apply(client, job, dry_run=True)
    status = json.loads(err.value.body)
    assert err.value.status in (400, 422), status
    assert status["reason"] in ("Invalid", "BadRequest"), status
    assert field.lstrip(".") in status["message"], status["message"]

    with pytest.raises(kubernetes.client.ApiException) as gone:
        kubernetes.client.CustomObjectsApi(client).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "bad")
    assert gone.value.status == 404  # dry-run persisted nothing
