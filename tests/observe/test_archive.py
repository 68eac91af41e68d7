"""spec.archive: the wrapper writes parts to a real S3 server (moto, own process) while the command runs,
flushes on SIGTERM; `logs` / `metrics` fall back to the archive when the job is gone (real control plane)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.metrics import format_metrics
from kubetrain.observe.archive import NodeArchive, archived_replicas, replica_name
from tests.harness.helpers import wait_for

PROGRAM = f"""
import signal, sys, time
def stop(signum, frame):
    print("stopping: checkpoint written", flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
print("hello from rank 0", flush=True)
print({format_metrics("train", rank=0, step=1, total_steps=10, epoch=1, loss=0.5, samples_per_s=9.0)!r}, flush=True)
print("epoch 1 done", file=sys.stderr, flush=True)
time.sleep(120)
"""


def stored(fs: Any, base: str) -> bytes:
    """Every part under `base` so far; before the first, s3fs takes `base` for a key and GET fails (404)."""
    try:
        return b"".join(fs.cat_file(p) for p in fs.find(base, refresh=True))
    except FileNotFoundError:
        return b""


def run(*argv: str) -> Any:
    return CliRunner().invoke(cli, list(argv), catch_exceptions=False)


def test_wrapper_archives_while_running_and_on_sigterm(s3_server: Any, controlplane: Any, namespace: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    url = s3_server.bucket("arch") + "/runs"
    env = {**os.environ, **s3_server.env(), "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "kubetrain.observe.archive", "--url", url, "--job", "j1", "--replica", "master-0",
            "--flush-seconds", "0.5", "--", sys.executable, "-c", PROGRAM]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        fs = s3_server.filesystem()
        base = url.removeprefix("s3://") + "/j1/logs/master-0"
        # while the program runs (it sleeps for 2 minutes), its lines are already in the store
        wait_for(lambda: b"epoch 1 done" in stored(fs, base),
                 f"a part in S3 (wrapper output: {proc.stderr if proc.poll() is None else proc.communicate()})",
                 timeout=60)
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143
    assert out.splitlines()[0] == "hello from rank 0"  # passed through: kubectl logs still works

    # no job j1 on the cluster: logs and metrics say so and read the archive (the CLI's fsspec finds the
    # S3 server through the AWS_* variables, as a user's would)
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    kc = ("--kubeconfig", str(controlplane.kubeconfig), "-n", namespace)
    logs = run("logs", "j1", "--archive", url, *kc)
    assert logs.exit_code == 0, logs.output
    lines = logs.stdout.splitlines()
    assert lines[0] == "[master-0] hello from rank 0" and lines[1].startswith("[master-0] KUBETRAIN_METRICS {")
    assert lines[2:] == ["[master-0] epoch 1 done", "[master-0] stopping: checkpoint written"]
    assert "no PyTorchJob" in logs.stderr and f"reading its archive {url}" in logs.stderr
    history = json.loads(run("metrics", "j1", "--archive", url, "-o", "json", *kc).stdout)
    assert [r["kind"] for r in history["records"]] == ["train"]
    missing = run("logs", "nope", "--archive", url, *kc)
    assert missing.exit_code != 0 and "no archived logs of nope" in missing.stderr


def test_local_run_archive_one_log_per_node(tmp_path: Path) -> None:
    seen: list[str] = []
    archive = NodeArchive(str(tmp_path / "archive"), "job", seen.append)
    for line in ("[node-1 rank-0] a", "[node-2 rank-1] b", "[node-1] agent says", "[node-1 rank-0] c"):
        archive.line(line)
    archive.close()
    assert seen == ["[node-1 rank-0] a", "[node-2 rank-1] b", "[node-1] agent says", "[node-1 rank-0] c"]
    assert [(r, list(lines)) for r, lines in archived_replicas(str(tmp_path / "archive"), "job")] == [
        ("node-1", ["[node-1 rank-0] a", "[node-1] agent says", "[node-1 rank-0] c"]),
        ("node-2", ["[node-2 rank-1] b"])]


def test_replica_names_match_the_labels_of_kubetrain_logs() -> None:
    assert replica_name("j1-master-0", "j1", None) == "master-0"
    assert replica_name("j1-worker-3", "j1", None) == "worker-3"
    # JobSet host names <job>-<replicatedJob>-<jobIndex>-<podIndex>; the Job injects JOB_COMPLETION_INDEX
    assert replica_name("tj-node-0-1", "tj", "1") == "node-1"
    assert replica_name("tj-node-2-0", "tj", "0") == "node-2-0"
    assert replica_name("other-host", "tj", "0") == "other-host"
