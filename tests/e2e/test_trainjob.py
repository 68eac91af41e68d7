"""Scenario b on the real node: the digits job as a Kubeflow Trainer v2 TrainJob, through the real Trainer
controller and JobSet (the `trainer` fixture), driven through the CLI. The job also sets `spec.archive` (a
directory on its claim) and its logs and metrics are read back from there after its pods are gone:
folded into this job, which runs anyway.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.testenv import kueue as kueue_harness
from tests.testenv import node as real

from .conftest import Cli
from .test_digits import ACCURACY, _metrics

pytestmark = [pytest.mark.slow, pytest.mark.torch]
NAME = "digits-tj"


def _spec(project: Path) -> Path:
    spec = yaml.safe_load((project / "kubetrain.yaml").read_text())
    spec["metadata"]["name"] = NAME
    spec["spec"]["target"] = "trainjob"
    spec["spec"]["checkpoint"]["dir"] = f"/ckpt/{NAME}"
    # Every replica's log and rank 0's metrics, written by the archive wrapper while the job runs.
    spec["spec"]["archive"] = "/ckpt/archive"
    path = project / f"{NAME}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_trainjob_trains_digits_through_trainer_and_jobset(cli: Cli, image: str, project: Path, namespace: str,
                                                          claim: Path, trainer: Any) -> None:
    """b: submit --follow → Succeeded; accuracy from `logs`; status, delete; then logs/metrics from the archive."""
    run = cli("submit", "-f", str(_spec(project)), "-n", namespace, "--image", image, "--follow",
              "--timeout", "900", timeout=960)
    assert "Succeeded" in run.stderr.splitlines()[-1], run.stderr[-2000:]
    logged = cli("logs", NAME, "-n", namespace).stdout
    evals = _metrics(logged, "eval")
    assert evals and float(str(evals[-1]["eval_accuracy"])) >= ACCURACY, logged[-2000:]
    # torchrun formed the 2-process group from the PET_* variables Trainer v2 injects.
    assert [r["world_size"] for r in _metrics(logged, "start")] == [2], logged[:2000]
    assert sorted((claim / NAME).glob("step-*.pt")), "no checkpoint in the claim's directory"

    status = cli("status", NAME, "-n", namespace)
    assert f"{namespace}/{NAME}: Succeeded" in status.stdout, status.stdout
    assert "trainjob" in status.stdout.lower(), status.stdout
    assert status.stdout.count(real.NODE_NAME) >= 2, status.stdout  # both JobSet pods ran on the real node
    cli("delete", NAME, "-n", namespace, "--wait", "--timeout", "120")
    assert cli("status", NAME, "-n", namespace, check=False).returncode != 0

    _check_archive(cli, namespace, claim / "archive", logged)


def by_replica(text: str) -> dict[str, list[str]]:
    """Each replica's lines, in order, by their `[node-N]` prefix."""
    lines: dict[str, list[str]] = {}
    for line in text.splitlines():
        lines.setdefault(line.partition("] ")[0], []).append(line)
    return lines


def _check_archive(cli: Cli, namespace: str, archive: Path, logged: str) -> None:
    """After the job and its pods are gone: both replicas' logs and rank 0's metrics, from the archive."""
    # Both replicas' wrappers ran, under the names `kubetrain logs` gives them (not JobSet's host names).
    replicas = sorted(p.name for p in (archive / NAME / "logs").iterdir())
    assert replicas == ["node-0", "node-1"], replicas
    logs = cli("logs", NAME, "-n", namespace, "--archive", str(archive))
    assert f"reading its archive {archive}" in logs.stderr, logs.stderr
    # Everything the pods printed, line for line, as `logs` showed it. The archive has no timestamps: it gives
    # replica after replica, where `logs` merged them in time (the worker printed torch's warnings while the
    # master's name did not resolve yet, on a busy machine).
    assert by_replica(logs.stdout) == by_replica(logged), (logs.stdout[-1500:], logged[-1500:])
    archived_evals = _metrics(logs.stdout, "eval")
    metrics = cli("metrics", NAME, "-n", namespace, "--archive", str(archive), "-o", "json")
    assert "reading its archive" in metrics.stderr, metrics.stderr
    records = json.loads(metrics.stdout)["records"]
    assert [r for r in records if r.get("kind") == "eval"] == archived_evals, metrics.stdout[-1500:]


def test_trainjob_under_kueue_trains_on_the_real_node(cli: Cli, image: str, project: Path, namespace: str,
                                                     claim: Path, kueue: Any) -> None:
    """A TrainJob in a Kueue LocalQueue: admitted, unsuspended, its JobSet's pods created and run on the real
    node, training Succeeded (Kueue 0.19.2 + Trainer 2.3.0 + JobSet 0.12.0; docs/queues.md says why the pod
    grace period is not in kubetrain's runtime patch under a queue). One epoch: that it trained is the
    outcome here; the TrainJob above keeps the full run to the example's accuracy."""
    kueue.queues.add_local_queues(namespace)
    spec = yaml.safe_load((project / "kubetrain.yaml").read_text())
    spec["metadata"]["name"] = "digits-kq"
    spec["spec"].update(target="trainjob", scheduling={"queue": kueue_harness.CPU_QUEUE})
    spec["spec"]["checkpoint"]["dir"] = "/ckpt/digits-kq"
    spec["spec"]["train"]["epochs"] = 1
    path = project / "digits-kq.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    run = cli("submit", "-f", str(path), "-n", namespace, "--image", image, "--follow", "--timeout", "900",
              timeout=960)
    assert "✓ queue: LocalQueue cpu → ClusterQueue cpu" in run.stderr, run.stderr[-3000:]
    assert "Succeeded" in run.stderr.splitlines()[-1], run.stderr[-3000:]
    logged = cli("logs", "digits-kq", "-n", namespace).stdout
    assert [r["world_size"] for r in _metrics(logged, "start")] == [2], logged[:2000]
    assert [r["epoch"] for r in _metrics(logged, "eval")] == [1], logged[-2000:]
    status = cli("status", "digits-kq", "-n", namespace).stdout
    assert f"{namespace}/digits-kq: Succeeded" in status and status.count(real.NODE_NAME) >= 2, status
    assert sorted((claim / "digits-kq").glob("step-*.pt")), "no checkpoint in the claim's directory"
