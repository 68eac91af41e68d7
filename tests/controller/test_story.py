"""The story of a controller-managed job in one place: `logs -f`, `events` and `status` show the TrainingJob's
own Events beside its pods', and `logs -f` reports a re-created pod once, with why (here: evicted through the
Eviction API, which marks the pod with a DisruptionTarget condition before deleting it).

Pods are kwok's; the training-operator re-creates the evicted one under its name.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import kubernetes
import pytest
from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.jobs.logs import FollowResult, LogOptions, follow_job_logs
from kubetrain.kube.connection import connect
from tests.controller.operator_env import GROUP, PLURAL, VERSION, create, custom, phase_is, training_job
from tests.harness.helpers import wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]


def _running_pod(k8s: Any, namespace: str, pod: str, not_uid: str = "") -> str | None:
    try:
        found = kubernetes.client.CoreV1Api(k8s).read_namespaced_pod(pod, namespace)
    except kubernetes.client.exceptions.ApiException:
        return None
    ok = found.status.phase == "Running" and found.metadata.uid != not_uid and not found.metadata.deletion_timestamp
    return found.metadata.uid if ok else None


def test_logs_f_events_and_status_tell_the_trainingjobs_story(controlplane, k8s, namespace, start):
    start()
    name, pod = "story", "story-master-0"
    create(k8s, training_job(name, namespace, nodes=1))
    first = wait_for(lambda: _running_pod(k8s, namespace, pod), "the pod Running", 90)
    wait_for(lambda: phase_is(k8s, namespace, name, "Running"), "phase Running", 60)
    notices: list[str] = []
    lines: list[str] = []
    result: list[FollowResult] = []

    def follow() -> None:
        connection = connect(kubeconfig=str(controlplane.kubeconfig))
        result.append(follow_job_logs(connection, namespace, name, None, LogOptions(), lines.append,
                                      notices.append, timeout=180))

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    wait_for(lambda: lines, "logs -f following the pod (kwok's log lines)", 60)
    # A spec change under update policy report: the TrainingJob's own Warning Event, while following.
    custom(k8s).patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": {"env": {"A": "1"}}})
    wait_for(lambda: any(n.startswith(f"TrainingJob {name}: Warning NotApplied: spec changed") for n in notices),
             "the TrainingJob's Event in logs -f", 60)
    body = {"metadata": {"name": pod, "namespace": namespace}}
    kubernetes.client.CoreV1Api(k8s).create_namespaced_pod_eviction(pod, namespace, body)
    wait_for(lambda: _running_pod(k8s, namespace, pod, not_uid=first), "the pod re-created and Running", 90)
    wait_for(lambda: any("was re-created" in n for n in notices), "the re-creation reported", 30)
    time.sleep(3)  # a dozen more rounds of the follower (0.25 s each): nothing more is said about it
    recreated = [n for n in notices if "was re-created" in n]
    assert recreated == [f"[master-0] pod {pod} was re-created: evicted"], notices
    controlplane.set_pod_phase(namespace, pod, "Succeeded")
    follower.join(120)
    assert result and result[0].state == "Succeeded", notices

    runner = CliRunner(env={"KUBECONFIG": str(controlplane.kubeconfig)})
    events = runner.invoke(cli, ["events", name, "-n", namespace], catch_exceptions=False)
    assert events.exit_code == 0, events.output
    rows = [line.split() for line in events.stdout.splitlines()[1:] if line and not line.startswith(" ")]
    objects = [row[3] for row in rows if len(row) > 3]
    assert f"trainingjob/{name}" in objects and f"pod/{pod}" in objects, events.stdout
    reasons = [(row[2], row[3]) for row in rows if len(row) > 3]
    assert ("Created", f"trainingjob/{name}") in reasons and ("NotApplied", f"trainingjob/{name}") in reasons, rows
    status = runner.invoke(cli, ["status", name, "-n", namespace, "--events", "30"], catch_exceptions=False)
    assert f"trainingjob/{name}" in status.stdout.partition("Recent events:")[2], status.stdout
