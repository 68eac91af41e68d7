"""Content-hash tagging and context assembly, with real files: same inputs → same tag, any input → new tag."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from kubetrain.errors import BuildError
from kubetrain.imagebuild.plan import Assembled, assemble, plan_build
from kubetrain.imagebuild.reference import repository_error, split_reference
from kubetrain.jobspec.load import load_spec

Project = Callable[..., Path]


def _assemble(spec: Path, staging: Path, base_id: str | None = None) -> Assembled:
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    return assemble(plan_build(load_spec(str(spec))), staging, base_id)


def test_same_inputs_same_tag_and_the_ref_format(project: Project, tmp_path: Path) -> None:
    spec = project()
    first = _assemble(spec, tmp_path / "s1")
    os.utime(spec.parent / "train.py", (1, 1))  # mtimes are not content
    second = _assemble(spec, tmp_path / "s2")
    assert first.ref == second.ref
    assert first.ref.startswith("ghcr.io/acme/digits:kt-") and len(first.ref.split(":kt-")[1]) == 16


def test_creation_order_does_not_matter(project: Project, tmp_path: Path) -> None:
    files = {f"pkg/m{i}.py": str(i) for i in range(20)}
    spec_a = project(files=files)
    a = _assemble(spec_a, tmp_path / "a")
    shutil.rmtree(spec_a.parent)
    spec_b = project(files=dict(reversed(list(files.items()))))
    assert _assemble(spec_b, tmp_path / "b").ref == a.ref


@pytest.mark.parametrize("change", ["content", "new_file", "exec_bit", "rename", "requirements"])
def test_any_context_change_changes_the_tag(project: Project, tmp_path: Path, change: str) -> None:
    spec = project()
    before = _assemble(spec, tmp_path / "s1").ref
    root = spec.parent
    if change == "content":
        (root / "train.py").write_text("print('changed')\n")
    elif change == "new_file":
        (root / "utils.py").write_text("")
    elif change == "exec_bit":
        (root / "train.py").chmod(0o755)
    elif change == "rename":
        (root / "train.py").rename(root / "main.py")
    else:
        (root / "requirements.txt").write_text("numpy==2.2.0\n")
    assert _assemble(spec, tmp_path / "s2").ref != before


@pytest.mark.parametrize("build", [
    "build:\n  buildArgs: {EXTRA: '1'}\n",
    "build:\n  baseImage: nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04\n",
    "build:\n  variant: cpu\n",
    "build:\n  platform: linux/arm64\n",
])
def test_build_args_base_image_variant_platform_change_the_tag(project: Project, tmp_path: Path,
                                                               build: str) -> None:
    plain = _assemble(project(), tmp_path / "s1").ref
    assert _assemble(project(build=build), tmp_path / "s2").ref != plain


def test_a_base_rebuilt_under_the_same_name_changes_the_tag(project: Project, tmp_path: Path) -> None:
    """The base image's local ID (what `kubetrain build` asks the builder for) is hashed, not only its name."""
    spec = project(build="build:\n  baseImage: localhost/acme/base:1\n")
    first = _assemble(spec, tmp_path / "s1", "sha256:" + "1" * 64).ref
    assert _assemble(spec, tmp_path / "s2", "sha256:" + "1" * 64).ref == first
    assert _assemble(spec, tmp_path / "s3", "sha256:" + "2" * 64).ref != first
    assert _assemble(spec, tmp_path / "s4").ref != first  # not local: only the name is known


def test_ignored_files_do_not_change_the_tag(project: Project, tmp_path: Path) -> None:
    spec = project(files={"train.py": "x", ".dockerignore": "data\n*.log\n"})
    before = _assemble(spec, tmp_path / "s1").ref
    (spec.parent / "data").mkdir()
    (spec.parent / "data" / "huge.bin").write_bytes(b"\0" * 1000)
    (spec.parent / "run.log").write_text("noise")
    assert _assemble(spec, tmp_path / "s2").ref == before
    (spec.parent / ".dockerignore").write_text("data\n")  # the ignore file itself is context
    assert _assemble(spec, tmp_path / "s3").ref != before


