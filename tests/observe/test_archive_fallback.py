"""`kubetrain logs NAME` / `kubetrain metrics NAME` find the archive from the job itself (the
kubetrain.dev/archive annotation `submit` puts on it) once its pods are gone, on the real control plane
(training-operator + kwok pods) with the archive in a real S3 server (moto); with the job gone, the error
names --archive, and --archive reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from click.testing import CliRunner, Result

from kubetrain.cli.main import cli
from kubetrain.metrics import format_metrics
from kubetrain.render.context import ARCHIVE_ANNOTATION
from tests.harness.helpers import get_job, wait_for
from tests.testenv.specs import write_spec

pytestmark = pytest.mark.controlplane

MASTER = ["master starting", format_metrics("train", rank=0, step=10, total_steps=20, epoch=1, loss=0.9,
                                            samples_per_s=100.0),
          format_metrics("train", rank=0, step=20, total_steps=20, epoch=1, loss=0.4, samples_per_s=120.0),
          format_metrics("eval", rank=0, step=20, epoch=1, eval_loss=0.5, eval_accuracy=0.8),
          "master done"]
WORKER = ["worker starting", "worker done"]


def archive(url: str, job: str, replica: str, lines: list[str], env: dict[str, str]) -> None:
    """What the wrapper in each pod writes (the same module, around a program printing `lines`)."""
    program = f"for line in {lines!r}: print(line)"
    subprocess.run([sys.executable, "-m", "kubetrain.observe.archive", "--url", url, "--job", job,
                    "--replica", replica, "--", sys.executable, "-c", program],
                   env=env, check=True, capture_output=True, timeout=120)


@pytest.fixture(autouse=True)
def empty_schema_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBETRAIN_CACHE_DIR", str(tmp_path / "cache"))


def test_logs_and_metrics_read_the_recorded_archive_when_the_pods_are_gone(
        controlplane: Any, namespace: str, s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = s3_server.bucket("kept") + "/runs"
    for key, value in s3_server.env().items():  # the CLI's s3fs finds the server as a user's would
        monkeypatch.setenv(key, value)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    archive(url, "kept", "master-0", MASTER, env)
    archive(url, "kept", "worker-0", WORKER, env)

    def kt(*args: str) -> Result:
        argv = [*args, "-n", namespace, "--kubeconfig", str(controlplane.kubeconfig)]
        return CliRunner().invoke(cli, argv, catch_exceptions=False)

    submitted = kt("submit", "-f", str(write_spec(tmp_path, "kept", nodes=2, gpus=1, archive=url)))
    assert submitted.exit_code == 0, submitted.stderr
    k8s = controlplane.api_client()
    assert get_job(k8s, namespace, "kept")["metadata"]["annotations"][ARCHIVE_ANNOTATION] == url
    core = kubernetes.client.CoreV1Api(k8s)
    pods = wait_for(lambda: (names := [p.metadata.name for p in core.list_namespaced_pod(namespace).items
                                       if p.status.phase == "Running"]) and len(names) == 2 and names,
                    "2 Running pods", interval=0.2)
    for pod in pods:
        controlplane.set_pod_phase(namespace, pod, "Succeeded")
    wait_for(lambda: any(c["type"] == "Succeeded" and c["status"] == "True"
                         for c in get_job(k8s, namespace, "kept").get("status", {}).get("conditions", [])),
             "the job Succeeded", interval=0.2)
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    wait_for(lambda: not core.list_namespaced_pod(namespace).items, "the pods gone", interval=0.2)

    logs = kt("logs", "kept")
    assert logs.exit_code == 0, logs.stderr
    assert logs.stdout.splitlines() == [f"[master-0] {line}" for line in MASTER] + [
        f"[worker-0] {line}" for line in WORKER]
    assert logs.stderr.splitlines() == [
        f"PyTorchJob kept has no pods left (state: Succeeded); reading its archive {url}"]
    assert kt("logs", "kept", "--replica", "worker", "--tail", "1").stdout == "[worker-0] worker done\n"
    followed = kt("logs", "kept", "-f", "--raw")  # -f on a finished job: the archive, then its end state
    assert followed.exit_code == 0, followed.stderr
    assert followed.stdout.splitlines()[-1] == "[worker-0] worker done"
    assert f"reading its archive {url}" in followed.stderr and "kept succeeded" in followed.stderr
    history = json.loads(kt("metrics", "kept", "-o", "json").stdout)
    assert [(r["kind"], r["step"]) for r in history["records"]] == [("train", 10), ("train", 20), ("eval", 20)]

    deleted = kt("delete", "kept", "--wait", "--timeout", "60")
    assert deleted.exit_code == 0, deleted.stderr
    gone = kt("logs", "kept")
    assert gone.exit_code != 0 and "Traceback" not in gone.stderr
    assert gone.stderr.strip().endswith("if it had spec.archive, read that: --archive URL")
    again = kt("metrics", "kept", "--archive", url, "-o", "csv")
    assert again.exit_code == 0, again.stderr
    assert len(again.stdout.splitlines()) == 1 + 3
    assert f"no PyTorchJob named kept in namespace {namespace}" in again.stderr
    assert f"reading its archive {url}" in again.stderr
