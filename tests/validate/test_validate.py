"""`kubetrain validate` against the real upstream CRDs: upstream-style examples pass, and hand-broken
variants each fail with one precise message."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.validate import SchemaStore, validate_sources

MANIFESTS = Path(__file__).parent / "manifests"
EXAMPLES = sorted(MANIFESTS.glob("*.yaml"))


def check(store: SchemaStore, text: str) -> list[str]:
    report = validate_sources([("job.yaml", text)], store)
    return [f"{i.severity}: {i.path}: {i.message}" for i in report.issues]


def errors(store: SchemaStore, text: str) -> list[str]:
    return [line for line in check(store, text) if line.startswith("error")]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_upstream_style_examples_are_valid(path: Path, schema_store: SchemaStore) -> None:
    assert errors(schema_store, path.read_text()) == []


def simple() -> dict[str, Any]:
    return yaml.safe_load((MANIFESTS / "simple.yaml").read_text())  # type: ignore[no-any-return]


def _master(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["pytorchReplicaSpecs"]["Master"]  # type: ignore[no-any-return]


def _container(job: dict[str, Any]) -> dict[str, Any]:
    return _master(job)["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def wrong_level(job: dict[str, Any]) -> None:
    _master(job)["runPolicy"] = {"cleanPodPolicy": "None"}


def wrong_container_name(job: dict[str, Any]) -> None:
    _container(job)["name"] = "trainer"


def string_for_int(job: dict[str, Any]) -> None:
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "1"


def unknown_field(job: dict[str, Any]) -> None:
    _container(job)["imagePullPolicyy"] = _container(job).pop("imagePullPolicy")


def gpu_requests_differ(job: dict[str, Any]) -> None:
    _container(job)["resources"] = {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}


def two_masters(job: dict[str, Any]) -> None:
    _master(job)["replicas"] = 2


def bad_restart_policy(job: dict[str, Any]) -> None:
    _master(job)["restartPolicy"] = "Sometimes"


MASTER = "spec.pytorchReplicaSpecs.Master"
BROKEN: list[tuple[Callable[[dict[str, Any]], None], str]] = [
    (wrong_level, f"error: {MASTER}.runPolicy: runPolicy belongs directly under spec (spec.runPolicy)"),
    (wrong_container_name, f"error: {MASTER}.template.spec.containers: no container named 'pytorch' (found "
     "trainer): the operator injects the rendezvous env and port only into that container"),
    (string_for_int, "error: spec.pytorchReplicaSpecs.Worker.replicas: must be an integer, not the string '1'"),
    (unknown_field, f"error: {MASTER}.template.spec.containers[0].imagePullPolicyy: unknown field; did you mean "
     "'imagePullPolicy'?"),
    (gpu_requests_differ, f'error: {MASTER}.template.spec.containers[0].resources.requests["nvidia.com/gpu"]: '
     "nvidia.com/gpu request (1) must equal its limit (2); extended resources cannot be overcommitted"),
    (two_masters, f"error: {MASTER}.replicas: Master must have exactly 1 replica, not 2"),
    (bad_restart_policy, f"error: {MASTER}.restartPolicy: 'Sometimes' is not one of Always, ExitCode, Never, "
     "OnFailure (the API server accepts it, but the operator's pod creation would fail)"),
]


@pytest.mark.parametrize(("breaks", "expected"), BROKEN, ids=[b.__name__ for b, _ in BROKEN])
def test_broken_variants_fail_precisely(breaks: Callable[[dict[str, Any]], None], expected: str,
                                        schema_store: SchemaStore) -> None:
    job = simple()
    breaks(job)
    assert errors(schema_store, yaml.safe_dump(job)) == [expected]


def test_issue_points_at_the_line(schema_store: SchemaStore) -> None:
    original = (MANIFESTS / "simple.yaml").read_text()
    text = original.replace("    Worker:\n      replicas: 1", '    Worker:\n      replicas: "1"')
    line = text.splitlines().index('      replicas: "1"') + 1
    report = validate_sources([("job.yaml", text)], schema_store)
    assert [(i.line, i.document, i.kind, i.name) for i in report.errors()] == [
        (line, 1, "PyTorchJob", "pytorch-simple")]
    assert report.errors()[0].text() == (
        f"error: job.yaml:{line}: doc 1 PyTorchJob/pytorch-simple: spec.pytorchReplicaSpecs.Worker.replicas: "
        "must be an integer, not the string '1'")


def test_int_or_string_and_nullable(schema_store: SchemaStore) -> None:
    job = simple()
    _container(job)["resources"] = {"limits": {"cpu": 2, "memory": "1Gi"}}
    assert errors(schema_store, yaml.safe_dump(job)) == []
    _container(job)["resources"] = {"limits": {"cpu": [2]}}
    assert errors(schema_store, yaml.safe_dump(job)) == [
        f'error: {MASTER}.template.spec.containers[0].resources.limits.cpu: must be an integer or a string, not a '
        "list"]


def test_list_map_keys_must_be_unique(schema_store: SchemaStore) -> None:
    job = simple()
    _container(job)["ports"] = [{"containerPort": 23456, "name": "a"}, {"containerPort": 23456, "name": "b"}]
    found = errors(schema_store, yaml.safe_dump(job))
    assert len(found) == 1
    assert found[0].startswith(f"error: {MASTER}.template.spec.containers[0].ports[1]: duplicate entry with "
                               "containerPort=23456")


def test_preserve_unknown_fields_allows_extras() -> None:
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "spec": {"group": "example.com", "names": {"kind": "Thing"}, "versions": [{"name": "v1", "schema": {
               "openAPIV3Schema": {"type": "object", "properties": {"spec": {
                   "type": "object", "properties": {"open": {"type": "object",
                                                             "x-kubernetes-preserve-unknown-fields": True},
                                                    "closed": {"type": "object", "properties": {"a": {
                                                        "type": "string"}}}}}}}}}]}}
    store = SchemaStore()
    store.add_crd(crd, "thing-crd.yaml")
    doc = {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"},
           "spec": {"open": {"anything": {"goes": 1}}, "closed": {"a": "x", "b": "y"}}}
    assert errors(store, yaml.safe_dump(doc)) == ["error: spec.closed.b: unknown field"]


def test_core_kinds_use_kubernetes_openapi(schema_store: SchemaStore) -> None:
    good = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}
    assert check(schema_store, yaml.safe_dump(good)) == []
    bad = copy.deepcopy(good) | {"datta": {}}
    assert errors(schema_store, yaml.safe_dump(bad)) == ["error: datta: unknown field; did you mean 'data'?"]
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
               "spec": {"ports": [{"port": "eighty"}]}}
    assert errors(schema_store, yaml.safe_dump(service)) == [
        "error: spec.ports[0].port: must be an integer, not the string 'eighty'"]


def test_metadata_rules(schema_store: SchemaStore) -> None:
    job = simple()
    job["metadata"]["name"] = "Pytorch_Simple"
    job["metadata"]["labels"] = {"team": "a b"}
    found = errors(schema_store, yaml.safe_dump(job))
    assert [line.split(":")[1].strip() for line in found] == ["metadata.labels.team", "metadata.name"]


def test_missing_schema_says_how_to_get_it() -> None:
    found = check(SchemaStore(), (MANIFESTS / "simple.yaml").read_text())
    assert found[0] == ("error: : no schema for kubeflow.org/v1 PyTorchJob: run `kubetrain schemas fetch` (pinned "
                        "upstream CRDs), pass --schema FILE|URL, or use --from-cluster")
    report = validate_sources([("a.yaml", (MANIFESTS / "simple.yaml").read_text())], SchemaStore(),
                              ignore_missing_schemas=True)
    assert not report.failed()


def test_warnings_fail_only_when_strict(schema_store: SchemaStore) -> None:
    report = validate_sources([("a.yaml", (MANIFESTS / "mnist-nccl.yaml").read_text())], schema_store)
    assert not report.failed()
    assert sorted({i.message.split(":")[0] for i in report.warnings()}) == [
        "GPU pod without a memory-backed /dev/shm (emptyDir medium", "no ttlSecondsAfterFinished"]
    assert report.failed(strict=True)


def test_multi_document_and_syntax_errors(schema_store: SchemaStore) -> None:
    text = (MANIFESTS / "simple.yaml").read_text() + "---\n" + (MANIFESTS / "trainjob.yaml").read_text()
    report = validate_sources([("all.yaml", text), ("bad.yaml", "a: [1\n")], schema_store)
    assert report.documents == 2
    assert [(i.source, i.line, i.message) for i in report.errors()] == [
        ("bad.yaml", 2, "invalid YAML: expected ',' or ']', but got '<stream end>'")]
