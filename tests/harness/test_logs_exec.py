"""kwok serves pod logs and exec through the real apiserver, so `kubetrain logs`
and `kubetrain gpu` can be tested: exec runs tests/testenv/fakebin/nvidia-smi."""

from __future__ import annotations

import kubernetes
import pytest
from kubernetes.stream import stream

from tests.harness.helpers import pytorchjob, server_side_apply, wait_for

pytestmark = pytest.mark.controlplane
QUERY = [
    "nvidia-smi",
    "--query-gpu=index,name,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw",
    "--format=csv,noheader,nounits",
]


@pytest.fixture
def running_pod(controlplane, namespace):
    client = controlplane.api_client()
    server_side_apply(client, pytorchjob("logs", namespace, workers=0, gpus=8))
    core = kubernetes.client.CoreV1Api(client)
    wait_for(lambda: _phase(core, namespace, "logs-master-0") == "Running", "master Running")
    return "logs-master-0"


def test_default_and_custom_pod_logs(controlplane, namespace, running_pod):
    core = kubernetes.client.CoreV1Api(controlplane.api_client())
    default = core.read_namespaced_pod_log(running_pod, namespace, container="pytorch")
    assert "training complete" in default

    controlplane.set_pod_logs(namespace, running_pod, ["rank0: step 1 loss=2.0", "rank0: step 2 loss=1.5"])
    custom = wait_for(
        lambda: _if("loss=1.5" in (t := core.read_namespaced_pod_log(running_pod, namespace)), t),
        "custom logs",
    )
    assert custom.splitlines() == ["rank0: step 1 loss=2.0", "rank0: step 2 loss=1.5"]
    tail = core.read_namespaced_pod_log(running_pod, namespace, tail_lines=1)
    assert tail.strip() == "rank0: step 2 loss=1.5"


def test_exec_fake_nvidia_smi(controlplane, namespace, running_pod):
    core = kubernetes.client.CoreV1Api(controlplane.api_client())
    out = stream(
        core.connect_get_namespaced_pod_exec,
        running_pod,
        namespace,
        command=QUERY,
        container="pytorch",
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    rows = [line.split(", ") for line in out.strip().splitlines()]
    assert len(rows) == 8
    assert rows[0] == ["0", "NVIDIA H100 80GB HBM3", "87", "30000", "81559", "52", "512.37"]
    listing = stream(
        core.connect_get_namespaced_pod_exec,
        running_pod,
        namespace,
        command=["nvidia-smi", "-L"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    assert listing.splitlines()[0].startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")


def _phase(core, namespace, name):
    try:
        return core.read_namespaced_pod(name, namespace).status.phase
    except kubernetes.client.ApiException:
        return None


def _if(ok, value):
    return value if ok else None
