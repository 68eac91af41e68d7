"""Every command's stdout can fail: a full disk (ENOSPC) is one line and exit 1, a reader that left (EPIPE) is
a quiet end; never a traceback. `--dry-run` alone means client, as in kubectl."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli import SPECS

SPEC = str(SPECS / "gke-h100.yaml")
EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "digits" / "kubetrain.yaml")
COMMANDS = [["init", "{tmp}/project"], ["controller", "crd"],
            ["controller", "install", "--dry-run=client", "-o", "yaml"], ["metrics", "--help"],
            ["run", "--dry-run", "-f", EXAMPLE], ["render", "-f", SPEC], ["--help"], ["--version"],
            ["render", "--help"]]


def kubetrain(args: list[str], tmp_path: Path, stdout: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "COLUMNS": "100"}
    argv = [arg.format(tmp=tmp_path) for arg in args]
    return subprocess.run([sys.executable, "-m", "kubetrain", *argv], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=120, env=env, cwd=tmp_path, check=False)


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: " ".join(Path(arg).name for arg in args))
def test_a_full_disk_on_stdout_is_one_line(tmp_path: Path, args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        result = kubetrain(args, tmp_path, full.fileno())
    assert (result.returncode, result.stderr) == (1, "error: cannot write to stdout: No space left on device\n")


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: " ".join(Path(arg).name for arg in args))
def test_a_closed_pipe_on_stdout_is_no_traceback(tmp_path: Path, args: list[str]) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte, as with `| head -0`
    try:
        result = kubetrain(args, tmp_path, write)
    finally:
        os.close(write)
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr


@pytest.mark.parametrize("command", [["controller", "install"], ["submit", "-f", SPEC]])
def test_a_bare_dry_run_means_client(tmp_path: Path, command: list[str]) -> None:
    from click.testing import CliRunner

    from kubetrain.cli.main import cli

    bare = CliRunner().invoke(cli, [*command, "--dry-run", "-o", "yaml"] if command[0] == "controller"
                              else [*command, "--dry-run"])
    assert "Invalid value" not in bare.stderr and "requires an argument" not in bare.stderr, bare.stderr
    if command[0] == "controller":  # client: printed, nothing contacted
        assert bare.exit_code == 0 and "kind: CustomResourceDefinition" in bare.stdout


@pytest.mark.parametrize("args", [["status", "j"], ["list"], ["logs", "j"], ["doctor"], ["metrics", "j"],
                                  ["delete", "j"], ["status", "j", "--context", "nope"]], ids=" ".join)
def test_no_usable_kubeconfig_is_a_usage_error_everywhere(tmp_path: Path, args: list[str]) -> None:
    env = {key: value for key, value in os.environ.items()
           if key not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
    env.update(HOME=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path))
    result = subprocess.run([sys.executable, "-m", "kubetrain", *args], capture_output=True, text=True, timeout=120,
                            env=env, cwd=tmp_path, check=False)
    assert result.returncode == 2  # input to fix (README: 2 usage or unreadable input), not a failed job (1)
    assert result.stderr == "error: no usable kubeconfig (~/.kube/config does not exist); set KUBECONFIG or pass " \
                            "--kubeconfig / --context\n"
    assert result.stdout == ""


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob", "auto"])
def test_the_starter_renders_for_every_target_it_offers(tmp_path: Path, target: str) -> None:
    from click.testing import CliRunner

    from kubetrain.cli.main import cli

    assert CliRunner().invoke(cli, ["init", str(tmp_path / "p")]).exit_code == 0
    spec = tmp_path / "p" / "kubetrain.yaml"
    text = spec.read_text()
    assert "pytorchjob (Kubeflow training-operator) | trainjob (Trainer v2) | auto" in text  # what it offers
    spec.write_text(text.replace("target: pytorchjob", f"target: {target}", 1))
    result = CliRunner().invoke(cli, ["render", "-f", str(spec)])
    assert result.exit_code == 0, result.stderr
