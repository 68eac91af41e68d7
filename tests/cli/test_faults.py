"""Fault drills against the real control plane: a failing admission webhook, a re-created job's events, a
--wait timeout, a wrong namespace. The API server and etcd restarts under every long-running command are
tests/queues/test_restarts.py."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from click.testing import CliRunner

from kubetrain.cli.main import cli
from tests.harness.helpers import wait_for
from tests.testenv.specs import write_spec

pytestmark = pytest.mark.controlplane


def _running(core: Any, namespace: str, count: int) -> list[str]:
    def names() -> list[str] | None:
        found = [p.metadata.name for p in core.list_namespaced_pod(namespace).items if p.status.phase == "Running"]
        return sorted(found) if len(found) >= count else None

    return wait_for(names, f"{count} Running pods", timeout=90, interval=0.2)


def test_a_failing_admission_webhook_is_named(controlplane: Any, namespace: str, k8s: Any,
                                              tmp_path: Path) -> None:
    """A webhook whose service is down makes the API server answer 500 'failed calling webhook'."""
    admission = kubernetes.client.AdmissionregistrationV1Api(k8s)
    name = f"broken-{namespace}"
    admission.create_validating_webhook_configuration({
        "metadata": {"name": name},
        "webhooks": [{
            "name": "validate.broken.kubetrain.test", "failurePolicy": "Fail", "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "timeoutSeconds": 2,
            "clientConfig": {"url": "https://127.0.0.1:1/validate"},  # nothing listens there
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "rules": [{"apiGroups": ["kubeflow.org"], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pytorchjobs"]}]}]})
    try:
        spec = write_spec(tmp_path, "hooked", nodes=1, gpus=0)
        result = wait_for(lambda: (r := CliRunner().invoke(cli, [
            "submit", "-f", str(spec), "-n", namespace, "--kubeconfig", str(controlplane.kubeconfig)]))
            and "webhook" in r.stderr and r, "the webhook to be in effect", timeout=30, interval=0.5)
        assert result.exit_code == 1
        line = result.stderr.splitlines()[-1]
        assert line.startswith("error: admission webhook validate.broken.kubetrain.test failed, so the API server "
                               "refused to "), line
        assert "try again later" not in line
        doctor = CliRunner().invoke(cli, ["doctor", "-n", namespace, "--kubeconfig", str(controlplane.kubeconfig)])
        assert doctor.exit_code == 1, doctor.output
        assert any(line.startswith("✗ webhooks") and "validate.broken.kubetrain.test" in line
                   for line in doctor.stdout.splitlines()), doctor.stdout
    finally:
        admission.delete_validating_webhook_configuration(name)


def test_a_recreated_job_shows_only_its_own_events_and_pod_recreations(controlplane: Any, namespace: str,
                                                                        k8s: Any, tmp_path: Path) -> None:
    kt = ["--kubeconfig", str(controlplane.kubeconfig), "-n", namespace]
    spec = str(write_spec(tmp_path, "again", nodes=1))
    assert CliRunner().invoke(cli, ["submit", "-f", spec, *kt]).exit_code == 0
    core = kubernetes.client.CoreV1Api(k8s)
    (pod,) = _running(core, namespace, 1)
    controlplane.set_pod_phase(namespace, pod, "Succeeded")

    def events(state: str) -> list[dict[str, Any]] | None:
        report = json.loads(CliRunner().invoke(cli, ["status", "again", "-o", "json", "--events", "50", *kt]).stdout)
        return report["events"] if report["state"] == state and report["events"] else None

    old = wait_for(lambda: events("Succeeded"), "the first job to succeed", timeout=60, interval=0.5)
    assert any(e["reason"] == "Scheduled" for e in old)

    replaced = CliRunner().invoke(cli, ["submit", "-f", spec, "--replace", *kt])
    assert replaced.exit_code == 0, replaced.stderr
    _running(core, namespace, 1)
    new = wait_for(lambda: (found := events("Running")) and any(e["reason"] == "Scheduled" for e in found) and found,
                   "the new job's events", timeout=60, interval=0.5)
    assert [e["reason"] for e in new].count("Scheduled") == 1  # not the old pod's too
    assert not any("Succeeded" in e["reason"] or "succeeded" in e["message"] for e in new), new

    # The operator replaces a deleted pod: status shows the re-creation, though the restart count is 0.
    core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
    last: list[str] = [""]

    def recreated() -> str | None:
        last[0] = CliRunner().invoke(cli, ["status", "again", "--events", "50", *kt]).output
        return last[0] if re.search(r"\(\+\d+ re-created\)", last[0]) else None

    try:
        text = wait_for(recreated, "the re-creation to show", timeout=90, interval=0.5)
    except AssertionError:
        raise AssertionError(f"no re-creation shown; last status:\n{last[0]}") from None
    # On a loaded machine the operator may see the deleted pod fail and restart it once more: count ≥ 1.
    times = int(re.search(r"\(\+(\d+) re-created\)", text).group(1))  # type: ignore[union-attr]
    assert times >= 1 and f"pod {pod} was re-created {times} time(s) by the operator" in text


@pytest.mark.parametrize("timeout", [2])
def test_wait_timeout_is_exit_4(controlplane: Any, namespace: str, tmp_path: Path, timeout: int) -> None:
    spec = str(write_spec(tmp_path, "slow", nodes=1))
    started = time.monotonic()
    result = CliRunner().invoke(cli, ["submit", "-f", spec, "-n", namespace, "--wait", "--timeout", str(timeout),
                                      "--kubeconfig", str(controlplane.kubeconfig)])
    assert result.exit_code == 4, result.stderr
    assert result.stderr.splitlines()[-1] == f"error: timed out after {timeout}s waiting for PyTorchJob slow to finish"
    assert time.monotonic() - started < 60


def test_a_wrong_namespace_reads_the_same_for_every_command(controlplane: Any) -> None:
    kc = ["--kubeconfig", str(controlplane.kubeconfig), "-n", "no-such-ns"]
    expected = ("error: namespace no-such-ns does not exist: pass the right -n/--namespace (kubectl get namespaces) "
                "or create it: kubectl create namespace no-such-ns\n")
    for verb in (["status", "x"], ["events", "x"], ["logs", "x"], ["delete", "x"], ["gpu", "x"]):
        result = CliRunner().invoke(cli, [*verb, *kc])
        assert (result.exit_code, result.stderr) == (1, expected), verb
