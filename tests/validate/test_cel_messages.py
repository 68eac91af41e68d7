"""CEL `messageExpression`: the offline message equals the API server's, including its fallbacks to
`message` (an evaluation error, a blank string). The probe CRD (celprobe-crd.yaml, next to this file and
not under manifests/, which other tests read as a whole) is installed
on the real control plane; each case is created with dryRun=All."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from kubetrain.validate import SchemaStore, validate_sources
from tests.testenv.controlplane import ControlPlane, established
from tests.testenv.polling import wait_for

CRD = yaml.safe_load((Path(__file__).parent / "celprobe-crd.yaml").read_text())
GROUP, PLURAL = CRD["spec"]["group"], CRD["spec"]["names"]["plural"]
# spec -> the message both sides must give (None: valid)
CASES = [
    ({"nodes": 2}, None),
    ({"nodes": 9}, "nodes must be at most 8"),
    ({"nodes": 100}, "nodes must be at most 8, far from it"),
    ({"nodes": 5, "label": "big"}, "label big cannot have 5 nodes"),
    ({"nodes": 5}, "5 nodes are not allowed"),  # messageExpression errors (no label): `message`
    ({"nodes": 3}, "failed rule: self.nodes != 3"),  # blank messageExpression, no message
]


def probe(spec: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "CelProbe", "metadata": {"name": "probe", "namespace": namespace},
            "spec": spec}


def offline_messages(spec: dict[str, Any]) -> list[str]:
    store = SchemaStore()
    store.add_crd(CRD, "celprobe-crd.yaml")
    report = validate_sources([("probe.yaml", yaml.safe_dump(probe(spec)))], store)
    return [i.message for i in report.errors()]


@pytest.mark.parametrize(("spec", "message"), CASES)
def test_offline_message(spec: dict[str, Any], message: str | None) -> None:
    assert offline_messages(spec) == ([message] if message else [])


@pytest.fixture(scope="module")
def probe_crd(controlplane: ControlPlane) -> Iterator[kubernetes.client.ApiClient]:
    client = controlplane.api_client()
    ext = kubernetes.client.ApiextensionsV1Api(client)
    ext.create_custom_resource_definition(CRD)
    try:
        wait_for(lambda: established(ext.read_custom_resource_definition(CRD["metadata"]["name"])),
                 "the probe CRD to be Established", 30, 0.1)
        yield client
    finally:
        ext.delete_custom_resource_definition(CRD["metadata"]["name"])


def server_message(client: kubernetes.client.ApiClient, obj: dict[str, Any]) -> str | None:
    api = kubernetes.client.CustomObjectsApi(client)

    def create() -> tuple[str | None] | None:
        """(the server's message or None if accepted); None while discovery still lags Established."""
        try:
            api.create_namespaced_custom_object(GROUP, "v1", obj["metadata"]["namespace"], PLURAL, obj,
                                                dry_run="All")
            return (None,)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            assert exc.status == 422, exc.body
            return (str(json.loads(exc.body)["message"]),)

    return wait_for(create, "the probe CRD to be served", 30)[0]


@pytest.mark.controlplane
@pytest.mark.parametrize(("spec", "message"), CASES)
def test_server_message_equals_offline(spec: dict[str, Any], message: str | None,
                                       probe_crd: kubernetes.client.ApiClient, namespace: str) -> None:
    served = server_message(probe_crd, probe(spec, namespace))
    if message is None:
        assert served is None
    else:  # CelProbe.parity.kubetrain.dev "probe" is invalid: spec: Invalid value: "object": <message>
        assert served is not None and served.endswith(f": {message}"), served
    assert offline_messages(spec) == ([message] if message else [])
