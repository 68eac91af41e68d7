"""Dynamic Resource Allocation objects offline (kubetrain/rules/k8s/dra.py), each case's verdict checked
against the suite's real kube-apiserver too (dryRun=All), and which resource.k8s.io versions each
Kubernetes version serves."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import kubernetes
import pytest

from kubetrain.kube.errors import BadRequest, Invalid, NotFound, api_message
from kubetrain.rules.k8s.versions import DEFAULT
from kubetrain.validate import SchemaStore, validate_objects
from tests.harness.helpers import rest_for

Obj = dict[str, Any]
GROUP = "resource.k8s.io"


def _template(**exactly: Any) -> Obj:
    request = {"name": "gpus", "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "ExactCount",
                                            "count": 2, **exactly}}
    return {"apiVersion": f"{GROUP}/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "t"},
            "spec": {"spec": {"devices": {"requests": [request]}}}}


def _claim(**exactly: Any) -> Obj:
    return {**_template(**exactly), "kind": "ResourceClaim", "spec": _template(**exactly)["spec"]["spec"]}


def _class(selectors: list[Any]) -> Obj:
    return {"apiVersion": f"{GROUP}/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.example.com"},
            "spec": {"selectors": selectors}}


def _edit(obj: Obj, change: Callable[[Obj], None]) -> Obj:
    changed = copy.deepcopy(obj)
    change(changed)
    return changed


def _request(obj: Obj) -> Obj:
    return obj["spec"]["spec"]["devices"]["requests"][0]  # type: ignore[no-any-return]


CEL = {"cel": {"expression": 'device.attributes["gpu.example.com"].model == "A100"'}}
# (case, object, the field reported, or None when valid)
CASES: list[tuple[str, Obj, str | None]] = [
    ("template", _template(selectors=[CEL]), None),
    ("claim", _claim(), None),
    ("device-class", _class([CEL]), None),
    ("all-devices", _template(allocationMode="All", count=None), None),
    ("count-zero-is-one", _template(count=0), None),  # SetDefaults_ExactDeviceRequest: 0 (unset) means 1
    ("count-negative", _template(count=-2), "spec.spec.devices.requests[0].exactly.count"),
    ("count-with-all", _template(allocationMode="All", count=2), "spec.spec.devices.requests[0].exactly.count"),
    ("mode-unknown", _template(allocationMode="Some"), "spec.spec.devices.requests[0].exactly.allocationMode"),
    ("class-missing", _template(deviceClassName=""), "spec.spec.devices.requests[0].exactly.deviceClassName"),
    ("class-upper-case", _template(deviceClassName="GPU"), "spec.spec.devices.requests[0].exactly.deviceClassName"),
    ("selector-without-cel", _template(selectors=[{}]), "spec.spec.devices.requests[0].exactly.selectors[0].cel"),
    ("selector-too-long", _template(selectors=[{"cel": {"expression": "true || " * 1300 + "true"}}]),
     "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression"),
    ("request-upper-case", _edit(_template(), lambda o: _request(o).update(name="GPUs")),
     "spec.spec.devices.requests[0].name"),
    ("request-both-kinds", _edit(_template(), lambda o: _request(o).update(firstAvailable=[
        {"name": "a", "deviceClassName": "gpu.example.com"}])), "spec.spec.devices.requests[0]"),
    ("request-neither", _edit(_template(), lambda o: _request(o).pop("exactly")), "spec.spec.devices.requests[0]"),
    ("claim-count-negative", _claim(count=-1), "spec.devices.requests[0].exactly.count"),
    ("class-selector-without-cel", _class([{}]), "spec.selectors[0].cel"),
]
IDS = [c[0] for c in CASES]


def _offline(obj: Obj, version: str = DEFAULT) -> tuple[list[str], list[str]]:
    report = validate_objects([copy.deepcopy(obj)], SchemaStore(kubernetes_version=version))
    return [i.path for i in report.errors()], [i.message for i in report.errors()]


@pytest.mark.parametrize(("name", "obj", "field"), CASES, ids=IDS)
def test_offline_verdict(name: str, obj: Obj, field: str | None) -> None:
    paths, messages = _offline(obj)
    if field is None:
        assert paths == [], messages
    else:
        assert any(p.startswith(field) for p in paths), (paths, messages)


@pytest.mark.parametrize("minor", range(31, 38))
@pytest.mark.parametrize("version", ["v1", "v1beta1", "v1beta2"])
def test_served_versions(minor: int, version: str) -> None:
    """v1 from 1.34; the beta versions are off by default everywhere (betaAPIGroupVersionsDisabledByDefault)."""
    obj = {**_template(), "apiVersion": f"{GROUP}/{version}"}
    if version != "v1":
        obj["spec"]["spec"]["devices"]["requests"][0] = {"name": "gpus", "deviceClassName": "gpu.example.com"}
    paths, messages = _offline(obj, f"1.{minor}")
    served = version == "v1" and minor >= 34
    assert (paths == []) == served, (paths, messages)
    if not served:
        assert paths == ["apiVersion"] and ("use resource.k8s.io/v1" in messages[0]) == (minor >= 34), messages


# ---- against the real API server (the suite's) -----------------------------------------------------------------------

PLURALS = {"ResourceClaimTemplate": "resourceclaimtemplates", "ResourceClaim": "resourceclaims",
           "DeviceClass": "deviceclasses"}


def dry_run(client: Any, obj: Obj, namespace: str) -> str:
    """The server's refusal of a dry-run create ('' when accepted); 404 is a version it does not serve."""
    version, kind = obj["apiVersion"], obj["kind"]
    where = "" if kind == "DeviceClass" else f"/namespaces/{namespace}"
    try:
        rest_for(client).json("POST", f"/apis/{version}{where}/{PLURALS[kind]}",
                              {"dryRun": "All", "fieldValidation": "Strict"}, obj)
    except (BadRequest, NotFound, Invalid) as exc:
        return api_message(exc)
    return ""


@pytest.mark.controlplane
def test_offline_verdicts_agree_with_the_server(k8s: kubernetes.client.ApiClient, namespace: str) -> None:
    disagree = []
    for name, obj, field in CASES:
        server = dry_run(k8s, obj, namespace)
        if bool(server) != (field is not None):
            disagree.append((name, server or "accepted"))
    assert disagree == []


@pytest.mark.controlplane
def test_beta_versions_are_not_served(k8s: kubernetes.client.ApiClient, namespace: str) -> None:
    obj = {**_template(), "apiVersion": f"{GROUP}/v1beta2"}
    assert dry_run(k8s, obj, namespace)
    assert _offline(obj)[0] == ["apiVersion"]
