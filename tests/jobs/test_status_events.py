"""Which Events belong to this incarnation of a job, and pod re-creations counted from them (pure)."""

from __future__ import annotations

from typing import Any

from kubetrain.jobs.status import own_events, recreations


def event(uid: str, when: str, reason: str = "Scheduled", message: str = "", count: int = 1) -> dict[str, Any]:
    return {"involvedObject": {"uid": uid, "kind": "Pod", "name": "j-master-0"}, "lastTimestamp": when,
            "reason": reason, "message": message, "count": count, "metadata": {"resourceVersion": when[-3:-1]}}


def test_a_recreated_job_keeps_only_its_own_events() -> None:
    old = event("old-pod", "2026-01-01T10:00:00Z", "Succeeded")  # same pod name, earlier job
    deleted = event("gone-pod", "2026-01-01T12:00:05Z", "Killing")  # this job's pod, since deleted
    current = event("new-pod", "2026-01-01T12:00:09Z")
    kept = own_events([current, old, deleted], {"job-uid", "new-pod"}, "2026-01-01T12:00:00Z")
    assert kept == [deleted, current]  # oldest first; the predecessor's event is gone


def test_recreations_come_from_the_operators_create_events() -> None:
    created = [event("job", "2026-01-01T12:00:00Z", "SuccessfulCreatePod", "Created pod: j-master-0", count=7),
               event("job", "2026-01-01T12:00:00Z", "SuccessfulCreatePod", "Created pod: j-master-0"),
               event("job", "2026-01-01T12:00:00Z", "SuccessfulCreatePod", "Created pod: j-worker-0"),
               event("job", "2026-01-01T12:00:00Z", "SuccessfulCreateService", "Created service: j-master-0")]
    assert recreations(created) == {"j-master-0": 7}


def pod(name: str, uid: str, phase: str = "Running", ready: bool = True, restarts: int = 0) -> dict[str, Any]:
    role, index = name.split("-")[1:]
    state = {"running": {}} if ready else {"waiting": {"reason": "ContainerCreating"}}
    return {"metadata": {"name": name, "uid": uid, "labels": {"training.kubeflow.org/replica-type": role,
                                                             "training.kubeflow.org/replica-index": index}},
            "spec": {"containers": [{"name": "pytorch"}]},
            "status": {"phase": phase, "containerStatuses": [{"name": "pytorch", "state": state,
                                                              "restartCount": restarts}]}}


def job(workers: int) -> dict[str, Any]:
    return {"metadata": {"name": "j", "uid": "job-uid"},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": workers}}}}


def test_event_lists_are_bounded_and_troubled_pods_come_first() -> None:
    from kubetrain.jobs.status import event_subjects
    from kubetrain.jobs.targets import PYTORCHJOB

    special: dict[int, dict[str, Any]] = {3: {"restarts": 2}, 12: {"phase": "Pending", "ready": False}}
    pods = [pod("j-master-0", "m0"), *(pod(f"j-worker-{i}", f"w{i}", **special.get(i, {}))
                                       for i in range(15) if i != 9)]  # worker-9 was deleted
    subjects = event_subjects(job(15), PYTORCHJOB, pods, max_pods=4, max_healthy=1)
    # the job itself, then the restarted and the pending pod, the deleted worker-9 (by name), then master-0
    assert subjects.uids == {"job-uid", "w3", "w12", "m0"} and subjects.named == [("Pod", "j-worker-9")]
    assert subjects.omitted == 0  # every troubled pod is listed; 12 healthy ones are not, and not worth a hint
    few = event_subjects(job(15), PYTORCHJOB, pods, max_pods=2, max_healthy=1)
    assert few.uids == {"job-uid", "w3", "w12"} and few.named == [] and few.omitted == 1  # the deleted worker-9
    healthy_only = event_subjects(job(15), PYTORCHJOB, pods, max_pods=4, max_healthy=3)
    assert healthy_only.uids == {"job-uid", "w3", "w12", "m0"}  # the bound counts healthy pods too
    everything = event_subjects(job(15), PYTORCHJOB, pods)
    assert len(everything.uids) == 1 + 15 and everything.named == [("Pod", "j-worker-9")] and not everything.omitted
