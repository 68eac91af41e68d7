"""kubetrain gpu: exec nvidia-smi in every running pod through the real API server (kwok runs the fake
nvidia-smi of tests/testenv/fakebin); the verdicts for failures the harness cannot produce use fakes."""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest

from kubetrain.jobs.gpu import ExecResult, Gpu, _result, job_gpus, notes, parse_query, table_rows, verdict
from kubetrain.jobs.pods import replica_of
from kubetrain.jobs.targets import PYTORCHJOB
from kubetrain.kube.connection import connect
from tests.harness.helpers import pytorchjob, server_side_apply, wait_for

GPU0 = Gpu(0, "NVIDIA H100 80GB HBM3", 87.0, 30000.0, 81559.0, 52.0, 512.37)


@pytest.mark.controlplane
def test_gpu_table_for_every_running_pod(controlplane, namespace, k8s):
    job = pytorchjob("smi", namespace, workers=1, gpus=8)
    cpu_only = pytorchjob("x", namespace, workers=0, gpus=0)["spec"]["pytorchReplicaSpecs"]["Master"]
    job["spec"]["pytorchReplicaSpecs"]["Master"] = cpu_only  # a master without GPUs (e.g. a coordinator)
    server_side_apply(k8s, job)
    core = kubernetes.client.CoreV1Api(k8s)
    wait_for(lambda: len([p for p in core.list_namespaced_pod(namespace).items if p.status.phase == "Running"]) == 2,
             "2 pods Running", interval=0.1)
    rest = connect(None, str(controlplane.kubeconfig)).rest
    results = job_gpus(rest, PYTORCHJOB, namespace, "smi")
    assert [(r.replica, r.pod) for r in results] == [("master-0", "smi-master-0"), ("worker-0", "smi-worker-0")]
    master, worker = results
    # A pod that requests no GPU is asked too: kwok's node answers with its fake GPUs, which a real node
    # would show only to an image with NVIDIA_VISIBLE_DEVICES=all (tests/e2e shows a real CPU pod's answer).
    assert master.message == "requests no nvidia.com/gpu, yet sees 8 GPU(s)" and len(master.gpus) == 8
    assert worker.message == "" and len(worker.gpus) == 8
    assert worker.gpus[0] == GPU0
    assert worker.gpus[7] == Gpu(7, "NVIDIA H100 80GB HBM3", 7.0, 67919.0, 81559.0, 66.0, 592.87)
    assert worker.node and worker.node.startswith("gpu-node-")
    rows = table_rows(results)
    assert [row[:2] for row in rows[:8]] == [["master-0", str(i)] for i in range(8)]
    assert rows[8] == ["worker-0", "0", "NVIDIA H100 80GB HBM3", "87%", "29.3/79.6 GiB", "52°C", "512 W"]

    controlplane.set_pod_phase(namespace, "smi-worker-0", "Succeeded")
    wait_for(lambda: core.read_namespaced_pod("smi-worker-0", namespace).status.phase == "Succeeded", "Succeeded")
    after = job_gpus(rest, PYTORCHJOB, namespace, "smi", replica="worker")
    assert [(r.replica, r.message) for r in after] == [("worker-0", "not running (Completed)")]
    # The table keeps its shape (a dash per GPU column); the message goes to the notes, under the table.
    assert table_rows(after) == [["worker-0", "-", "-", "-", "-", "-", "-"]]
    assert notes(after) == ["worker-0: not running (Completed)"]


def test_parse_query_handles_unsupported_fields():
    text = ("0, NVIDIA H100 80GB HBM3, 87, 30000, 81559, 52, 512.37, Disabled\n"
            "1, Tesla T4, [N/A], 10, 15360, 40, [Not Supported], [N/A]\n")
    assert parse_query(text) == [GPU0, Gpu(1, "Tesla T4", None, 10.0, 15360.0, 40.0, None)]
    with pytest.raises(ValueError, match="unexpected nvidia-smi output"):
        parse_query("index, name\n")


@pytest.mark.parametrize(("result", "expected"), [
    # containerd/runc: the exec fails before the command runs
    (ExecResult("", "", None, 'Internal error occurred: error executing command in container: failed to exec in '
                'container: OCI runtime exec failed: exec failed: unable to start container process: exec: '
                '"nvidia-smi": executable file not found in $PATH: unknown'), "nvidia-smi not found in the container"),
    (ExecResult("", "sh: nvidia-smi: not found", 127), "nvidia-smi not found in the container"),
    (ExecResult("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
                "latest NVIDIA driver is installed and running.\n", "", 9),
     "no GPU visible in the pod: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
    (ExecResult("No devices were found\n", "", 6), "no GPU visible in the pod: No devices were found"),
    (ExecResult("", "", None, "nvidia-smi did not finish in time"), "nvidia-smi failed (exit None): nvidia-smi did"),
    (ExecResult("", "", 0), "nvidia-smi lists no GPU in this pod"),
])
def test_failures_get_a_clear_message(result, expected):
    gpus, message = verdict(result)
    assert gpus == [] and message.startswith(expected)


def test_exec_status_channel_gives_the_exit_code():
    failure = ('{"metadata":{},"status":"Failure",'
               '"message":"command terminated with non-zero exit code: exit status 9","reason":"NonZeroExitCode",'
               '"details":{"causes":[{"reason":"ExitCode","message":"9"}]}}')
    assert _result("out", "err", failure, False) == ExecResult("out", "err", 9, "")
    assert _result("rows", "", '{"metadata":{},"status":"Success"}', False) == ExecResult("rows", "", 0)
    assert _result("", "", "", True).error == "nvidia-smi did not finish in time"


def test_one_broken_pod_does_not_hide_the_others():
    from kubetrain.jobs.gpu import pod_gpus

    def pod(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "uid": name, "labels": {"training.kubeflow.org/replica-type": "worker",
                                                                   "training.kubeflow.org/replica-index": name[-1]}},
                "spec": {"nodeName": "n", "containers": [{"name": "pytorch",
                                                          "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                "status": {"phase": "Running", "containerStatuses": [{"name": "pytorch", "restartCount": 0,
                                                                      "state": {"running": {}}}]}}

    def fake_exec(core: Any, namespace: str, name: str, container: str) -> ExecResult:
        if name == "w-1":
            raise ConnectionResetError("connection reset by peer")
        return ExecResult("0, NVIDIA H100 80GB HBM3, 87, 30000, 81559, 52, 512.37, Disabled\n", "", 0)

    results = [pod_gpus(None, "ns", replica_of(pod(n), PYTORCHJOB), fake_exec) for n in ("w-0", "w-1")]
    assert results[0].gpus == [GPU0]
    assert results[1].gpus == [] and "ConnectionResetError: connection reset by peer" in results[1].message
