"""Scenario 2: a job needing more GPUs than exist stays Pending with a
FailedScheduling event from the real kube-scheduler naming nvidia.com/gpu."""

from __future__ import annotations

import time

import kubernetes
import pytest

from tests.harness.helpers import GPU, events_about, job_pods, pytorchjob, server_side_apply, wait_for

pytestmark = pytest.mark.controlplane


def test_too_many_gpus_stays_pending(controlplane, namespace):
    client = controlplane.api_client()
    core = kubernetes.client.CoreV1Api(client)
    # No node has 16 GPUs (each GPU node has 8).
    server_side_apply(client, pytorchjob("huge", namespace, workers=1, gpus=16))

    pods = wait_for(lambda: _n(job_pods(core, namespace, "huge"), 2), "operator to create 2 pods")
    for pod in pods:
        events = wait_for(
            lambda p=pod: events_about(core, namespace, p.metadata.name, "FailedScheduling"),
            "FailedScheduling",
        )
        assert f"Insufficient {GPU}" in events[-1].message, events[-1].message
        assert (
            events[-1].source.component == "default-scheduler" or events[-1].reporting_component == "default-scheduler"
        )

    time.sleep(2)  # nothing changes: the pods are unschedulable, not slow
    for pod in job_pods(core, namespace, "huge"):
        assert pod.status.phase == "Pending"
        assert not pod.spec.node_name
        scheduled = [c for c in pod.status.conditions or [] if c.type == "PodScheduled"]
        assert scheduled and scheduled[0].status == "False" and scheduled[0].reason == "Unschedulable"


def _n(items, n):
    return items if len(items) == n else None
