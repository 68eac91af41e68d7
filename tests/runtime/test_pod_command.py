"""The pod's main process, exactly as rendered (command + args + env of the PyTorchJob's container), run with
real torchrun and 2 gloo workers, with the operator's PET_* variables: SIGTERM gives exit 143 after a complete
stop checkpoint (an fsdp async save that must be flushed first), a real worker failure stays non-zero and
not 143, and a completed run exits 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.jobspec.load import parse_spec
from kubetrain.render import render_job
from tests.runtime.helpers import JOBS, REPO, ft_train, quiet_env, records
from tests.runtime.torchmod import require_torch
from tests.testenv.processes import free_port

require_torch()
pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(300)]


def rendered(tmp_path: Path, **spec: Any) -> tuple[list[str], dict[str, str]]:
    """(argv, env) of the rendered Master container: command + args, and its literal env values."""
    doc = {"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "pod"},
           "spec": {"image": "example.com/test:1", "nodes": 1, "procsPerNode": 2, **spec}}
    obj = render_job(parse_spec(yaml.safe_dump(doc)))[-1]
    container = obj["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    env["KUBETRAIN_PROGRESS_DIR"] = str(tmp_path / "progress")  # the pod's /tmp path would be this machine's
    return [*container["command"], *container["args"]], env


def pod_env(tmp_path: Path, container_env: dict[str, str], **extra: str) -> dict[str, str]:
    """The container's env plus what the operator and the image provide: PET_* and torchrun on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    torchrun = bin_dir / "torchrun"  # an image's torchrun entry point, for this interpreter
    torchrun.write_text(f'#!/bin/sh\nexec {sys.executable} -m torch.distributed.run "$@"\n')
    torchrun.chmod(0o755)
    pet = {"PET_NNODES": "1", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "0", "PET_MASTER_ADDR": "127.0.0.1",
           "PET_MASTER_PORT": str(free_port())}
    return quiet_env(**container_env, **pet, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                     PYTHONPATH=os.pathsep.join([str(REPO), str(JOBS)]), **extra)


def test_sigterm_to_the_rendered_main_process_exits_143_after_a_complete_async_checkpoint(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    train = ft_train(epochs=3, strategy="fsdp", fsdp={"asyncCheckpoint": True})
    # no volume: the "pod" is this machine's process tree, and its checkpoints live and die with the test
    argv, container_env = rendered(tmp_path, train=train,
                                   checkpoint={"dir": str(ckpt), "everySteps": 2, "ephemeral": True})
    assert argv[:2] == ["sh", "-c"] and argv[3:6] == ["torchrun", "-m", "kubetrain.runtime"]
    env = pod_env(tmp_path, container_env, FT_SLEEP="0.01")
    proc = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if '"kind":"checkpoint"' in line:  # an async save was started: the stop must flush it
                break
        proc.send_signal(signal.SIGTERM)  # what the kubelet does: the container's main process only
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out = "".join(lines) + out
    assert proc.returncode == 143, out[-3000:] + err[-3000:]
    assert "kubetrain: stopped by a signal; torchrun exited" in err
    end = records(out, "end")[-1]
    assert end["status"] == "stopped" and end["signal"] == 15
    # the checkpoint of the stop step (begun as an async interval save, or by the signal) is published
    saved = [r for r in records(out, "checkpoint") if r["step"] == end["step"]]
    assert len(saved) == 1 and saved[0]["reason"] in ("interval", "signal"), out[-3000:]
    stop = Path(saved[0]["path"])
    assert sorted(p.name for p in stop.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.pt"]
    assert not list(ckpt.glob(".tmp-*"))  # nothing left half-published
    # the same rendered command again: resumes from the stop checkpoint, finishes, exits 0
    result = subprocess.run(argv, env=pod_env(tmp_path, container_env), cwd=tmp_path, capture_output=True,
                            text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert records(result.stdout, "resume")[0]["path"] == str(stop)
    assert records(result.stdout, "end")[-1]["status"] == "completed"


def test_a_failing_worker_keeps_a_non_zero_exit_that_is_not_143(tmp_path: Path) -> None:
    script = "import os, sys; sys.exit(3 if os.environ['RANK'] == '1' else 0)"
    argv, container_env = rendered(tmp_path, command=["python", "-c", script])
    result = subprocess.run(argv, env=pod_env(tmp_path, container_env), cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode not in (0, 143), result.stderr[-3000:]
    assert "stopped by a signal" not in result.stderr
    assert json.dumps(script)  # the rendered command ran the user's program, not a stand-in
