"""Exec over WebSocket on the one client (kubetrain.kube.podexec) against the real kubelet: the exit code from
the exec's Status (kwok's kubelet reports it in the message only), stdout and stderr apart, a command that
outlives its timeout, and `kubetrain gpu` on a CPU pod, in a process that loads no kubernetes package."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from kubetrain.jobs.gpu import exec_command
from kubetrain.kube.connection import connect
from tests.testenv.polling import wait_for

from .conftest import PLACEMENT, Cli

pytestmark = pytest.mark.slow

# `kubetrain gpu` of a bare pod is not possible (it finds a job's pods), so its exec path is driven directly.
SCRIPT = """
import json, os, sys
from kubetrain.jobs.gpu import exec_nvidia_smi, verdict
from kubetrain.kube.connection import connect
ns, pod, kubeconfig = sys.argv[1:]
result = exec_nvidia_smi(connect(kubeconfig=kubeconfig).rest, ns, pod, "main")
print(json.dumps({"verdict": verdict(result)[1], "tmp": sorted(os.listdir(os.environ["TMPDIR"])),
                  "loaded": sorted({m.split(".")[0] for m in sys.modules} & {"kubernetes", "urllib3"})}))
"""


def test_exec_on_the_real_kubelet(cli: Cli, image: str, real_node: Any, namespace: str, tmp_path: Path) -> None:
    core = kubernetes.client.CoreV1Api(real_node.cp.api_client())
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "shell"},
           "spec": {"containers": [{"name": "main", "image": image, "imagePullPolicy": "Never",
                                    "command": ["sleep", "600"],
                                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}],
                    "terminationGracePeriodSeconds": 0, **PLACEMENT}}
    core.create_namespaced_pod(namespace, pod)
    wait_for(lambda: core.read_namespaced_pod("shell", namespace).status.phase == "Running", "pod Running", 120)
    rest = connect(kubeconfig=str(cli.kubeconfig)).rest

    result = exec_command(rest, namespace, "shell", "main", ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.stdout, result.stderr, result.exit_code, result.error) == ("out\n", "err\n", 3, "")
    fine = exec_command(rest, namespace, "shell", "main", ["python3", "-c", "print('x' * 200000)"])
    assert (fine.exit_code, fine.stdout) == (0, "x" * 200000 + "\n")  # many frames
    slow = exec_command(rest, namespace, "shell", "main", ["sleep", "30"], timeout=2)
    assert (slow.exit_code, slow.error) == (None, "sleep did not finish in time")

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = subprocess.run([sys.executable, "-c", SCRIPT, namespace, "shell", str(cli.kubeconfig)],
                          env={**cli.env, "TMPDIR": str(tmp)}, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["verdict"].startswith("nvidia-smi not found in the container"), seen
    assert (seen["tmp"], seen["loaded"]) == ([], [])
