"""Scenario 4: a user whose Role lacks create/patch on pytorchjobs gets 403."""

from __future__ import annotations

import json

import kubernetes
import pytest

from tests.harness.helpers import GROUP, PLURAL, VERSION, pytorchjob, server_side_apply

pytestmark = pytest.mark.controlplane
USER = "restricted-researcher"


def _read_only_role(namespace: str) -> tuple[dict, dict]:
    role = {
        "metadata": {"name": "pytorchjob-viewer", "namespace": namespace},
        "rules": [
            {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
        ],
    }
    binding = {
        "metadata": {"name": "pytorchjob-viewer", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pytorchjob-viewer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
    }
    return role, binding


def test_restricted_user_is_forbidden(controlplane, namespace):
    rbac = kubernetes.client.RbacAuthorizationV1Api(controlplane.api_client())
    role, binding = _read_only_role(namespace)
    rbac.create_namespaced_role(namespace, role)
    rbac.create_namespaced_role_binding(namespace, binding)
    # The user authenticates with a client certificate signed by the cluster CA.
    user = controlplane.api_client(user=USER, groups=("kubetrain-testers",))

    jobs = kubernetes.client.CustomObjectsApi(user)
    assert jobs.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"] == []
    for dry_run in (True, False):
        with pytest.raises(kubernetes.client.ApiException) as err:
            server_side_apply(user, pytorchjob("nope", namespace), dry_run=dry_run)
        assert err.value.status == 403
        status = json.loads(err.value.body)
        assert status["reason"] == "Forbidden"
        assert f'User "{USER}" cannot patch resource "pytorchjobs"' in status["message"], status["message"]
    with pytest.raises(kubernetes.client.ApiException) as err:
        jobs.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, pytorchjob("nope", namespace))
    assert err.value.status == 403 and "cannot create resource" in json.loads(err.value.body)["message"]

    # ...and in another namespace the user cannot even list.
    with pytest.raises(kubernetes.client.ApiException) as err:
        jobs.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert err.value.status == 403
