"""How a local run ends: a success is exit 0 with no stack trace from any node, also when one node is slow
to close the rendezvous; a failure ends with one line per failed rank and where its log is, then the ending
with its cause (a full disk, a signal), the first failing rank, its node and that rank's last log lines."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.runtime.helpers import KUBETRAIN, REPO, quiet_env
from tests.runtime.torchmod import require_torch

require_torch()
pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(240)]

TRAIN = """
import os, sys
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
if os.environ.get("FAIL_RANK") == os.environ["RANK"]:
    sys.exit("bad config: lr must be positive")
if os.environ.get("FULL_RANK") == os.environ["RANK"]:
    print("saving checkpoint", flush=True)
    with open(os.path.join(os.environ["FULL_DIR"], "checkpoint.pt"), "wb") as handle:
        handle.write(bytes(1 << 20))
if os.environ.get("KILLED_RANK") == os.environ["RANK"]:
    print("step 3 loss 0.5", flush=True)
    os.kill(os.getpid(), 9)
print("done", os.environ["RANK"], flush=True)
"""
# Node 2's agent closes the rendezvous 1.5 s late, as on a loaded machine: with the store hosted by node
# 1's agent, which exits as soon as the exit barrier is passed, node 2 then lost the store mid-shutdown.
SLOW_NODE = """
import os, time
if os.environ.get("KUBETRAIN_NODE") == "2":
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous
    original = dynamic_rendezvous.DynamicRendezvousHandler.shutdown
    def shutdown(self):
        time.sleep(1.5)
        return original(self)
    dynamic_rendezvous.DynamicRendezvousHandler.shutdown = shutdown
"""
STACK_TRACES = ("Traceback", "recvVector", "sendBytes failed", "RendezvousConnectionError", "frame #")


def job(tmp_path: Path) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(TRAIN)
    spec = {"image": "example.com/test:1", "nodes": 2, "procsPerNode": 1, "command": ["python", "train.py"],
            "code": {"path": "code"}}
    path = tmp_path / "kubetrain.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob",
                                    "metadata": {"name": "ending"}, "spec": spec}))
    return path


def run(tmp_path: Path, args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """`kubetrain run` with a temporary directory of its own, which it must leave as it found it, whatever the
    ending (torchrun kept a copy of every rank's output in a torchelastic_* directory of it, per run)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    result = subprocess.run([*KUBETRAIN, "run", *args], env=quiet_env(TMPDIR=str(tmp), **env), cwd=REPO,
                            capture_output=True, text=True, timeout=180, check=False)
    assert sorted(path.name for path in tmp.iterdir()) == [], result.stdout + result.stderr
    return result


@pytest.mark.parametrize("attempt", range(3))
def test_a_successful_two_node_run_ends_without_a_stack_trace(tmp_path: Path, attempt: int) -> None:
    (tmp_path / "slow").mkdir()
    (tmp_path / "slow" / "sitecustomize.py").write_text(SLOW_NODE)
    result = run(tmp_path, ["-f", str(job(tmp_path))], PYTHONPATH=str(tmp_path / "slow"))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert sorted(line for line in result.stdout.splitlines() if "done" in line) == [
        "[node-1 rank-0] done 0", "[node-2 rank-1] done 1"]
    assert [marker for marker in STACK_TRACES if marker in output] == [], output
    assert "leftover" not in result.stderr  # the store's process ends on its own once every agent has exited


def test_a_failed_run_ends_with_one_line_per_failed_rank_and_its_log(tmp_path: Path) -> None:
    result = run(tmp_path, ["-f", str(job(tmp_path)), "--log-dir", str(tmp_path / "logs")], FAIL_RANK="1")
    assert result.returncode == 1, result.stdout + result.stderr
    prefix = "kubetrain run: node-2 rank 1 exited with 1; log: "
    summary = next((line for line in result.stderr.splitlines() if line.startswith(prefix)), "")
    assert summary, result.stderr
    log = Path(summary.removeprefix(prefix))
    assert log.is_relative_to(tmp_path / "logs" / "node-2")
    assert "bad config: lr must be positive" in log.read_text()
    assert [line for line in result.stderr.splitlines() if "rank 1 exited with" in line] == [summary]
    assert f"[node-2] kubetrain.runtime.launch: rank 1 exited with 1; log: {log}" in result.stdout


def ending_block(stderr: str) -> tuple[str, list[str]]:
    """The ending line (`kubetrain run: ending exited with ...`) and the indented lines after it, which must
    close stderr."""
    lines = stderr.splitlines()
    start = max((i for i, line in enumerate(lines) if line.startswith("kubetrain run: ending ")), default=None)
    assert start is not None, stderr
    tail = lines[start + 1:]
    assert tail and all(line.startswith("    ") for line in tail), stderr
    return lines[start], [line.strip() for line in tail]


def test_a_full_disk_ends_naming_enospc_the_rank_its_node_and_its_last_lines(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("mounting a tiny tmpfs needs root, and CI must run this test")
        pytest.skip("mounting a tiny tmpfs (a full disk) needs root")
    full = tmp_path / "full"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True)
    try:
        result = run(tmp_path, ["-f", str(job(tmp_path))], FULL_RANK="1", FULL_DIR=str(full))
    finally:
        subprocess.run(["umount", str(full)], check=True)
    assert result.returncode == 1, result.stdout + result.stderr
    line, tail = ending_block(result.stderr)
    assert "ENOSPC" in line and "node-2 rank 1" in line, line
    assert "OSError: [Errno 28] No space left on device" in tail, tail
    assert len(tail) <= 10, tail


def test_a_rank_killed_by_sigkill_ends_naming_the_signal_and_the_rank(tmp_path: Path) -> None:
    result = run(tmp_path, ["-f", str(job(tmp_path))], KILLED_RANK="1")
    assert result.returncode == 137, result.stdout + result.stderr
    line, tail = ending_block(result.stderr)
    assert "node-2 rank 1" in line and "killed by SIGKILL" in line and "out of memory" in line, line
    assert tail[-1] == "step 3 loss 0.5", tail
