"""A fake GPU host for `kubetrain cluster` tests: answers for nvidia-smi, docker, nvidia-ctk, kind, kubectl and
helm recording fakes (tests/imagebuild/recording.py). A uniquely named module, imported by the tests."""

from __future__ import annotations

import json
from typing import Any

GPU_TOOLS = ("nvidia-smi", "docker", "nvidia-ctk", "kind", "kubectl", "helm")
NVIDIA_SMI = "GPU 0: NVIDIA L4 (UUID: GPU-0aa)\nGPU 1: NVIDIA L4 (UUID: GPU-1bb)\n"
DOCKER_INFO = json.dumps({"DefaultRuntime": "nvidia", "Runtimes": {"nvidia": {}, "runc": {}}})
CTK_CONFIG = ('accept-nvidia-visible-devices-as-volume-mounts = true\n\n'
              '[nvidia-container-cli]\nldconfig = "@/sbin/ldconfig"\n')


def nodes_json(name: str, worker_gpus: list[int], ready: bool = True) -> str:
    def node(node_name: str, labels: dict[str, str], gpus: int) -> dict[str, Any]:
        return {"metadata": {"name": node_name, "labels": labels},
                "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": str(gpus)},
                           "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}

    items = [node(f"{name}-control-plane", {"node-role.kubernetes.io/control-plane": ""}, 0)]
    items += [node(f"{name}-worker{i + 1 if i else ''}", {"nvidia.com/gpu.present": "true"}, gpus)
              for i, gpus in enumerate(worker_gpus)]
    return json.dumps({"items": items})


def mounts(*devices: str) -> str:
    return json.dumps([{"Type": "bind", "Source": "/dev/null",
                        "Destination": f"/var/run/nvidia-container-devices/{d}"} for d in devices])


def healthy_gpu_host(fake: Any, name: str = "kubetrain", existing: bool = False,
                     worker_mounts: tuple[str, ...] = ("all",), allocatable: tuple[int, ...] = (2,)) -> None:
    """A host with 2 GPUs and every prerequisite; the cluster is absent unless `existing`."""
    fake.install(*GPU_TOOLS)
    fake.on("nvidia-smi", "-L", stdout=NVIDIA_SMI)
    fake.on("docker", "info", stdout=DOCKER_INFO)
    fake.on("nvidia-ctk", "config", stdout=CTK_CONFIG)
    fake.on("kind", "get", "clusters", stdout=f"{name}\n" if existing else "")
    workers = [f"{name}-worker{i + 1 if i else ''}" for i in range(len(worker_mounts))]
    fake.on("kind", "get", "nodes", stdout="\n".join([f"{name}-control-plane", *workers]) + "\n")
    fake.on("docker", "inspect", stdout="\n".join(["[]", *(mounts(m) for m in worker_mounts)]) + "\n")
    fake.on("kubectl", "--context", f"kind-{name}", "get", "nodes",
            stdout=nodes_json(name, list(allocatable)))


def nothing_installed_yet(fake: Any, name: str = "kubetrain",
                          workers: tuple[str, ...] = ("kubetrain-worker",)) -> None:
    """Every in-cluster check fails, so every step acts (checks run `sh -c` / `grep`; acts run `bash -c`)."""
    for worker in workers:
        fake.on("docker", "exec", worker, "sh", exit=1)
        fake.on("docker", "exec", worker, "grep", exit=1)
    fake.on("kubectl", "--context", f"kind-{name}", "get", "runtimeclass", exit=1)
    fake.on("helm", "--kube-context", f"kind-{name}", "list", stdout="[]")
    fake.on("kubectl", "--context", f"kind-{name}", "--namespace", "kubeflow", "get", exit=1)
