"""A container that requests no nvidia.com/gpu must see no GPU: CUDA images set NVIDIA_VISIBLE_DEVICES=all, so
on a node whose default runtime is nvidia's such a container would otherwise get every GPU of the node."""

from __future__ import annotations

from typing import Any

import pytest

from kubetrain.render import render_job
from tests.render.test_rules import job

GPU = "nvidia.com/gpu"


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Every container and init container that carries its own env, for both targets."""
    if obj["kind"] == "TrainJob":
        return [{"name": "node", "env": obj["spec"]["trainer"]["env"],
                 "resources": obj["spec"]["trainer"].get("resourcesPerNode", {})}]
    found = []
    for replica in obj["spec"]["pytorchReplicaSpecs"].values():
        spec = replica["template"]["spec"]
        found += spec["containers"] + spec.get("initContainers", [])
    return found


def _visible(container: dict[str, Any]) -> str | None:
    return next((e.get("value") for e in container.get("env", []) if e["name"] == "NVIDIA_VISIBLE_DEVICES"), None)


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
@pytest.mark.parametrize("nodes", [1, 3])
def test_every_replica_of_a_cpu_job_sees_no_gpu(target: str, nodes: int) -> None:
    obj = render_job(job(target=target, nodes=nodes, gpusPerNode=0))[-1]
    containers = _containers(obj)
    assert containers and all(_visible(c) == "void" for c in containers)
    assert all(GPU not in c["resources"].get("limits", {}) for c in containers)


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_gpu_containers_are_left_to_the_device_plugin(target: str) -> None:
    obj = render_job(job(target=target, nodes=2, gpusPerNode=4))[-1]
    assert [_visible(c) for c in _containers(obj)] == [None] * len(_containers(obj))


def test_the_users_own_value_wins() -> None:
    obj = render_job(job(gpusPerNode=0, env={"NVIDIA_VISIBLE_DEVICES": "none"}))[-1]
    assert [_visible(c) for c in _containers(obj)] == ["none"]


def test_the_gpudirect_daemon_keeps_its_gpus() -> None:
    """The TCPX daemon requests no nvidia.com/gpu on purpose: GKE's NRI injector hands it the GPU device nodes
    (devices.gke.io/container.tcpx-daemon), and GKE nodes do not use the NVIDIA container runtime."""
    obj = render_job(job(gpusPerNode=8, nodes=2, placement={"cloud": "gke", "gpuType": "nvidia-h100-80gb"},
                         network={"fabric": "gpudirect-tcpx", "networks": ["a", "b", "c", "d"],
                                  "daemonImage": "example.com/tcpx:1"}))[-1]
    [daemon] = [c for c in _containers(obj) if c["name"] == "tcpx-daemon"][:1]
    assert _visible(daemon) is None and GPU not in daemon.get("resources", {}).get("limits", {})
