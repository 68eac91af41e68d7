"""kwok: simulated GPU nodes and pod lifecycles for the test control plane.

kwok runs as one process that (a) plays the Stages in kwok/stages.yaml on the
fake nodes and their pods and (b) serves a kubelet-like HTTPS API on
127.0.0.1:<port>, which the apiserver reaches for `kubectl logs` / `exec`
(each node's status.daemonEndpoints.kubeletEndpoint.Port points there).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import yaml

from . import yamlfiles

HERE = Path(__file__).resolve().parent
STAGES = HERE / "kwok" / "stages.yaml"
LOGS_CRD = HERE / "kwok" / "kwok.x-k8s.io_logs.yaml"
FAKEBIN = HERE / "fakebin"
NODE_SELECTOR_ANNOTATION = "kwok.x-k8s.io/node"
PHASE_ANNOTATION = "kubetrain.test/phase"
PHASES = ("Pending", "Running", "Succeeded", "Failed")
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT = "nvidia-h100-80gb"
GPUS_PER_NODE = 8

DEFAULT_LOG_LINES = (
    "INFO kubetrain fake container started",
    "epoch 1/3 step 100 loss=1.2345",
    "epoch 2/3 step 200 loss=0.8765",
    "epoch 3/3 step 300 loss=0.4321",
    "training complete",
)


def cri_log(lines: tuple[str, ...] | list[str], stream: str = "stdout") -> str:
    """Lines in the CRI container-log format kwok's log server parses."""
    now = dt.datetime.now(dt.UTC)
    out = []
    for i, line in enumerate(lines):
        ts = (now + dt.timedelta(milliseconds=i)).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
        out.append(f"{ts} {stream} F {line}\n")
    return "".join(out)


def write_config(workdir: Path) -> Path:
    """kwok --config: the Stages plus a ClusterLogs/ClusterExec default for every pod."""
    logs = workdir / "default-container.log"
    logs.write_text(cri_log(DEFAULT_LOG_LINES))
    exec_dir = workdir / "exec"
    exec_dir.mkdir(exist_ok=True)
    docs: list[dict[str, Any]] = yamlfiles.load_all(STAGES)
    docs.append(
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterLogs",
            "metadata": {"name": "kubetrain-default-logs"},
            "spec": {"logs": [{"logsFile": str(logs), "previousLogsFile": str(logs)}]},
        }
    )
    docs.append(
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterExec",
            "metadata": {"name": "kubetrain-fake-exec"},
            # `kubectl exec` runs the command on this machine, in exec_dir, with
            # kwok's PATH, which starts with fakebin/ (the fake nvidia-smi).
            "spec": {
                "execs": [
                    {
                        "local": {
                            "workDir": str(exec_dir),
                            "envs": [{"name": "KUBETRAIN_FAKE_GPUS", "value": str(GPUS_PER_NODE)}],
                        }
                    }
                ]
            },
        }
    )
    path = workdir / "kwok.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def process_env() -> dict[str, str]:
    return {"PATH": f"{FAKEBIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}


def _node(
    name: str, labels: dict[str, str], allocatable: dict[str, str], taints: list[dict[str, str]]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {NODE_SELECTOR_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **labels,
            },
        },
        "spec": {"taints": taints},
        # A real kubelet registers its node with status; kwok keeps the
        # capacity/allocatable we set here and fills in conditions/addresses.
        "status": {"capacity": allocatable, "allocatable": allocatable},
    }


def gpu_taint() -> dict[str, str]:
    return {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}


def nodes() -> list[dict[str, Any]]:
    """3 GKE-like H100 nodes (8 GPUs each, the last one tainted) and one CPU node."""
    gpu_labels = {
        "cloud.google.com/gke-accelerator": GPU_PRODUCT,
        "cloud.google.com/gke-nodepool": "h100-pool",
        "node.kubernetes.io/instance-type": "a3-highgpu-8g",
        "topology.kubernetes.io/zone": "us-central1-a",
    }
    gpu_alloc = {
        "cpu": "208",
        "memory": "1870Gi",
        "pods": "110",
        "ephemeral-storage": "100Gi",
        GPU_RESOURCE: str(GPUS_PER_NODE),
    }
    out = [_node(f"gpu-node-{i}", gpu_labels, gpu_alloc, [gpu_taint()] if i == 2 else []) for i in range(3)]
    cpu_labels = {
        "cloud.google.com/gke-nodepool": "cpu-pool",
        "node.kubernetes.io/instance-type": "n2-standard-32",
        "topology.kubernetes.io/zone": "us-central1-a",
    }
    cpu_alloc = {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    out.append(_node("cpu-node-0", cpu_labels, cpu_alloc, []))
    return out


# The scale profile (benchmarks/bench_scale.py, tests/queues/test_scale.py): four GKE GPU types, as the
# cloud profiles label and taint them (GKE taints GPU node pools nvidia.com/gpu=present:NoSchedule).
SCALE_GPU_TYPES = (
    ("nvidia-h100-80gb", "a3-highgpu-8g"),
    ("nvidia-h200-141gb", "a3-ultragpu-8g"),
    ("nvidia-a100-80gb", "a2-ultragpu-8g"),
    ("nvidia-l4", "g2-standard-96"),
)


def scale_nodes(count: int = 200, gpus: int = GPUS_PER_NODE, prefix: str = "scale") -> list[dict[str, Any]]:
    """`count` tainted GPU nodes, spread round-robin over the four SCALE_GPU_TYPES (one node pool each)."""
    out = []
    for i in range(count):
        product, machine = SCALE_GPU_TYPES[i % len(SCALE_GPU_TYPES)]
        labels = {
            "cloud.google.com/gke-accelerator": product,
            "cloud.google.com/gke-nodepool": f"{product}-pool",
            "node.kubernetes.io/instance-type": machine,
            "topology.kubernetes.io/zone": "us-central1-a",
        }
        alloc = {"cpu": "208", "memory": "1870Gi", "pods": "110", "ephemeral-storage": "100Gi",
                 GPU_RESOURCE: str(gpus)}
        out.append(_node(f"{prefix}-{product.removeprefix('nvidia-')}-{i}", labels, alloc, [gpu_taint()]))
    return out


def logs_object(namespace: str, pod: str, logs_file: Path, container: str | None) -> dict[str, Any]:
    """A kwok Logs CR (name = pod name) serving `logs_file` for that pod."""
    entry: dict[str, Any] = {"logsFile": str(logs_file), "previousLogsFile": str(logs_file)}
    if container:
        entry["containers"] = [container]
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Logs",
        "metadata": {"name": pod, "namespace": namespace},
        "spec": {"logs": [entry]},
    }
