"""World size = the GPUs the pods get: spec.procsPerNode and a torchrun command's --nproc-per-node against
spec.gpusPerNode, for both targets, through `kubetrain render` (errors with file and line, warnings on
stderr)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.rules.worldsize import procs_gpus_problem

SPEC = """apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: ws}
spec:
  image: example.com/train:1
  target: TARGET
  command: COMMAND
  gpusPerNode: GPUS
"""


@pytest.mark.parametrize(("procs", "gpus", "expected"), [
    (4, 4, None), (1, 0, None), (8, 0, None), ("4", 4, None),
    ("gpu", 8, None), ("auto", 8, None),
    (8, 4, "error"), ("5", 4, "error"), ("gpu", 0, "error"),
    (1, 8, "warning"), (2, 4, "warning"), ("auto", 0, "warning"), ("cpu", 0, "warning"), ("cpu", 4, "warning"),
    ("banana", 4, None), (True, 4, None),
])
def test_the_rule_over_counts_and_named_values(procs: object, gpus: int, expected: str | None) -> None:
    found = procs_gpus_problem(procs, gpus)
    assert (found[0] if found else None) == expected


def _write(tmp_path: Path, *, target: str = "pytorchjob", command: str = "[python, train.py]", gpus: int = 4,
           procs: int | None = None) -> Path:
    text = SPEC.replace("TARGET", target).replace("COMMAND", command).replace("GPUS", str(gpus))
    if procs is not None:
        text += f"  procsPerNode: {procs}\n"
    path = tmp_path / "kubetrain.yaml"
    path.write_text(text)
    return path


def _render(path: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["render", "-f", str(path), *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_more_processes_than_gpus_is_an_error_with_file_and_line(tmp_path: Path, target: str) -> None:
    path = _write(tmp_path, target=target, gpus=4, procs=8)
    code, out, err = _render(path)
    assert code == 2 and out == ""
    assert err.startswith(f"error: {path}:9: spec.procsPerNode: 8 processes per pod on 4 GPU(s): local ranks "
                          "4..7 have no GPU of their own")
    assert "Traceback" not in err


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_fewer_processes_than_gpus_is_a_warning_and_renders(tmp_path: Path, target: str) -> None:
    path = _write(tmp_path, target=target, gpus=4, procs=2)
    code, out, err = _render(path)
    assert code == 0
    assert (f"warning: {path}:9: spec.procsPerNode: 2 process(es) per pod on 4 GPUs: 2 GPU(s) per pod stay idle "
            "unless each process drives several") in err
    job = list(yaml.safe_load_all(out))[-1]
    count = job["spec"]["nprocPerNode"] if target == "pytorchjob" else job["spec"]["trainer"]["numProcPerNode"]
    assert str(count) == "2"


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_matching_counts_render_without_world_size_warnings(tmp_path: Path, target: str) -> None:
    for gpus, procs in ((4, None), (4, 4), (0, None), (0, 3)):
        code, out, err = _render(_write(tmp_path, target=target, gpus=gpus, procs=procs))
        assert code == 0 and "GPU" not in err, (gpus, procs, err)
        job = list(yaml.safe_load_all(out))[-1]
        count = job["spec"]["nprocPerNode"] if target == "pytorchjob" else job["spec"]["trainer"]["numProcPerNode"]
        assert str(count) == str(procs or gpus or 1)


@pytest.mark.parametrize(("flag", "gpus", "stream", "message"), [
    ("gpu", 0, "error", "spec.command: `gpu` on a pod without nvidia.com/gpu: torchrun fails at start"),
    ("8", 4, "error", "spec.command: 8 processes per pod on 4 GPU(s)"),
    ("auto", 0, "warning", "spec.command: `auto` on a pod without nvidia.com/gpu starts one process per CPU of "
                           "the node"),
    ("2", 8, "warning", "spec.command: 2 process(es) per pod on 8 GPUs: 6 GPU(s) per pod stay idle"),
])
def test_a_torchrun_commands_nproc_per_node_is_checked_too(tmp_path: Path, flag: str, gpus: int, stream: str,
                                                           message: str) -> None:
    path = _write(tmp_path, command=f"[torchrun, --nproc-per-node={flag}, train.py]", gpus=gpus)
    code, _, err = _render(path)
    if stream == "error":
        assert code == 2 and err.startswith(f"error: {path}:7: {message}"), err
    else:
        assert code == 0 and f"warning: {path}:7: {message}" in err, err


@pytest.mark.parametrize("flag", ["gpu", "auto", "4"])
def test_torchrun_counting_the_pods_gpus_is_not_warned_about(tmp_path: Path, flag: str) -> None:
    code, _, err = _render(_write(tmp_path, command=f"[torchrun, --nproc-per-node={flag}, train.py]", gpus=4))
    assert code == 0 and err == ""


def test_validate_reports_the_spec_error_with_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path, gpus=2, procs=3)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 1, result.output
    assert f"{path}:9" in result.output and "3 processes per pod on 2 GPU(s)" in result.output


def test_only_field_messages_get_a_location(tmp_path: Path) -> None:
    from kubetrain.jobspec.load import load_spec

    path = _write(tmp_path, gpus=4, procs=4)
    loaded = load_spec(str(path))
    assert loaded.where("spec.procsPerNode: x") == f"{path}:9: spec.procsPerNode: x"
    assert loaded.where("spec.placement.cloud: y") == f"{path}:4: spec.placement.cloud: y"  # unset: its parent
    assert loaded.where("kubetrain could not: z") == "kubetrain could not: z"
