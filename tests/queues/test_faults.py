"""Fault drills besides the restarts of tests/queues/test_restarts.py: a kill -9 of `submit` that a re-run
repairs, and a stopped training-operator named by `status`. docs/reliability.md lists each fault and its test."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from tests.harness.helpers import wait_for
from tests.queues.drills import Proc, running_pods
from tests.testenv.specs import write_spec

pytestmark = pytest.mark.controlplane


def test_kill_9_during_submit_then_rerun_repairs(controlplane: Any, namespace: str, k8s: Any,
                                                 tmp_path: Path) -> None:
    # A code bundle makes submit write two objects (ConfigMap, then the job): killed between or after them,
    # a re-run must end with exactly one job and one ConfigMap of that code, and exit 0.
    spec = write_spec(tmp_path, "killed", nodes=1, code=True)
    kc = controlplane.kubeconfig
    custom, core = kubernetes.client.CustomObjectsApi(k8s), kubernetes.client.CoreV1Api(k8s)
    first = Proc(tmp_path, "first", kc, "submit", "-f", str(spec), "-n", namespace)
    wait_for(lambda: core.list_namespaced_config_map(namespace, label_selector="app.kubernetes.io/name=killed").items
             or first.popen.poll() is not None, "the ConfigMap written (or submit done)", timeout=60, interval=0.01)
    os.killpg(first.popen.pid, signal.SIGKILL)
    first.popen.wait(10)
    again = Proc(tmp_path, "again", kc, "submit", "-f", str(spec), "-n", namespace)
    assert again.wait() == 0, again.stderr
    assert again.stdout == "killed\n"
    jobs = custom.list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")["items"]
    assert [j["metadata"]["name"] for j in jobs] == ["killed"]
    maps = core.list_namespaced_config_map(namespace, label_selector="app.kubernetes.io/name=killed").items
    assert len(maps) == 1
    third = Proc(tmp_path, "third", kc, "submit", "-f", str(spec), "-n", namespace)
    assert third.wait() == 0, third.stderr  # and again: a no-op
    assert custom.list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")["items"][0][
        "metadata"]["uid"] == jobs[0]["metadata"]["uid"]
    # The outcome: the repaired job's pod runs (owned by that one job, not a leftover of the killed submit).
    (pod,) = running_pods(core, namespace, 1)
    owners = core.read_namespaced_pod(pod, namespace).metadata.owner_references
    assert [o.uid for o in owners] == [jobs[0]["metadata"]["uid"]]


def test_a_stopped_training_operator_is_named_by_status(controlplane: Any, namespace: str, k8s: Any,
                                                        tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kubetrain.cli.main import cli
    from kubetrain.jobs.status import UNRECONCILED_AFTER

    # Stopped, with its validating webhook gone too (else the create itself fails, naming the webhook:
    # tests/cli/test_faults.py): the operator is installed but not reconciling (scaled to 0, or stuck
    # without its leader Lease), and jobs get created but never a status.
    from tests.testenv import operator

    admission = kubernetes.client.AdmissionregistrationV1Api(k8s)
    hook = k8s.sanitize_for_serialization(
        admission.read_validating_webhook_configuration(operator.WEBHOOK_CONFIG_NAME))
    admission.delete_validating_webhook_configuration(operator.WEBHOOK_CONFIG_NAME)
    controlplane.sup.stop_child(controlplane._procs["training-operator"], timeout=5)
    try:
        spec = write_spec(tmp_path, "orphan", nodes=1)
        runner = CliRunner()
        argv = ["-n", namespace, "--kubeconfig", str(controlplane.kubeconfig)]
        assert runner.invoke(cli, ["submit", "-f", str(spec), "--skip-preflight", *argv]).exit_code == 0
        fresh = runner.invoke(cli, ["status", "orphan", *argv]).stdout
        assert "no status from the Kubeflow training-operator" not in fresh  # not before it could have acted
        wait_for(lambda: "→ no status from the Kubeflow training-operator after" in
                 runner.invoke(cli, ["status", "orphan", *argv]).stdout, "the operator hint",
                 timeout=UNRECONCILED_AFTER + 30, interval=1)
        out = runner.invoke(cli, ["status", "orphan", *argv]).stdout
        assert "kubectl -n kubeflow get deployment training-operator" in out
    finally:
        hook["metadata"] = {"name": operator.WEBHOOK_CONFIG_NAME}
        admission.create_validating_webhook_configuration(hook)
        controlplane._restart_operator()
    # Back: the operator reconciles the job, and the hint goes away.
    wait_for(lambda: "no status from" not in CliRunner().invoke(cli, ["status", "orphan", *argv]).stdout,
             "the operator reconciling again", timeout=60, interval=1)
