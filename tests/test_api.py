"""kubetrain.api makes the checks its CLI command makes: `kubetrain run` and api.run, for the same spec on the
same machine, give the same warnings and the same refusal (one pipeline, kubetrain.local.prepare). The
machine's GPUs are a fake /dev directory (the GPU boundary); the job's program does not exist, so both stop
at the last check, before anything starts."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import kubetrain.api as kt
from kubetrain.cli.main import cli
from kubetrain.errors import KubetrainError
from kubetrain.local import preflight

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
MISSING = "no-such-trainer-program"

# (what the case shows, extra spec fields, GPU device nodes in the fake /dev, a warning or the refusal expected)
CASES = [
    ("more GPUs than the machine has: refused", {"gpusPerNode": 1}, ["nvidia0", "nvidiactl"],
     "spec.gpusPerNode: 2 node(s) x 1 GPU(s) need 2 GPUs on this machine, which has 1"),
    ("GPUs on a machine without any: a warning", {"gpusPerNode": 1}, [],
     "spec.gpusPerNode: 1 GPU(s) per node requested, but this machine has no NVIDIA GPU"),
    ("more processes than CPU cores: a warning", {"procsPerNode": CORES + 1}, [],
     f"training processes on {CORES} CPU core(s)"),
    ("a launcher flag that contradicts the spec: the render warning",
     {"command": ["torchrun", "--nnodes=3", MISSING]}, [], "spec.command: --nnodes=3 contradicts the spec (2)"),
]


def write_job(directory: Path, extra: dict[str, Any]) -> Path:
    spec = {"image": "example.com/train:1", "nodes": 2, "procsPerNode": 1, "command": [MISSING], **extra}
    path = directory / "kubetrain.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob",
                                    "metadata": {"name": "same"}, "spec": spec}))
    return path


@pytest.fixture
def fake_dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    dev = tmp_path / "dev"
    dev.mkdir()
    monkeypatch.setattr(preflight, "DEV", dev)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return dev


def cli_outcome(spec: Path) -> tuple[list[str], str]:
    result = CliRunner().invoke(cli, ["run", "-f", str(spec)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    return [line.removeprefix("warning: ") for line in lines if line.startswith("warning: ")], \
        next(line.removeprefix("error: ") for line in lines if line.startswith("error: "))


def api_outcome(spec: Path, caplog: pytest.LogCaptureFixture) -> tuple[list[str], str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kubetrain"), pytest.raises(KubetrainError) as refused:
        kt.run(spec)
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING], str(refused.value)


@pytest.mark.parametrize(("case", "extra", "devices", "expected"), CASES, ids=[c[0] for c in CASES])
def test_api_run_and_kubetrain_run_warn_and_refuse_alike(case: str, extra: dict[str, Any], devices: list[str],
                                                          expected: str, tmp_path: Path, fake_dev: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    for name in devices:
        (fake_dev / name).touch()
    spec = write_job(tmp_path, extra)
    cli_warnings, cli_error = cli_outcome(spec)
    api_warnings, api_error = api_outcome(spec, caplog)
    assert (api_warnings, api_error) == (cli_warnings, cli_error)
    if "refused" in case:
        assert api_error.startswith(expected) and not api_warnings
    else:
        assert any(expected in warning for warning in api_warnings) and MISSING in api_error, api_warnings
