"""`kubetrain logs -f` through the renderer, on the real control plane (kwok pods serving metrics lines)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import kubernetes
import pytest
from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.metrics import format_metrics
from tests.harness.helpers import pytorchjob, server_side_apply, wait_for
from tests.testenv.logfixtures import cri, now_stamp, serve_logs

pytestmark = pytest.mark.controlplane


def run(*argv: str) -> Any:
    return CliRunner().invoke(cli, list(argv), catch_exceptions=False)


def metrics_log() -> list[str]:
    later = time.time() + 30  # the job is created after this log is written: its training starts later
    lines = ["loading data", format_metrics("start", rank=0, world_size=1, total_steps=40, time=later)]
    lines += [format_metrics("train", rank=0, step=step, total_steps=40, epoch=1 + step // 20, loss=2.0 / step,
                             samples_per_s=512.0, lr=0.01, time=later + step) for step in range(4, 44, 4)]
    lines.append(format_metrics("eval", rank=0, step=40, epoch=2, eval_loss=0.25, eval_accuracy=0.93, samples=100))
    lines.append(format_metrics("end", rank=0, status="completed", step=40, epoch=2))
    return lines


def test_follow_renders_progress_and_summary(controlplane, namespace, k8s, tmp_path) -> None:
    path = tmp_path / "master.log"
    path.write_text(cri([(now_stamp(), line) for line in metrics_log()]))
    serve_logs(k8s, namespace, "obs-master-0", path)
    server_side_apply(k8s, pytorchjob("obs", namespace, workers=0, gpus=0))
    core = kubernetes.client.CoreV1Api(k8s)
    wait_for(lambda: [p.status.phase for p in core.list_namespaced_pod(namespace).items] == ["Running"],
             "master Running", interval=0.1)
    kc = ("--kubeconfig", str(controlplane.kubeconfig), "-n", namespace)
    wait_for(lambda: "loading data" in run("logs", "obs", *kc).stdout, "kwok serving the logs", interval=0.1)
    raw = run("logs", "obs", *kc)
    assert raw.stdout.count("KUBETRAIN_METRICS") == 13  # without -f: the log as it is (data)
    history = json.loads(run("metrics", "obs", "-o", "json", *kc).stdout)
    assert [r["kind"] for r in history["records"]] == ["start"] + ["train"] * 10 + ["eval", "end"]

    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.update(result=run("logs", "obs", "-f", "--timeout", "90", *kc)),
                              daemon=True)
    thread.start()
    wait_for(lambda: core.read_namespaced_pod("obs-master-0", namespace).status.phase == "Running", "running")
    controlplane.set_pod_phase(namespace, "obs-master-0", "Succeeded")
    thread.join(90)
    followed = outcome["result"]
    assert followed.exit_code == 0, followed.stdout + followed.stderr
    assert followed.stdout == "[master-0] loading data\n"  # metrics lines became progress, not stdout
    progress = [line for line in followed.stderr.splitlines() if line.startswith("progress: ")]
    assert len(progress) == 2, followed.stderr  # the first metrics line and the final state: a bounded rate
    assert progress[-1].startswith("progress: step 40/40 (100%) · epoch 3 · loss ")
    assert "eval acc 0.9300" in progress[-1] and "training completed" in progress[-1]
    assert "training summary" in followed.stderr and "accuracy 0.9300" in followed.stderr
    status = run("status", "obs", *kc)
    print(status.stdout)  # shown with pytest -s (docs/observability.md quotes it)
    timeline = status.stdout.split("Timeline: ", 1)[1]
    assert timeline.startswith("submitted → scheduled +") and " → started +" in timeline, timeline
    assert " → first step +4.0s" in timeline  # the first train record, 4 s after the start record
