"""One launch model: every command shape `render` accepts runs the same under `kubetrain run` (real torchrun
agents, one per node) and in the pods as rendered (the PyTorchJob's container command + args, started once
per replica with the operator's PET_* variables). Both must give the same world (process count, ranks from
one rendezvous) running the same program with the same arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.jobspec.load import parse_spec
from kubetrain.render import render_job
from tests.runtime.helpers import KUBETRAIN, REPO, quiet_env
from tests.runtime.torchmod import require_torch
from tests.testenv.processes import free_port

require_torch()
pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(300)]

REPORT = """
import json, os, sys
program = __spec__.name if __spec__ is not None and __spec__.name != "__main__" else os.path.basename(__file__)
line = "SHAPE " + json.dumps({"rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"]),
                             "local_world": int(os.environ["LOCAL_WORLD_SIZE"]), "program": program,
                             "argv": sys.argv[1:]}) + "\\n"
# one write(2) of the whole line: the pod sets PYTHONUNBUFFERED, where print() writes the text and its newline
# separately, and two ranks sharing the pod's stdout could interleave them
os.write(1, line.encode())
"""

# One per launch path (a flag's spellings are parsed in tests/render/test_launch_and_limits.py): each shape
# starts four torchrun agents here, two locally and two as pods.
SHAPES: list[tuple[list[str], dict[str, Any], int]] = [  # (command, other spec fields, processes expected)
    (["python", "train.py", "--lr", "0.1"], {}, 2),
    (["python", "-m", "shape_mod", "--lr", "0.1"], {"args": ["--epochs", "2"]}, 2),
    (["torchrun", "train.py"], {}, 2),
    (["python", "-m", "torch.distributed.run", "--nproc_per_node=2", "train.py", "--lr", "0.1"], {}, 4),
    (["torchrun", "--nproc-per-node=1", "--max-restarts", "0", "-m", "shape_mod"], {"args": ["--x"]}, 2),
    (["sh", "run.sh", "--lr", "0.1"], {}, 2),
    (["torchrun", "--standalone", "--nnodes=1", "--nproc_per_node=2", "train.py"], {"nodes": 1}, 2),
]


def write_code(code: Path) -> None:
    code.mkdir()
    (code / "train.py").write_text(REPORT)
    (code / "shape_mod.py").write_text(REPORT)
    (code / "run.sh").write_text(f'exec {sys.executable} "$(dirname "$0")/train.py" "$@"\n')


def spec_doc(code: Path, command: list[str], extra: dict[str, Any]) -> dict[str, Any]:
    # The code is mounted where it lies, so the rendered pod command finds it on this machine as in a pod.
    spec = {"image": "example.com/test:1", "nodes": 2, "procsPerNode": 1, "command": command,
            "code": {"path": str(code), "mountPath": str(code)}, "env": {"OMP_NUM_THREADS": "1"}, **extra}
    return {"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "shape"},
            "spec": spec}


def reports(output: str) -> list[dict[str, Any]]:
    found = [json.loads(line.split("SHAPE ", 1)[1]) for line in output.splitlines() if "SHAPE {" in line]
    return sorted(found, key=lambda r: r["rank"])


def pod_env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"  # the image's torchrun and python, for this interpreter
    bin_dir.mkdir(exist_ok=True)
    for name, program in (("torchrun", "-m torch.distributed.run "), ("python", "")):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {sys.executable} {program}"$@"\n')
        (bin_dir / name).chmod(0o755)
    return quiet_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def run_pods(tmp_path: Path, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every replica of the rendered PyTorchJob, started as the operator starts it (PET_* per pod)."""
    obj = render_job(parse_spec(yaml.safe_dump(doc)))[-1]
    replicas = obj["spec"]["pytorchReplicaSpecs"]
    nodes = sum(replica["replicas"] for replica in replicas.values())
    port, base = str(free_port()), pod_env(tmp_path)
    procs = []
    for rank in range(nodes):
        replica = replicas["Master" if rank == 0 and "Master" in replicas else "Worker"]
        container = replica["template"]["spec"]["containers"][0]
        env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
        pet = {"PET_NNODES": str(nodes), "PET_NPROC_PER_NODE": str(obj["spec"]["nprocPerNode"]),
               "PET_NODE_RANK": str(rank), "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": port}
        # the pod's progress directory (/tmp/kubetrain-progress) would be this machine's: keep it in tmp_path,
        # where the kwok-run probe of tests/cli/test_stacks_cli.py cannot find stale records
        env["KUBETRAIN_PROGRESS_DIR"] = str(tmp_path / "progress")
        procs.append(subprocess.Popen([*container["command"], *container["args"]], env={**base, **env, **pet},
                                      cwd=container.get("workingDir", "/"), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    results = [proc.communicate(timeout=180) for proc in procs]
    for proc, (out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, out + err
    return reports("\n".join(out for out, _ in results))


@pytest.mark.parametrize(("command", "extra", "processes"), SHAPES, ids=[" ".join(s[0]) for s in SHAPES])
def test_a_command_runs_the_same_locally_and_in_the_pods(tmp_path: Path, command: list[str],
                                                         extra: dict[str, Any], processes: int) -> None:
    code = tmp_path / "code"
    write_code(code)
    doc = spec_doc(code, command, extra)
    spec_file = tmp_path / "kubetrain.yaml"
    spec_file.write_text(yaml.safe_dump(doc))
    local = subprocess.run([*KUBETRAIN, "run", "-f", str(spec_file)], env=pod_env(tmp_path), cwd=REPO,
                           capture_output=True, text=True, timeout=180, check=False)
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr[-3000:]
    in_pods = run_pods(tmp_path, doc)
    ran = reports(local.stdout)
    assert [r["rank"] for r in ran] == list(range(processes))  # one rendezvous: ranks 0..N-1, once each
    assert {r["world"] for r in ran} == {processes}
    assert ran == in_pods  # same world, same processes per node, same program, same arguments
    assert "Traceback" not in local.stdout + local.stderr


@pytest.mark.parametrize(("command", "error"), [
    (["python", "-m", "missing_module"],
     "error: spec.command: cannot import 'missing_module': No module named 'missing_module'\n"),
    (["torchrun", "--nproc-per-node", "1", "-m", "missing.sub"],
     "error: spec.command: cannot import 'missing.sub': No module named 'missing'\n"),
    (["torchrun", "--nproc_per_node=1", "missing.py"], "error: spec.command: {code}/missing.py: no such file\n"),
    (["no-such-program", "x"], "error: spec.command: no-such-program: no such program here (not on PATH)\n"),
])
def test_a_missing_program_is_one_line_before_any_agent_starts(tmp_path: Path, command: list[str],
                                                                error: str) -> None:
    code = tmp_path / "code"
    write_code(code)
    spec_file = tmp_path / "kubetrain.yaml"
    spec_file.write_text(yaml.safe_dump(spec_doc(code, command, {})))
    result = subprocess.run([*KUBETRAIN, "run", "-f", str(spec_file)], env=pod_env(tmp_path), cwd=REPO,
                            capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == error.format(code=code)  # no agent started: nothing else was printed
