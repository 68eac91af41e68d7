"""Which Events belong to this incarnation of a job, and pod re-creations counted from them (pure)."""

from __future__ import annotations

from typing import Any

from kubetrain.client.status import own_events, recreations


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
