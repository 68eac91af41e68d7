"""Fault drills against the real control plane: an API server crash under every long-running command,
a failing admission webhook, a re-created job's events. The commands run as real processes, so an abort
at exit (the issue's exit 134) or a wrong exit code would show."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from click.testing import CliRunner

from kubetrain.cli.main import cli
from tests.client.logfixtures import cri, now_stamp, serve_logs
from tests.client.specs import write_spec
from tests.harness.helpers import wait_for

pytestmark = pytest.mark.controlplane


class Proc:
    """`kubetrain ARGS` as a child process, its output in files the test can poll."""

    def __init__(self, tmp_path: Path, name: str, kubeconfig: Path, *args: str) -> None:
        self.out, self.err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"}
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.popen = subprocess.Popen([sys.executable, "-m", "kubetrain", *args], stdout=out, stderr=err,
                                          env=env, start_new_session=True)

    @property
    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            raise AssertionError(f"still running after {timeout}s; stderr:\n{self.stderr}") from None


def _running(core: Any, namespace: str, count: int) -> list[str]:
    def names() -> list[str] | None:
        found = [p.metadata.name for p in core.list_namespaced_pod(namespace).items if p.status.phase == "Running"]
        return sorted(found) if len(found) >= count else None

    return wait_for(names, f"{count} Running pods", timeout=90, interval=0.2)


def test_apiserver_restart_under_logs_follow_submit_wait_and_gpu_watch(controlplane: Any, namespace: str,
                                                                        k8s: Any, tmp_path: Path) -> None:
    files = {}
    for pod in ("drill-master-0", "drill-worker-0"):
        files[pod] = tmp_path / f"{pod}.log"
        files[pod].write_text(cri([(now_stamp(), f"{pod} before")]))
        serve_logs(k8s, namespace, pod, files[pod])
    spec = write_spec(tmp_path, "drill", nodes=2)
    kc = controlplane.kubeconfig
    submit = Proc(tmp_path, "submit", kc, "submit", "-f", str(spec), "-n", namespace, "--wait", "--timeout", "240")
    core = kubernetes.client.CoreV1Api(k8s)
    _running(core, namespace, 2)
    logs = Proc(tmp_path, "logs", kc, "logs", "drill", "-f", "-n", namespace)
    gpu = Proc(tmp_path, "gpu", kc, "gpu", "drill", "--watch", "--interval", "1", "--count", "4", "-n", namespace)
    wait_for(lambda: "drill-worker-0 before" in logs.stdout and "drill-master-0 before" in logs.stdout,
             f"the first lines (stderr: {logs.stderr})", timeout=60, interval=0.2)
    wait_for(lambda: "POD" in gpu.stdout, f"a first GPU table (stderr: {gpu.stderr})", timeout=60, interval=0.2)

    controlplane.restart("kube-apiserver", down=3)
    for pod, path in files.items():
        with path.open("a") as handle:
            handle.write(cri([(now_stamp(), f"{pod} after")]))
    wait_for(lambda: "drill-master-0 after" in logs.stdout and "drill-worker-0 after" in logs.stdout,
             f"the lines written after the restart (stderr: {logs.stderr})", timeout=120, interval=0.2)
    assert gpu.wait(120) == 0, gpu.stderr
    for pod in files:
        controlplane.set_pod_phase(namespace, pod, "Succeeded")

    assert logs.wait() == 0, logs.stderr
    assert sorted(logs.stdout.splitlines()) == ["[master-0] drill-master-0 after", "[master-0] drill-master-0 before",
                                                "[worker-0] drill-worker-0 after", "[worker-0] drill-worker-0 before"]
    assert "cannot reach" in logs.stderr and "reconnected to the API server" in logs.stderr
    assert "Fatal Python error" not in logs.stderr and "Traceback" not in logs.stderr
    assert submit.wait() == 0, submit.stderr
    assert submit.stderr.rstrip().endswith(f"PyTorchJob {namespace}/drill Succeeded")
    assert "reconnected to the API server" in submit.stderr
    assert gpu.stdout.count("POD ") == 4  # four tables, on both sides of the restart
    assert "retrying" in gpu.stderr and "reconnected" in gpu.stderr


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
