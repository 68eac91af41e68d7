"""Helpers for the runtime and local-run tests: spec files, kubetrain run processes, metrics lines, /proc scans."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kubetrain.metrics import parse_metrics_line
from tests.testenv.polling import wait_for

REPO = Path(__file__).resolve().parents[2]
JOBS = Path(__file__).resolve().parent / "jobs"
EXAMPLE = REPO / "examples" / "digits"
KUBETRAIN = [sys.executable, "-m", "kubetrain"]


def quiet_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC_"))}
    env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}, **extra)
    return env


def write_spec(path: Path, *, name: str = "ft", nodes: int = 2, train: dict[str, Any] | None = None,
               checkpoint: dict[str, Any] | None = None, command: list[str] | None = None,
               elastic: dict[str, Any] | None = None, env: dict[str, str] | None = None,
               code: Path = JOBS) -> Path:
    spec: dict[str, Any] = {
        "image": "example.com/test:1", "nodes": nodes, "procsPerNode": 1, "code": {"path": str(code)},
        "volumes": [{"name": "ckpt", "claim": "ckpt", "mountPath": "/ckpt", "localPath": str(path.parent / "ckpt")}],
        "env": {"OMP_NUM_THREADS": "1", **(env or {})},
    }
    if train is not None:
        spec["train"] = train
    if command is not None:
        spec["command"] = command
    if checkpoint is not None:
        spec["checkpoint"] = checkpoint
    if elastic is not None:
        spec["elastic"] = elastic
    doc = {"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name}, "spec": spec}
    path.write_text(yaml.safe_dump(doc))
    return path


def ft_train(**overrides: Any) -> dict[str, Any]:
    """The fault-tolerance job: 512 samples, 16 per rank per step, 2 ranks -> 16 steps per epoch."""
    return {"model": "ft_task:build_model", "dataset": "ft_task:build_datasets",
            "optimizer": "ft_task:build_optimizer", "scheduler": "ft_task:build_scheduler",
            "epochs": 3, "batchSize": 16, "lr": 0.05, "seed": 7, "logEvery": 4, **overrides}


class Run:
    """`kubetrain run` in the background, its stdout collected line by line."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path = REPO) -> None:
        self.proc = subprocess.Popen([*KUBETRAIN, "run", "--raw", *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.lines: list[str] = []

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 120) -> dict[str, Any]:
        """Read stdout until a metrics record satisfies `predicate`."""
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"run ended before the expected metrics line:\n{self.output()}")
            self.lines.append(line.rstrip("\n"))
            record = parse_metrics_line(line)
            if record is not None and predicate(record):
                return record
        raise AssertionError(f"timed out waiting for a metrics line:\n{self.output()}")

    def finish(self, timeout: float = 180) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        self.lines += out.splitlines()
        return self.proc.returncode, "\n".join(self.lines), err

    def output(self) -> str:
        return "\n".join(self.lines)

    def kill(self) -> None:
        """Clean up after a failed test: stop kubetrain run as a user would, then make sure."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def run_sync(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KUBETRAIN, "run", "--raw", *args], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, check=False)


def records(output: str, kind: str | None = None) -> list[dict[str, Any]]:
    found = [r for r in map(parse_metrics_line, output.splitlines()) if r is not None]
    return [r for r in found if kind is None or r["kind"] == kind]


def pids_with_env(name: str, value: str) -> list[int]:
    """Processes whose environment has name=value (to find workers, and to prove none are left)."""
    needle = f"{name}={value}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ and state != "Z":
            found.append(int(entry))
    return found


def worker_pid(marker: str, rank: int, timeout: float = 30) -> int:
    """The training process of global `rank` in the run tagged with TEST_MARKER=marker."""

    def find() -> int | None:
        for pid in pids_with_env("TEST_MARKER", marker):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if f"RANK={rank}".encode() in environ and b"torch.distributed.run" not in cmdline \
                    and b"kubetrain.runtime.launch" not in cmdline:
                return pid
        return None

    return wait_for(find, f"a worker with RANK={rank}", timeout, 0.1)


def kill_9_after(run: Run, marker: str, predicate: Callable[[dict[str, Any]], bool],
                 rank: int = 1) -> tuple[int, str, str]:
    """SIGKILL the worker of `rank` once a metrics record satisfies `predicate`; then the run's outcome."""
    try:
        run.wait_for(predicate)
        os.kill(worker_pid(marker, rank), signal.SIGKILL)
        return run.finish()
    finally:
        run.kill()


def final_state(ckpt_dir: Path) -> dict[str, Any]:
    import torch

    newest = max(ckpt_dir.glob("step-*.pt"))
    return dict(torch.load(newest, map_location="cpu", weights_only=True))


def dumps(value: Any) -> str:
    return json.dumps(value, indent=1, default=str)
