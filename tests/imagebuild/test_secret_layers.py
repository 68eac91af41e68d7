"""A secret-bearing project through `kubetrain build` with every builder this machine runs for real (podman,
buildah): its .gitignore'd keys and .env files, checkpoints/ and wandb/ reach no layer of the image, nor the
docker-archive that `build --kind` loads, nor the build's output. The layers are read byte by byte.

Docker's own `.dockerignore` rules know nothing of .gitignore: before kubetrain chose the context with one rule
for the image and the code ConfigMap, every file here went into the image (and `--push` shipped it)."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_selection import CODE, HEAVY, SECRET, SECRETS

from tests.conftest import in_ci
from tests.testenv import node

BUILDERS = ("podman", "buildah")
SPEC = """\
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: secrets}
spec:
  image: localhost/kubetrain-test/secrets:latest
  command: [python, train.py]
  build: {dockerfile: Dockerfile}
"""
GITIGNORE = ".env*\n!.env.example\n*.key\nid_rsa\ndeploy/\ngcp.json\n**/.aws/\nboto.cfg\n"


def _env() -> dict[str, str]:
    env = {**os.environ, "NO_COLOR": "1"}
    conf = node.node_bin_dir() / "containers.conf"  # podman's default ulimits exceed some VMs' hard limits
    if conf.is_file():
        env["CONTAINERS_CONF"] = str(conf)
    return env


@pytest.fixture(params=BUILDERS)
def builder(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if shutil.which(name) is None:
        message = f"{name} is not installed (tests/testenv/prepare-node.sh installs it)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return name


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for name, content in {**CODE, **SECRETS, **HEAVY, ".gitignore": GITIGNORE, "kubetrain.yaml": SPEC,
                          "Dockerfile": "FROM scratch\nCOPY . /workspace/\n"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    return root


def _layers(archive: Path) -> Iterator[tuple[str, bytes]]:
    """(member name, bytes) of every file of a docker-archive, gzip layers unpacked."""
    with tarfile.open(archive) as outer:
        for member in outer.getmembers():
            handle = outer.extractfile(member)
            if handle is None:
                continue
            data = handle.read()
            yield member.name, gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _layer_files(data: bytes) -> list[str]:
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as layer:
            return [member.name for member in layer.getmembers() if member.isfile()]
    except tarfile.ReadError:
        return []  # the manifest or the config, not a layer


def _remove(builder: str, ref: str) -> None:
    subprocess.run([builder, "rmi", "-f", ref], capture_output=True, env=_env(), check=False, timeout=120)


def test_no_secret_byte_reaches_a_layer_the_archive_or_the_output(builder: str, project: Path,
                                                                  tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "kubetrain", "build", "-f", str(project / "kubetrain.yaml"), "--builder", builder]
    built = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=600, check=False)
    ref = built.stdout.strip()
    try:
        assert built.returncode == 0, built.stderr
        assert SECRET not in built.stdout + built.stderr
        assert ("kubetrain: left out of the build context: .env (.gitignore), .env.local (.gitignore), boto.cfg "
                "(.gitignore), checkpoints/ "
                "(kubetrain default), cloud/.aws/ (.gitignore), deploy/ (.gitignore), gcp.json (.gitignore), id_rsa "
                "(.gitignore), kubetrain.yaml (a kubetrain spec), server.key (.gitignore), wandb/ (kubetrain "
                "default)\n") in built.stderr
        archive = tmp_path / "image.tar"  # what `kubetrain build --kind` hands to kind for podman and buildah
        save = {"podman": ["podman", "save", "--format", "docker-archive", "-o", str(archive), ref],
                "buildah": ["buildah", "push", ref, f"docker-archive:{archive}:{ref}"]}[builder]
        subprocess.run(save, capture_output=True, env=_env(), timeout=300, check=True)
        members = list(_layers(archive))
        in_layers = sorted({name for _, data in members for name in _layer_files(data)})  # a layer may be linked twice
        assert in_layers == sorted(f"workspace/{name}" for name in
                                   (".env.example", ".gitignore", "Dockerfile", "pkg/model.py", "requirements.txt",
                                    "train.py"))
        assert [name for name, data in members if SECRET.encode() in data] == []
    finally:
        if ref:
            _remove(builder, ref)
