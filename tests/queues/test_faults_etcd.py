"""Fault drills beyond the API server restart of tests/client/test_faults.py: etcd crashes under `logs -f` and
`submit --wait` (every pod line arrives exactly once), a kill -9 of `submit` that a re-run repairs, and a
stopped training-operator named by `status`. docs/reliability.md lists each fault and its test."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from tests.client.logfixtures import cri, now_stamp, serve_logs
from tests.client.specs import write_spec
from tests.client.test_faults import Proc, _running
from tests.harness.helpers import wait_for

pytestmark = pytest.mark.controlplane
LINES = 40  # per pod, before and after the crash


def test_etcd_restart_under_logs_follow_and_submit_wait(controlplane: Any, namespace: str, k8s: Any,
                                                         tmp_path: Path) -> None:
    files, written = {}, []
    for pod, replica in (("etcd-master-0", "master-0"), ("etcd-worker-0", "worker-0")):
        files[pod] = (tmp_path / f"{pod}.log", replica)
        lines = [f"{pod} before {i}" for i in range(LINES)]
        files[pod][0].write_text(cri([(now_stamp(), line) for line in lines]))
        written += [f"[{replica}] {line}" for line in lines]
        serve_logs(k8s, namespace, pod, files[pod][0])
    kc = controlplane.kubeconfig
    spec = write_spec(tmp_path, "etcd", nodes=2)
    submit = Proc(tmp_path, "submit", kc, "submit", "-f", str(spec), "-n", namespace, "--wait", "--timeout", "240")
    _running(kubernetes.client.CoreV1Api(k8s), namespace, 2)
    logs = Proc(tmp_path, "logs", kc, "logs", "etcd", "-f", "-n", namespace)
    wait_for(lambda: logs.stdout.count("\n") >= 2 * LINES, f"the first lines (stderr: {logs.stderr})",
             timeout=60, interval=0.2)

    controlplane.restart("etcd", down=3)
    for pod, (path, replica) in files.items():
        lines = [f"{pod} after {i}" for i in range(LINES)]
        with path.open("a") as handle:
            handle.write(cri([(now_stamp(), line) for line in lines]))
        written += [f"[{replica}] {line}" for line in lines]
    wait_for(lambda: logs.stdout.count("\n") >= 4 * LINES, f"the lines written after the crash (stderr: "
             f"{logs.stderr})", timeout=120, interval=0.2)
    for pod in files:
        controlplane.set_pod_phase(namespace, pod, "Succeeded")
    assert logs.wait() == 0, logs.stderr
    got = logs.stdout.splitlines()
    assert sorted(got) == sorted(written)  # nothing lost, nothing twice
    for replica in ("master-0", "worker-0"):  # and each pod's lines in the order it wrote them
        mine = [line for line in got if line.startswith(f"[{replica}]")]
        assert mine == [line for line in written if line.startswith(f"[{replica}]")]
    assert "Traceback" not in logs.stderr
    assert submit.wait() == 0, submit.stderr
    assert submit.stderr.rstrip().endswith(f"PyTorchJob {namespace}/etcd Succeeded")


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


def test_a_stopped_training_operator_is_named_by_status(controlplane: Any, namespace: str, k8s: Any,
                                                        tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kubetrain.cli.main import cli
    from kubetrain.client.status import UNRECONCILED_AFTER

    # Stopped, with its validating webhook gone too (else the create itself fails, naming the webhook:
    # tests/client/test_faults.py): the operator is installed but not reconciling (scaled to 0, or stuck
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
