"""The tracked run's page in the TrainingJob's status: read from rank 0's `tracking` metrics record, kept once the
record has left the log's tail, shown by `status` and `list -o wide` (through kubetrain.jobs.status)."""

from __future__ import annotations

from typing import Any

import pytest

from kubetrain.controller import kube, statusprogress
from kubetrain.controller.statusmodel import TrainingJobStatus
from kubetrain.jobs.status import run_links, tracked_runs, tracks
from kubetrain.metrics import format_metrics

MLFLOW = "http://mlflow.mlflow:5000/#/experiments/3/runs/0a1b"
WANDB = "https://wandb.ai/acme/digits/runs/5e6f"


def job(status: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "digits", "namespace": "ml"}, "status": {"target": "pytorchjob", **status}}


def polled(monkeypatch: pytest.MonkeyPatch, obj: dict[str, Any], lines: list[str]) -> list[dict[str, Any]]:
    """The status patches one poll of the job sends, given the tail of rank 0's log."""
    patches: list[dict[str, Any]] = []
    monkeypatch.setattr(statusprogress, "read_tail", lambda *_args: lines)
    monkeypatch.setattr(kube, "patch_status", lambda _api, _ns, _name, patch: patches.append(patch))
    statusprogress.poll_job(object(), obj, 200)  # type: ignore[arg-type]
    return patches


def train(step: int) -> str:
    return "[master-0] " + format_metrics("train", rank=0, step=step, total_steps=100, loss=0.5)


def test_the_runs_page_is_patched_in_and_kept_when_the_record_leaves_the_tail(
        monkeypatch: pytest.MonkeyPatch) -> None:
    announced = format_metrics("tracking", rank=0, runs={"wandb": WANDB, "mlflow": MLFLOW})
    (patch,) = polled(monkeypatch, job({"phase": "Running"}), [announced, train(20)])
    assert patch["tracking"] == {"runURL": MLFLOW, "runs": {"mlflow": MLFLOW, "wandb": WANDB}}
    status = {"phase": "Running", **patch}
    TrainingJobStatus.model_validate(status)  # the CRD's status schema has it

    (later,) = polled(monkeypatch, job(status), [train(40)])  # the record is no longer in the tail
    assert "tracking" not in later and later["progress"]["step"] == 40  # a merge patch keeps status.tracking
    assert polled(monkeypatch, job(status), [announced, train(20)]) == []  # nothing new: no patch


def test_a_job_without_a_trainingjob_finds_its_runs_in_rank_0s_log() -> None:
    pod_env = {"spec": {"pytorchReplicaSpecs": {"Master": {"template": {"spec": {"containers": [
        {"name": "pytorch", "env": [{"name": "KUBETRAIN_TRACKING", "value": "{}"}]}]}}}}}}
    assert tracks(pod_env) and not tracks({"spec": {"env": [{"name": "OTHER", "value": "1"}]}})
    head = [train(1), format_metrics("tracking", rank=0, runs={"mlflow": MLFLOW})]
    assert tracked_runs(head) == {"runs": {"mlflow": MLFLOW}}
    assert tracked_runs([train(1)]) is None


class ListingApi:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.paths: list[str] = []

    def get(self, path: str) -> dict[str, Any]:
        self.paths.append(path)
        return {"items": self.items}


def test_list_wide_maps_each_trainingjob_to_its_runs_page() -> None:
    api = ListingApi([job({"tracking": {"runURL": MLFLOW, "runs": {"mlflow": MLFLOW}}}),
                      {**job({}), "metadata": {"name": "untracked", "namespace": "ml"}}])
    assert run_links(api, "ml") == {("ml", "digits"): MLFLOW}  # type: ignore[arg-type]
    assert api.paths == ["/apis/kubetrain.dev/v1alpha1/namespaces/ml/trainingjobs"]
