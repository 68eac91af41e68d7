"""API and network failures → one-line ClusterErrors with the fix (real-server cases: tests/jobs/test_apply.py)."""

from __future__ import annotations

import json

import pytest

from kubetrain.kube.errors import (
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    InternalError,
    Invalid,
    NotFound,
    ServerError,
    TooLarge,
    TooManyRequests,
    Unauthorized,
    translate,
)
from kubetrain.kube.kubeconfig import Endpoint
from kubetrain.kube.rest import Rest
from tests.testenv.fakeapi import FakeApi, status_answer


def api_error(status: int, body: dict[str, object] | str) -> ApiError:
    return ApiError.of(status, "x", body if isinstance(body, str) else json.dumps(body))


def test_each_failure_says_how_to_fix_it() -> None:
    assert "re-login / refresh the kubeconfig" in str(translate(api_error(401, {}), "list jobs"))
    forbidden = {"message": 'pytorchjobs.kubeflow.org is forbidden: User "bob" cannot create resource '
                            '"pytorchjobs" in API group "kubeflow.org" in the namespace "ml"'}
    text = str(translate(api_error(403, forbidden), "create pytorchjobs.kubeflow.org"))
    assert text.startswith("forbidden: cannot create pytorchjobs.kubeflow.org: ") and 'cannot create resource' in text
    missing_ns = {"reason": "NotFound", "message": 'namespaces "ml" not found',
                  "details": {"name": "ml", "kind": "namespaces"}}
    assert str(translate(api_error(404, missing_ns), "x")) == (
        "namespace ml does not exist: create it: kubectl create namespace ml")
    assert "install the Kubeflow training-operator" in str(translate(api_error(404, "404 page not found"), "x"))
    invalid = {"details": {"kind": "PyTorchJob", "name": "j", "causes": [
        {"field": "spec.pytorchReplicaSpecs.Master.replicas", "message": "Invalid value: \"string\""}]}}
    assert str(translate(api_error(422, invalid), "x")) == (
        "invalid: PyTorchJob 'j' rejected by the API server: spec.pytorchReplicaSpecs.Master.replicas: "
        'Invalid value: "string"')
    refused = ConnectionRefusedError(111, "Connection refused")
    assert str(translate(refused, "x", "https://10.0.0.1:6443")) == (
        "cannot reach https://10.0.0.1:6443: is the cluster running? (kubectl cluster-info)")
    assert all("\n" not in str(translate(e, "x")) for e in (api_error(500, "oops\ntrace"), refused))


@pytest.mark.parametrize(("status", "kind"), [
    (400, BadRequest), (401, Unauthorized), (403, Forbidden), (413, TooLarge), (422, Invalid),
    (429, TooManyRequests), (500, InternalError), (503, ServerError), (418, ApiError)])
def test_callers_catch_the_class_named_for_a_status(status: int, kind: type[ApiError]) -> None:
    """One error vocabulary: every status a caller handles has its own class (no `.status` checks by hand)."""
    error = ApiError.of(status, "R", "{}")
    assert type(error) is kind and error.status == status


def test_an_error_status_is_a_typed_error_with_the_servers_status(fake_api: FakeApi) -> None:
    """The REST client raises NotFound / Conflict / Gone ... (one class per status), the server's Status parsed."""
    fake_api.otherwise(lambda request: status_answer(int(request.path.rsplit("/", 1)[-1]), reason="R",
                                                     message=f"m{request.path.rsplit('/', 1)[-1]}",
                                                     details={"name": "j"}))
    rest = Rest(Endpoint(server=fake_api.url, context=None, namespace=None, token="t"))
    for code, kind in ((404, NotFound), (409, Conflict), (410, Gone), (418, ApiError)):
        try:
            rest.get(f"/x/{code}")
        except ApiError as exc:
            assert type(exc) is kind and exc.status == code
            assert exc.status_object["message"] == f"m{code}" and exc.status_object["details"] == {"name": "j"}
        else:
            raise AssertionError(f"no error for {code}")
