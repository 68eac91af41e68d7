"""Host prerequisites for a kind cluster with GPUs, each failure with the command that fixes it."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubetrain.errors import KubetrainError
from kubetrain.imagebuild.kindnodes import node_engine
from kubetrain.imagebuild.process import run_captured

TOOLKIT_URL = "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html"
VOLUME_MOUNTS_KEY = "accept-nvidia-visible-devices-as-volume-mounts"
DOCKER_RUNTIME_FIX = ("run `sudo nvidia-ctk runtime configure --runtime=docker --set-as-default "
                      "&& sudo systemctl restart docker`")
VOLUME_MOUNTS_FIX = (f"run `sudo nvidia-ctk config --set {VOLUME_MOUNTS_KEY}=true --in-place "
                     "&& sudo systemctl restart docker`")
TOOLS = {
    "kind": "install kind: https://kind.sigs.k8s.io/docs/user/quick-start/#installation",
    "kubectl": "install kubectl: https://kubernetes.io/docs/tasks/tools/",
    "helm": "install helm: https://helm.sh/docs/intro/install/",
}
NVIDIA_STACK_MISSING = (f"no NVIDIA driver or Container Toolkit on this host (nvidia-smi and nvidia-ctk not found): "
                        f"install both ({TOOLKIT_URL}), or use --cpu-only")
_GPU_LINE = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: ([^)]+)\))?$")


class PrerequisiteError(KubetrainError):
    """One or more host prerequisites are missing; one line (with its fix) per problem."""

    exit_code = 1

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))

    def lines(self) -> list[str]:
        return list(self.problems)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str


def check_host(cpu_only: bool, which: Callable[[str], str | None] = shutil.which) -> list[Gpu]:
    """Check everything `cluster create` needs; returns the host's GPUs (empty with cpu_only)."""
    if not cpu_only and not which("nvidia-smi") and not which("nvidia-ctk"):
        raise PrerequisiteError([NVIDIA_STACK_MISSING])  # nothing else matters without them
    problems: list[str] = []
    gpus = [] if cpu_only else _nvidia_smi(problems)
    if node_engine(which) == "podman":
        _podman(problems, cpu_only)
    else:
        _docker(problems, cpu_only, which)
    if not cpu_only:
        _nvidia_ctk(problems, which)
    for tool in ("kind", "kubectl") if cpu_only else ("kind", "kubectl", "helm"):
        if not which(tool):
            problems.append(f"{tool} is not installed (not on PATH): {TOOLS[tool]}")
    if problems:
        raise PrerequisiteError(problems)
    return gpus


def _nvidia_smi(problems: list[str]) -> list[Gpu]:
    result = run_captured(["nvidia-smi", "-L"])
    if result.code == 127:
        problems.append("nvidia-smi not found: install the NVIDIA driver, or use --cpu-only")
        return []
    if result.code != 0:
        reason = _last_line(result.stderr or result.stdout, result.code)
        problems.append(f"`nvidia-smi -L` failed ({reason}): "
                        "check the NVIDIA driver (a reboot after installing it?), or use --cpu-only")
        return []
    matches = [_GPU_LINE.match(line.strip()) for line in result.stdout.splitlines()]
    gpus = [Gpu(int(m[1]), m[2]) for m in matches if m]
    if not gpus:
        problems.append("`nvidia-smi -L` lists no GPUs: check the NVIDIA driver, or use --cpu-only")
    return gpus


def _docker(problems: list[str], cpu_only: bool, which: Callable[[str], str | None]) -> None:
    if not which("docker"):
        problems.append("docker is not installed (not on PATH): install Docker Engine, "
                        "https://docs.docker.com/engine/install/")
        return
    result = run_captured(["docker", "info", "--format", "{{json .}}"])
    info = _json(result.stdout) if result.code == 0 else None
    if result.code == 0 and info is None:
        problems.append(f"`docker info` printed no JSON ({_last_line(result.stdout, 0)}): is this Docker?")
        return
    if info is None:
        problems.append(f"the docker daemon is not reachable ({_last_line(result.stderr, result.code)}): "
                        "start it (`sudo systemctl start docker`) or check your permissions (docker group)")
        return
    if cpu_only:
        return
    runtimes = info.get("Runtimes") or {}
    if "nvidia" not in runtimes:
        problems.append(f"docker has no nvidia runtime: {DOCKER_RUNTIME_FIX}")
    elif info.get("DefaultRuntime") != "nvidia":
        default = info.get("DefaultRuntime")
        problems.append(f"docker's default runtime is {default!r}, not 'nvidia' (kind nodes only get GPUs "
                        f"through it): {DOCKER_RUNTIME_FIX}")


def _podman(problems: list[str], cpu_only: bool) -> None:
    result = run_captured(["podman", "info", "--format", "json"])
    if result.code != 0:
        problems.append(f"`podman info` failed ({_last_line(result.stderr, result.code)}): check podman "
                        "(kind's podman provider runs it as root)")
    if not cpu_only:
        problems.append("GPU workers need docker with the nvidia runtime (kind's podman provider cannot pass "
                        "GPUs the nvkind way): install Docker Engine, or use --cpu-only")


def _nvidia_ctk(problems: list[str], which: Callable[[str], str | None]) -> None:
    if not which("nvidia-ctk"):
        problems.append(f"nvidia-ctk is not installed: install the NVIDIA Container Toolkit, {TOOLKIT_URL}")
        return
    result = run_captured(["nvidia-ctk", "config"])
    try:
        config = tomllib.loads(result.stdout) if result.code == 0 else None
    except tomllib.TOMLDecodeError:
        config = None
    if config is None:
        problems.append(f"`nvidia-ctk config` failed ({_last_line(result.stderr, result.code)}): "
                        f"reinstall the NVIDIA Container Toolkit, {TOOLKIT_URL}")
    elif config.get(VOLUME_MOUNTS_KEY) is not True:
        problems.append(f"the NVIDIA Container Toolkit does not accept GPU requests as volume mounts "
                        f"({VOLUME_MOUNTS_KEY} is not true): {VOLUME_MOUNTS_FIX}")


def _json(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _last_line(text: str, code: int) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else f"exit code {code}"
