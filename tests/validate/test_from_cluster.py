"""`kubetrain validate --from-cluster` reads the CRDs the real API server serves (the training-operator's
PyTorchJob CRD in the test control plane), with --kubeconfig/--context like every cluster command."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import kubetrain.api as kt
from kubetrain.cli.main import cli
from tests.kube.test_connection import write_kubeconfig
from tests.testenv.specs import render, write_spec

pytestmark = pytest.mark.controlplane


@pytest.fixture
def no_schema_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBETRAIN_CACHE_DIR", str(tmp_path / "empty-cache"))  # only the cluster can supply CRDs


def _manifest(tmp_path: Path, **change: Any) -> Path:
    objects = render(write_spec(tmp_path, "fc", nodes=2, gpus=8), "default")
    job = objects[-1]
    job["spec"].update(change)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def test_the_clusters_crd_is_used(controlplane: Any, tmp_path: Path, no_schema_cache: None) -> None:
    path = str(_manifest(tmp_path))
    offline = CliRunner().invoke(cli, ["validate", path])
    assert offline.exit_code == 1 and "no schema for kubeflow.org/v1 PyTorchJob" in offline.output, offline.output
    online = CliRunner().invoke(cli, ["validate", "--from-cluster", "--kubeconfig", str(controlplane.kubeconfig),
                                      path])
    assert online.exit_code == 0, online.output


def test_a_schema_violation_is_found_with_the_clusters_crd(controlplane: Any, tmp_path: Path,
                                                          no_schema_cache: None) -> None:
    path = str(_manifest(tmp_path, runPolicy={"cleanPodPolicy": "Sometimes"}))
    result = CliRunner().invoke(cli, ["validate", "--from-cluster", "--kubeconfig", str(controlplane.kubeconfig),
                                      "-o", "json", path])
    assert result.exit_code == 1, result.output
    assert "cleanPodPolicy" in result.stdout and "Sometimes" in result.stdout


def test_an_unreachable_cluster_is_one_line_and_exit_3(tmp_path: Path, no_schema_cache: None) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    config = write_kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}", {"token": "t"})
    result = CliRunner().invoke(cli, ["validate", "--from-cluster", "--kubeconfig", str(config),
                                      str(_manifest(tmp_path))])
    assert result.exit_code == 3, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and f"127.0.0.1:{port}" in line


def test_context_without_from_cluster_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["validate", "--context", "prod", str(_manifest(tmp_path))])
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: --context and --kubeconfig only apply with --from-cluster"


def _restricted(controlplane: Any, namespace: str) -> None:
    """PodSecurity admission (built into the API server) refuses pods that run as root in this namespace."""
    import kubernetes

    kubernetes.client.CoreV1Api(controlplane.api_client()).patch_namespace(namespace, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted"}}})


def test_pod_templates_are_dry_run_as_pods(controlplane: Any, namespace: str, tmp_path: Path,
                                           no_schema_cache: None) -> None:
    """The PyTorchJob itself is accepted; its pods would not be (PodSecurity). Offline nothing can know that;
    with the cluster, the pod template is reported at its line."""
    _restricted(controlplane, namespace)
    objects = render(write_spec(tmp_path, "psa", nodes=2, gpus=0), namespace)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(objects[-1], sort_keys=False))
    result = CliRunner().invoke(cli, ["validate", "--from-cluster", "--kubeconfig", str(controlplane.kubeconfig),
                                      str(path)])
    assert result.exit_code == 1, result.output
    line = next(n for n, row in enumerate(path.read_text().splitlines(), 1) if row.strip() == "template:")
    assert f"error: {path}:{line}: doc 1 PyTorchJob/psa: spec.pytorchReplicaSpecs.Master.template: the API server " \
        "rejects this pod template as a Pod" in result.stdout, result.stdout
    assert "violates PodSecurity" in result.stdout


def test_the_python_api_dry_runs_the_pod_templates_as_validate_from_cluster_does(controlplane: Any, namespace: str,
                                                                                 tmp_path: Path,
                                                                                 no_schema_cache: None) -> None:
    _restricted(controlplane, namespace)
    objects = render(write_spec(tmp_path, "psa", nodes=2, gpus=0), namespace)
    report = kt.validate(objects[-1:], connection=kt.connect(kubeconfig=str(controlplane.kubeconfig)))
    assert report.failed(), [i.text() for i in report.issues]
    refused = {i.path for i in report.issues if i.severity == "error" and "violates PodSecurity" in i.message}
    assert refused == {"spec.pytorchReplicaSpecs.Master.template", "spec.pytorchReplicaSpecs.Worker.template"}
