"""The controller's pure parts: work queue, desired child, mirrored status, progress from log lines."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kubetrain.cli.common import render_loaded
from kubetrain.controller import mirror
from kubetrain.controller.handoff import code_volume, training_job
from kubetrain.controller.progress import progress_of
from kubetrain.controller.queue import WorkQueue
from kubetrain.controller.reconcile import CODE_ANNOTATION, desired, owner_name, spec_data
from kubetrain.errors import SpecError
from kubetrain.metrics import format_metrics
from kubetrain.spec.load import load_spec, parse_spec


def tj(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "mnist", "namespace": "ml", "uid": "u-1", "generation": 3, "resourceVersion": "9",
                         "managedFields": [{}], **meta}, "spec": spec}


GOOD = {"image": "ghcr.io/acme/t:1", "command": ["python", "t.py"], "nodes": 2}


def test_queue_dedups_and_requeues_a_key_that_changed_while_processed() -> None:
    queue = WorkQueue()
    queue.add("a")
    queue.add("a")
    assert queue.get(0) == "a" and queue.get(0) is None
    queue.add("a")  # changed while being reconciled
    queue.done("a")
    assert queue.get(0) == "a"


def test_queue_backs_off_per_key_without_blocking_others() -> None:
    queue = WorkQueue(base=0.2, cap=1.0)
    assert queue.retry("bad") == pytest.approx(0.2)
    queue.add("good")
    assert queue.get(0) == "good"
    began = time.monotonic()
    assert queue.get(2) == "bad" and time.monotonic() - began >= 0.15
    queue.done("bad")
    assert queue.retry("bad") == pytest.approx(0.4)
    queue.forget("bad")
    assert queue.retry("bad") == pytest.approx(0.2)


def test_desired_child_is_the_clis_render_with_a_controller_owner() -> None:
    want = desired(tj(GOOD, annotations={"kubectl.kubernetes.io/last-applied-configuration": "{}"}),
                   ["pytorchjob", "trainjob"])
    assert not want.problems and want.target == "pytorchjob"
    child = want.child
    assert child is not None and child["kind"] == "PyTorchJob" and child["metadata"]["namespace"] == "ml"
    ref = child["metadata"]["ownerReferences"][0]
    assert ref == {"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob", "name": "mnist", "uid": "u-1",
                   "controller": True, "blockOwnerDeletion": True}
    assert owner_name(child) == "mnist"
    assert "kubectl.kubernetes.io/last-applied-configuration" not in str(child)


def test_invalid_object_gets_the_clis_messages() -> None:
    bad = {**GOOD, "nodes": 0, "resources": {"mem": "1Gi"}}
    with pytest.raises(SpecError) as cli:
        parse_spec(__import__("yaml").safe_dump(spec_data(tj(bad))), "")
    want = desired(tj(bad), ["pytorchjob"])
    assert want.child is None and want.problems == cli.value.lines()
    assert "spec.nodes: must be >= 1" in want.problems
    assert any("did you mean 'memory'" in p for p in want.problems)


def test_local_code_path_is_refused_and_unserved_target_reported() -> None:
    want = desired(tj({**GOOD, "code": {"path": "./src"}}), ["pytorchjob"])
    assert want.child is None and want.problems[0].startswith("spec.code.path: './src': a local directory")
    want = desired(tj({**GOOD, "code": {"path": "./src"}}, annotations={CODE_ANNOTATION: "{}"}), ["pytorchjob"],
                   lambda ns, name: None)
    assert want.problems[0].startswith("spec.code.path: './src': a local directory")
    want = desired(tj({**GOOD, "target": "trainjob"}), ["pytorchjob"])
    assert want.problems == ["spec.target: trainjob: the cluster does not serve it (install its operator)"]


def test_uploaded_code_configmap_is_mounted_like_a_direct_submit(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('hi')\n")
    spec = tmp_path / "kubetrain.yaml"
    spec.write_text(__import__("yaml").safe_dump(spec_data(tj({**GOOD, "code": {"path": "./src"}}))))
    loaded = load_spec(str(spec))
    rendered = render_loaded(loaded, namespace="ml")
    body = training_job(loaded, "ml", rendered)
    configmap = rendered[0]
    obj = tj(body["spec"], annotations=body["metadata"]["annotations"])
    want = desired(obj, ["pytorchjob"], lambda ns, name: configmap if name == configmap["metadata"]["name"] else None)
    assert not want.problems
    assert code_volume(want.child) == code_volume(rendered[-1])  # the same mount as a direct submit
    assert want.spec_hash == rendered[-1]["metadata"]["annotations"]["kubetrain.dev/spec-hash"]
    tampered = {**configmap, "data": {"train.py": "print('evil')\n"}}
    assert "does not hold the files" in desired(obj, ["pytorchjob"], lambda ns, name: tampered).problems[0]
    assert "not found" in desired(obj, ["pytorchjob"], lambda ns, name: None).problems[0]


def _child(conditions: list[dict[str, str]], **status: Any) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "mnist", "namespace": "ml", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"conditions": conditions, **status}}


def test_status_mirrors_the_child_through_success() -> None:
    obj = tj(GOOD)
    want = desired(obj, ["pytorchjob"])
    done = _child([{"type": "Running", "status": "False"},
                   {"type": "Succeeded", "status": "True", "message": "PyTorchJob mnist is successfully completed.",
                    "lastTransitionTime": "2026-01-01T00:05:00Z"}],
                  replicaStatuses={"Master": {"succeeded": 1}}, startTime="2026-01-01T00:00:01Z",
                  completionTime="2026-01-01T00:05:00Z")
    status = mirror.status_for(obj, want, done, [])
    assert status["phase"] == "Succeeded" and status["observedGeneration"] == 3
    assert status["replicas"] == {"Master": {"active": 0, "succeeded": 1, "failed": 0}}
    assert status["completionTime"] == "2026-01-01T00:05:00Z"
    assert status["children"] == [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "mnist"}]
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["Valid"]["status"] == "True" and conds["Succeeded"]["status"] == "True"
    assert conds["Succeeded"]["message"] == "PyTorchJob mnist is successfully completed."
    again = mirror.status_for({**obj, "status": status}, want, done, [])
    assert again == status  # unchanged → no write
    assert mirror.transitions({"phase": "Running"}, status)[0][:2] == ("Normal", "Succeeded")


def test_kueue_queue_adds_queued_and_admitted() -> None:
    obj = tj({**GOOD, "scheduling": {"queue": "team-a"}})
    want = desired(obj, ["pytorchjob"])
    suspended = _child([{"type": "Suspended", "status": "True"}])
    conds = {c["type"]: c["status"] for c in mirror.status_for(obj, want, suspended, [])["conditions"]}
    assert conds["Queued"] == "True" and conds["Admitted"] == "False"


def test_progress_from_the_log_tail() -> None:
    lines = ["noise", format_metrics("train", rank=0, step=10, total_steps=100, loss=0.5, samples_per_s=100.0,
                                     time=1000.0),
             format_metrics("eval", rank=0, step=10, eval_loss=0.4, eval_accuracy=0.91, time=1001.0),
             format_metrics("train", rank=0, step=20, total_steps=100, loss=0.25, samples_per_s=120.0, time=1010.0)]
    progress = progress_of(lines)
    assert progress is not None
    assert progress["stepText"] == "20/100" and progress["loss"] == "0.2500" and progress["eta"] == "1m20s"
    assert progress["evalAccuracy"] == 0.91 and progress["samplesPerSecond"] == 120.0
    assert progress_of(["no metrics here"]) is None
