"""The controller's pure parts: work queue, desired child, mirrored status, progress from log lines."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kubetrain.cli.common import render_loaded
from kubetrain.controller import mirror
from kubetrain.controller.handoff import code_volume, training_job
from kubetrain.controller.queue import WorkQueue
from kubetrain.controller.reconcile import CODE_ANNOTATION, checkpoint_dir_of, desired, owner_name, spec_data
from kubetrain.controller.statusmodel import TrainingJobStatus
from kubetrain.controller.statusprogress import progress_of
from kubetrain.errors import SpecError
from kubetrain.jobspec.load import load_spec, parse_spec
from kubetrain.metrics import format_metrics


def tj(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "mnist", "namespace": "ml", "uid": "u-1", "generation": 3, "resourceVersion": "9",
                         "managedFields": [{}], **meta}, "spec": spec}


GOOD = {"image": "ghcr.io/acme/t:1", "command": ["python", "t.py"], "nodes": 2}
ON_A_VOLUME = {**GOOD, "volumes": [{"name": "ckpt", "claim": "ckpt", "mountPath": "/ckpt"}]}


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


def test_desired_refuses_dra_gpus_the_controller_cannot_create() -> None:
    want = desired(tj({**GOOD, "gpusPerNode": 1, "gpus": {"via": "dra"}}), ["pytorchjob"])
    assert want.child is None
    assert want.problems == ["spec.gpus.via: dra is not supported by the kubetrain controller yet; submit the job "
                             "directly (kubetrain submit without --controller)"]


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


def test_checkpoint_directory_per_update_policy() -> None:
    job = desired(tj({**ON_A_VOLUME, "checkpoint": {"dir": "/ckpt/j/"}}), ["pytorchjob"]).job
    assert checkpoint_dir_of(job, None) == "/ckpt/j/"  # the first child: spec.checkpoint.dir as written
    assert checkpoint_dir_of(job, "/ckpt/j/", "recreate", "abc") == "/ckpt/j/run-abc"  # a fresh start
    assert checkpoint_dir_of(job, "/ckpt/j/run-abc", "continue", "def") == "/ckpt/j/run-abc"  # resumes there
    assert checkpoint_dir_of(job, "/ckpt/j/run-abc") == "/ckpt/j/run-abc"
    assert checkpoint_dir_of(job, "/elsewhere") == "/ckpt/j/"  # the user moved spec.checkpoint.dir
    assert checkpoint_dir_of(desired(tj(GOOD), ["pytorchjob"]).job, "/ckpt/j", "recreate", "abc") is None
    # The override reaches the pods' runtime config, and the spec hash does not move with it.
    plain = desired(tj({**ON_A_VOLUME, "checkpoint": {"dir": "/ckpt/j"}}), ["pytorchjob"])
    moved = desired(tj({**ON_A_VOLUME, "checkpoint": {"dir": "/ckpt/j"}}), ["pytorchjob"],
                    current_dir="/ckpt/j/run-abc")
    assert plain.spec_hash == moved.spec_hash and '"dir":"/ckpt/j/run-abc"' in str(moved.child)


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


def test_every_status_the_controller_writes_validates_against_the_status_model() -> None:
    """The status is written as a merge patch and the API server prunes what the CRD's schema (generated from
    TrainingJobStatus) does not know: a field the model lacks would vanish silently. So every status the
    controller computes must validate against the model itself (extra fields forbidden)."""
    good = desired(tj(GOOD), ["pytorchjob"])
    queued = desired(tj({**GOOD, "scheduling": {"queue": "team-a"}}), ["pytorchjob"])
    invalid = tj({**GOOD, "command": []})
    running = _child([{"type": "Running", "status": "True", "lastTransitionTime": "2026-01-01T00:01:00Z"}],
                     replicaStatuses={"Master": {"active": 1}, "Worker": {"active": 1}},
                     startTime="2026-01-01T00:00:01Z")
    failed = _child([{"type": "Failed", "status": "True", "message": "OOMKilled",
                      "lastTransitionTime": "2026-01-01T00:02:00Z"}], replicaStatuses={"Master": {"failed": 1}})
    trainjob = {**_child([{"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T00:03:00Z"}],
                         jobsStatus=[{"name": "node", "succeeded": 2}]), "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob"}
    cases = {"pending": (tj(GOOD), good, None), "running": (tj(GOOD), good, running),
             "failed": (tj(GOOD), good, failed), "trainjob": (tj(GOOD), good, trainjob),
             "queued": (tj(GOOD), queued, _child([{"type": "Suspended", "status": "True"}])),
             "invalid": (invalid, desired(invalid, ["pytorchjob"]), None),
             "with progress": ({**tj(GOOD), "status": {"progress": {"step": 3, "stepText": "3/10"}}}, good, running)}
    phases = {}
    for name, (obj, want, child) in cases.items():
        status = mirror.status_for(obj, want, child, [])
        TrainingJobStatus.model_validate(status)  # raises, naming the field, on anything the model lacks
        phases[name] = status["phase"]
    assert phases == {"pending": "Pending", "running": "Running", "failed": "Failed", "trainjob": "Succeeded",
                      "queued": "Suspended", "invalid": "Invalid", "with progress": "Running"}


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


def _workload(name: str, uid: str, created: str, conditions: list[dict[str, Any]], **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": f"pytorchjob-{name}", "namespace": "ml", "creationTimestamp": created,
                         "labels": {"kueue.x-k8s.io/job-uid": uid},
                         "ownerReferences": [{"kind": "PyTorchJob", "name": name, "controller": True}]},
            "spec": {"queueName": "team-a"}, "status": {"conditions": conditions, **status}}


def test_kueue_workload_states_become_queued_and_admitted_with_the_clis_hint() -> None:
    from kubetrain.controller import kueue

    insufficient = {"type": "QuotaReserved", "status": "False", "reason": "Pending",
                    "message": "insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed"}
    ahead = _workload("a", "uid-a", "2026-01-01T00:00:00Z", [insufficient])
    mine = _workload("b", "uid-b", "2026-01-01T00:00:05Z", [insufficient])
    done = _workload("c", "uid-c", "2026-01-01T00:00:09Z", [{"type": "Admitted", "status": "True"}],
                     admission={"clusterQueue": "cq"})
    child = {"kind": "PyTorchJob", "metadata": {"name": "b", "namespace": "ml", "uid": "uid-b",
                                                "labels": {"kueue.x-k8s.io/queue-name": "team-a"}}}
    queued, admitted = kueue.conditions("team-a", child, [ahead, mine, done])
    assert (queued["status"], queued["reason"], admitted["status"]) == ("True", "Pending", "False")
    assert queued["message"] == ("Kueue: pending in LocalQueue team-a, position 2: insufficient unused quota for "
                                 "nvidia.com/gpu in flavor h100, 8 more needed")
    admitted_child = {**child, "metadata": {**child["metadata"], "uid": "uid-c"}}
    queued, admitted = kueue.conditions("team-a", admitted_child, [ahead, mine, done])
    assert (queued["status"], admitted["status"], admitted["reason"]) == ("False", "True", "Admitted")
    assert admitted["message"] == "Kueue: admitted by ClusterQueue cq (LocalQueue team-a)"
    assert kueue.conditions("team-a", child, [])[0]["reason"] == "NoWorkload"
    assert kueue.conditions("team-a", None, [])[0]["reason"] == "Creating"
    # An admitted Workload moves the pending ones behind it: their jobs are reconciled again.
    assert kueue.owner_key(done) == ("ml", "c") and kueue.siblings(done, [ahead, mine, done]) == [("ml", "a"),
                                                                                                ("ml", "b")]


def test_desired_is_cached_per_object_content() -> None:
    from kubetrain.controller.reconcile import DesiredCache

    cache = DesiredCache(size=2)
    obj = tj(GOOD)
    first = cache.get(obj, ["pytorchjob"])
    assert cache.get({**obj, "status": {"phase": "Running"}}, ["pytorchjob"]) is first  # a status change
    assert (cache.hits, cache.misses) == (1, 1)
    relabelled = tj(GOOD, labels={"team": "x"})  # metadata changes do not bump a CRD's generation
    assert cache.get(relabelled, ["pytorchjob"]) is not first and cache.misses == 2
    invalid = tj({**GOOD, "nodes": 0})
    assert cache.get(invalid, ["pytorchjob"]).problems and cache.get(invalid, ["pytorchjob"]).problems
    assert cache.misses == 4  # problems are not cached: a missing ConfigMap may appear later


def test_events_are_sent_in_the_background_and_aggregated(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from kubetrain.controller import kube

    gate, sent = threading.Event(), []

    def create_event(api: Any, namespace: str, body: dict[str, Any]) -> None:
        gate.wait(10)
        sent.append((body["reason"], body["count"]))

    monkeypatch.setattr(kube, "create_event", create_event)
    recorder = kube.EventRecorder(object(), senders=1)  # type: ignore[arg-type]
    obj = tj(GOOD)
    recorder.record(obj, "Normal", "Created", "created PyTorchJob mnist")
    assert recorder.flush(0.2) is False  # the reconcile did not wait for it
    for _ in range(3):  # while the first is in flight, the same Event three times: sent once, count 3
        recorder.record(obj, "Warning", "SpecChanged", "spec changed")
    gate.set()
    assert recorder.flush(10)
    recorder.close()
    assert sent == [("Created", 1), ("SpecChanged", 3)] and recorder.sent == 2


def test_request_counter_counts_the_clients_requests() -> None:
    from kubetrain.controller.kube import RequestCounter
    from kubetrain.kube.kubeconfig import Endpoint
    from kubetrain.kube.rest import Rest

    rest = Rest(Endpoint(server="https://127.0.0.1:1", context=None, namespace=None))  # nothing listens on 1
    counter = RequestCounter(rest)
    with pytest.raises(Exception):  # noqa: B017 - refused: only the count matters here
        rest.request("GET", "/api/v1/pods", {"watch": True}, retry=False)
    with pytest.raises(Exception):  # noqa: B017
        rest.request("PATCH", "/apis/x", retry=False)
    assert dict(counter.counts) == {"WATCH": 1, "PATCH": 1} and counter.total() == 2


def test_shutdown_lets_a_reconcile_in_flight_record_its_event(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM while a worker has just created a trial: its Event still reaches the API server (the real-node
    sweep drill lost a TrialCreated Event this way when shutdown closed the recorder under a running reconcile)."""
    import threading

    from kubetrain.controller import kube
    from kubetrain.controller.faults import ErrorCounter, Fanout
    from kubetrain.controller.loop import Controller
    from kubetrain.controller.queue import WorkQueue

    sent: list[str] = []
    monkeypatch.setattr(kube, "create_event", lambda api, namespace, body: sent.append(body["message"]))
    controller = Controller.__new__(Controller)  # no API server: only the loop's own parts
    controller.stop, controller.failures, controller.errors = threading.Event(), 0, ErrorCounter()
    controller.queue, controller.sweep_queue = WorkQueue(), WorkQueue()
    controller.events = kube.EventRecorder(object(), senders=1)  # type: ignore[arg-type]
    controller.progress = Fanout("progress", controller.errors, 1)
    controller.threads, controller.workers = [], []
    inside = threading.Event()

    def reconcile(key: Any) -> None:
        inside.set()
        controller.stop.wait(10)  # the create's round trip outlasts the signal
        time.sleep(0.2)
        controller.events.record(tj(GOOD), "Normal", "TrialCreated", f"created TrainingJob {key[1]}")

    controller.workers.append(controller._spawn(controller._work, controller.queue, reconcile, name="worker-0"))
    controller.queue.add(("ns", "sw-t2"))
    assert inside.wait(10)
    controller.shutdown(grace=10)
    assert sent == ["created TrainingJob sw-t2"]
