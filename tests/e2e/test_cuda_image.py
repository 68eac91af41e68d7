"""images/Dockerfile (the CUDA variant) built for real, against a stand-in with pytorch/pytorch's layout.

Everything but the CUDA libraries: ensure-torch.sh finding the base's torch on PATH (/opt/conda/bin), the
uid 1000 user created in a base that has none, the runtime's requirements, the package layer, SHELL kept
(--format docker), and the result importing kubetrain's runtime as the non-root user. No node needed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from .conftest import Cli, base_image

pytestmark = [pytest.mark.slow]
STANDIN = Path(__file__).parent / "cuda-standin"
STANDIN_REF = "localhost/kubetrain/pytorch-cuda-standin:latest"


def _run(cli: Cli, *argv: str, timeout: float = 900) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                            env=cli.env)  # CONTAINERS_CONF: ulimits within this VM's hard limits
    assert result.returncode == 0, f"{' '.join(argv[:2])} exited {result.returncode}: {result.stderr[-2000:]}"
    return result.stdout


def _podman(cli: Cli, *args: str, timeout: float = 900) -> str:
    return _run(cli, "podman", *args, timeout=timeout)


def test_cuda_dockerfile_builds_on_a_pytorch_layout_standin(cli: Cli, project: Path, tmp_path: Path) -> None:
    _podman(cli, "build", "-q", "--build-arg", f"BASE_IMAGE={base_image()}", "-t", STANDIN_REF, str(STANDIN))
    # A copy of the project without requirements.txt: nothing from PyPI but the runtime's few dependencies,
    # and the session's CPU image keeps its context (and tag).
    own = tmp_path / "digits"
    shutil.copytree(project, own, ignore=shutil.ignore_patterns(".kubetrain", "requirements.txt", "*.yaml"))
    spec = yaml.safe_load((project / "kubetrain.yaml").read_text())
    spec["spec"]["build"] = {"variant": "cuda", "baseImage": STANDIN_REF}
    path = own / "kubetrain.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    build = cli("build", "-f", str(path), "--builder", "podman", timeout=1800)
    ref = build.stdout.strip().splitlines()[-1]

    config = json.loads(_podman(cli, "image", "inspect", ref))[0]["Config"]
    assert config["User"] == "1000:1000" and config["Entrypoint"] == ["torchrun"]
    assert config["WorkingDir"] == "/workspace"
    assert "NVIDIA_VISIBLE_DEVICES=all" in config["Env"]  # the base's environment is kept
    # SHELL survives in the docker format (the OCI image config has no such field; podman's inspect shows
    # the OCI view, buildah's the docker config too).
    docker = json.loads(_run(cli, "buildah", "inspect", "--type", "image", ref))["Docker"]["config"]
    assert docker["Shell"] == ["/bin/bash", "-o", "pipefail", "-c"]
    probe = ("import os, sys, torch, kubetrain.runtime; "
             "print(os.getuid(), sys.prefix, torch.__version__, kubetrain.runtime.__file__)")
    out = _podman(cli, "run", "--rm", "--network", "none", "--entrypoint", "python3", ref, "-c", probe)
    uid, prefix, torch_version, module = out.split()
    assert (uid, prefix) == ("1000", "/opt/venv")  # /opt/conda → /opt/venv in the stand-in
    # ensure-torch.sh kept the base's torch (the Dockerfile's TORCH_VERSION would have been installed else).
    assert torch_version.startswith(base_image().rsplit(":torch", 1)[-1]), torch_version
    assert module.startswith("/opt/kubetrain/src/kubetrain/runtime/")
