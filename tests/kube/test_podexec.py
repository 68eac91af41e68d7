"""Exec into pods over WebSocket on the one client (kubetrain.kube.podexec), through the real API server and
kwok's kubelet (which runs the command on this host): output, exit code, refusals, and no key on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from kubetrain.jobs.gpu import exec_command
from kubetrain.kube.connection import connect
from kubetrain.kube.errors import Forbidden
from kubetrain.kube.podexec import exec_in_pod
from tests.harness.helpers import pytorchjob, server_side_apply, wait_for

pytestmark = pytest.mark.controlplane

# In one process: the job's GPUs and the ranks' stacks over exec, then what the process left in its TMPDIR
# (the kubernetes package's exec wrote the client key there, for the whole life of the process) and which
# HTTP libraries it loaded.
SCRIPT = """
import json, os, sys
import kubetrain.api as kt
ns, kubeconfig = sys.argv[1:]
gpus = kt.gpu("podexec", namespace=ns, kubeconfig=kubeconfig)
stacks = kt.stacks("podexec", namespace=ns, kubeconfig=kubeconfig)
print(json.dumps({"gpus": [(p.replica, len(p.gpus), p.message) for p in gpus],
                  "stack_messages": stacks.messages(),
                  "tmp": sorted(os.listdir(os.environ["TMPDIR"])),
                  "loaded": sorted({m.split(".")[0] for m in sys.modules} & {"kubernetes", "urllib3"})}))
"""


def running_job(k8s: Any, namespace: str) -> None:
    server_side_apply(k8s, pytorchjob("podexec", namespace, workers=1, gpus=8))
    core = kubernetes.client.CoreV1Api(k8s)
    wait_for(lambda: len([p for p in core.list_namespaced_pod(namespace).items if p.status.phase == "Running"]) == 2,
             "2 pods Running", interval=0.1)


def test_gpu_and_stacks_exec_without_the_kubernetes_package_and_without_a_key_file(
        controlplane: Any, namespace: str, k8s: Any, tmp_path: Path) -> None:
    running_job(k8s, namespace)
    assert "client-key-data" in controlplane.kubeconfig.read_text()  # inline key: the case that needed files
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = subprocess.run([sys.executable, "-c", SCRIPT, namespace, str(controlplane.kubeconfig)],
                          env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["gpus"] == [["master-0", 8, ""], ["worker-0", 8, ""]]
    assert seen["stack_messages"] == []
    assert seen["tmp"] == []
    assert seen["loaded"] == []


def test_stdout_stderr_and_exit_code_come_apart(controlplane: Any, namespace: str, k8s: Any) -> None:
    running_job(k8s, namespace)
    rest = connect(kubeconfig=str(controlplane.kubeconfig)).rest
    result = exec_command(rest, namespace, "podexec-worker-0", "pytorch",
                          ["sh", "-c", "echo out; echo err >&2; exit 3"])
    # kwok's kubelet reports the exit status in the Status message only; a real kubelet's Status carries it as
    # details.causes[ExitCode] (tests/e2e/test_stacks.py checks that one).
    assert (result.stdout, result.stderr) == ("out\n", "err\n")
    assert result.exit_code is None and result.error.endswith("exit status 3")
    quick = exec_command(rest, namespace, "podexec-worker-0", "pytorch", ["sh", "-c", "sleep 5"], timeout=1)
    assert (quick.exit_code, quick.error) == (None, "sh did not finish in time")


def test_a_user_without_pods_exec_gets_forbidden(controlplane: Any, namespace: str, k8s: Any) -> None:
    running_job(k8s, namespace)
    rest = connect(kubeconfig=str(controlplane.write_kubeconfig("no-exec"))).rest
    with pytest.raises(Forbidden) as caught:
        exec_in_pod(rest, namespace, "podexec-worker-0", "pytorch", ["true"], timeout=5)
    assert "no-exec" in caught.value.status_object.get("message", "")
