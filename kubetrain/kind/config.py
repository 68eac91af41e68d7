"""The kind cluster config (a pure function of the options), and the --gpus / --name values behind it."""

from __future__ import annotations

import re
from typing import Any

import yaml

from kubetrain.errors import UsageError

DEVICES_DIR = "/var/run/nvidia-container-devices"
GPU_LABEL = "nvidia.com/gpu.present"
_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$")
MAX_NAME = 50  # node names are <name>-control-plane / <name>-worker12: stay well inside 63


def check_name(name: str) -> str:
    if len(name) > MAX_NAME or not _NAME.match(name):
        raise UsageError(f"--name {name!r}: use lower-case letters, digits, '-' and '.' "
                         f"(at most {MAX_NAME} characters, starting and ending alphanumeric)")
    return name


def parse_gpus(value: str) -> list[int] | None:
    """'all' → None (one worker with every GPU); '0,1' → [0, 1] (one worker per listed GPU)."""
    if value.strip() == "all":
        return None
    try:
        indexes = [int(part) for part in value.split(",")]
    except ValueError:
        raise UsageError(f"--gpus {value!r}: use 'all' or GPU indexes such as 0,1") from None
    if any(i < 0 for i in indexes) or len(set(indexes)) != len(indexes):
        raise UsageError(f"--gpus {value!r}: indexes must be distinct and >= 0")
    return indexes


def render_config(name: str, gpus: list[int] | None, *, cpu_only: bool = False,
                  node_image: str | None = None) -> str:
    """kind Cluster config: a control plane and GPU workers that request GPUs the NVIDIA way, through a
    /dev/null mount at /var/run/nvidia-container-devices/<all|index> (read by the host's nvidia runtime
    when accept-nvidia-visible-devices-as-volume-mounts is true), labelled nvidia.com/gpu.present=true."""
    nodes: list[dict[str, Any]] = [_node("control-plane", node_image)]
    # --cpu-only: the control plane alone (kind lets it run pods): every image `build --kind` loads goes to
    # one node, not two, and a laptop runs one node container instead of two.
    if not cpu_only:
        for devices in [["all"]] if gpus is None else [[str(i)] for i in gpus]:
            worker = _node("worker", node_image)
            worker["labels"] = {GPU_LABEL: "true"}
            worker["extraMounts"] = [{"hostPath": "/dev/null", "containerPath": f"{DEVICES_DIR}/{device}"}
                                     for device in devices]
            nodes.append(worker)
    config = {"kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4", "name": name, "nodes": nodes}
    return yaml.safe_dump(config, sort_keys=False)


def _node(role: str, image: str | None) -> dict[str, Any]:
    return {"role": role, **({"image": image} if image else {})}
