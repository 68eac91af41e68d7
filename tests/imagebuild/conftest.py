"""Fixtures for `kubetrain build` tests: recording fakes on PATH and a small project on disk."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from recording import FakeBin, activate


@pytest.fixture
def fakebin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeBin:
    fake = FakeBin(tmp_path / "bin")
    activate(fake, monkeypatch)
    return fake


SPEC = """\
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata:
  name: digits
spec:
  image: ghcr.io/acme/digits:latest
  command: [python, train.py]
{build}"""


@pytest.fixture
def project(tmp_path: Path) -> Callable[..., Path]:
    """Write a project (spec + files) and return the spec path. `build` is the spec's build section YAML."""

    def make(build: str = "", files: dict[str, str] | None = None) -> Path:
        root = tmp_path / "project"
        root.mkdir(exist_ok=True)
        if files is None:
            files = {"train.py": "print('training')\n", "requirements.txt": "numpy==2.1.0\n"}
        for name, content in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(content)
        spec = root / "kubetrain.yaml"
        section = textwrap.indent(textwrap.dedent(build), "  ") if build else ""
        spec.write_text(SPEC.format(build=section))
        return spec

    return make