def test_own_dockerfile_layout(project: Project, tmp_path: Path) -> None:
    spec = project(files={"train.py": "x", "requirements.txt": "numpy\n", ".git/config": "x", "pkg/a.py": ""})
    assembled = _assemble(spec, tmp_path / "s")
    ctx = assembled.context
    assert (ctx / "workspace/train.py").read_text() == "x"
    assert (ctx / "workspace/pkg/a.py").exists()
    assert not (ctx / "workspace/.git").exists()  # kubetrain's default ignores
    assert not (ctx / "workspace/kubetrain.yaml").exists()  # specs are not code: editing one rebuilds nothing
    assert (ctx / "kubetrain/requirements.txt").read_text() == "numpy\n"
    assert (ctx / "kubetrain/src/kubetrain/__init__.py").exists()
    assert (ctx / "kubetrain/src/kubetrain/imagebuild/plan.py").exists()
    assert not list((ctx / "kubetrain/src").rglob("__pycache__"))
    assert os.access(ctx / "kubetrain/ensure-torch.sh", os.X_OK)
    assert assembled.dockerfile.read_text().startswith("# syntax=docker/dockerfile:1")


def test_custom_dockerfile_gets_the_plain_context(project: Project, tmp_path: Path) -> None:
    spec = project(build="build:\n  dockerfile: docker/train.Dockerfile\n",
                   files={"train.py": "x", "docker/train.Dockerfile": "FROM python:3.12-slim\nCOPY . /app\n"})
    assembled = _assemble(spec, tmp_path / "s")
    names = sorted(p.relative_to(assembled.context).as_posix() for p in assembled.context.rglob("*"))
    assert names == ["docker", "docker/train.Dockerfile", "train.py"]
    assert assembled.dockerfile.read_text() == "FROM python:3.12-slim\nCOPY . /app\n"


@pytest.mark.parametrize(("build", "message"), [
    ("build:\n  context: nope\n", r"kubetrain.yaml: spec.build.context: .*nope is not a directory"),
    ("build:\n  dockerfile: Missing.Dockerfile\n", r"spec.build.dockerfile: .*Missing.Dockerfile not found"),
    ("build:\n  requirements: req/missing.txt\n", r"spec.build.requirements: .*missing.txt not found"),
    ("build:\n  repository: ghcr.io/Acme/Digits\n", r"spec.build.repository: 'ghcr.io/Acme/Digits' is "
                                                     "not a valid"),
    ("build:\n  buildArgs: {'bad-name': x}\n", r"spec.build.buildArgs.bad-name: not a valid build-arg name"),
])
def test_bad_build_sections_name_the_field(project: Project, build: str, message: str) -> None:
    with pytest.raises(BuildError, match=message):
        plan_build(load_spec(str(project(build=build))))


@pytest.mark.parametrize(("ref", "parts"), [
    ("ghcr.io/acme/digits:latest", ("ghcr.io/acme/digits", "latest", None)),
    ("localhost:5000/digits", ("localhost:5000/digits", None, None)),
    ("localhost:5000/digits:v1@sha256:abc", ("localhost:5000/digits", "v1", "sha256:abc")),
    ("digits", ("digits", None, None)),
])
def test_split_reference(ref: str, parts: tuple[str, str | None, str | None]) -> None:
    assert split_reference(ref) == parts


@pytest.mark.parametrize(("repository", "valid"), [
    ("ghcr.io/acme/digits", True), ("localhost:5000/a/b", True), ("a__b/c-d", True), ("acme/Digits", False),
    ("UPPER/x", True),  # Docker reads an upper-case first component as a registry host
    ("a/-b", False), ("", False), ("a" * 256, False),
])
def test_repository_validation(repository: str, valid: bool) -> None:
    assert (repository_error(repository) is None) is valid
