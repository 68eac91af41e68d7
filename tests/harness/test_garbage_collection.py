"""Scenario 5: deleting a PyTorchJob garbage-collects its pods and services
(ownerReferences + the controller-manager's garbage collector + kwok)."""

from __future__ import annotations

import kubernetes
import pytest

from tests.harness.helpers import (
    GROUP,
    JOB_NAME_LABEL,
    PLURAL,
    VERSION,
    get_job,
    pytorchjob,
    server_side_apply,
    wait_for,
)

pytestmark = pytest.mark.controlplane


@pytest.mark.parametrize("propagation", ["Background", "Foreground"])
def test_delete_job_collects_pods_and_services(controlplane, namespace, propagation):
    client = controlplane.api_client()
    core = kubernetes.client.CoreV1Api(client)
    selector = f"{JOB_NAME_LABEL}=gc"
    server_side_apply(client, pytorchjob("gc", namespace, workers=1, gpus=1))

    # Running, as a user's pods are when they delete the job (not just created).
    pods = wait_for(lambda: _n([p for p in core.list_namespaced_pod(namespace, label_selector=selector).items
                                if p.status.phase == "Running"], 2), "2 Running pods")
    services = wait_for(
        lambda: _n(core.list_namespaced_service(namespace, label_selector=selector).items, 2), "2 services"
    )
    uid = get_job(client, namespace, "gc")["metadata"]["uid"]
    for obj in [*pods, *services]:
        owners = obj.metadata.owner_references
        assert [(o.kind, o.uid, o.controller) for o in owners] == [("PyTorchJob", uid, True)]

    kubernetes.client.CustomObjectsApi(client).delete_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "gc", propagation_policy=propagation
    )
    wait_for(
        lambda: not core.list_namespaced_pod(namespace, label_selector=selector).items or None,
        "pods gone",
        60,
    )
    wait_for(
        lambda: not core.list_namespaced_service(namespace, label_selector=selector).items or None,
        "services gone",
        60,
    )
    wait_for(lambda: _absent(client, namespace), "job gone", 60)


def _n(items, n):
    return items if len(items) == n else None


def _absent(client, namespace):
    try:
        get_job(client, namespace, "gc")
    except kubernetes.client.ApiException as exc:
        return exc.status == 404
    return False
