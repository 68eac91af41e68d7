"""The controller with the module-scoped stacks: Kubeflow Trainer v2 (a TrainingJob with target trainjob gets a
TrainJob, mirrored) and Kueue, which needs Trainer + JobSet at start (TrainingJobs with `scheduling.queue`
get Queued/Admitted from their child's Workload, with the line `kubetrain status` prints,
kubetrain.queues.workloads.hint). One module, so the Trainer stack starts once for both.

Under Kueue, ClusterQueue team-b has 8 GPUs and never borrows: a second 8-GPU job waits until the first is gone.
"""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest

from tests.controller.operator_env import (
    GROUP,
    PLURAL,
    VERSION,
    cond,
    create,
    custom,
    get,
    phase_is,
    pytorchjob,
    tj,
    training_job,
)
from tests.harness.helpers import wait_for
from tests.testenv.specs import H100

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]


def test_trainjob_target(controlplane, trainer, k8s, namespace, start):
    start()
    create(k8s, training_job("tj2", namespace, nodes=2, target="trainjob"))
    child = wait_for(lambda: get(k8s, "trainer.kubeflow.org", "v1alpha1", "trainjobs", namespace, "tj2"),
                     "child TrainJob", 60)
    assert child["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
    core = kubernetes.client.CoreV1Api(k8s)

    def running() -> list[str] | None:
        items = core.list_namespaced_pod(namespace, label_selector="jobset.sigs.k8s.io/jobset-name=tj2").items
        names = [p.metadata.name for p in items if p.status.phase == "Running"]
        return names if len(names) == 2 else None

    for pod in wait_for(running, "2 Running TrainJob pods", 120):
        controlplane.set_pod_phase(namespace, pod, "Succeeded")
    done = wait_for(lambda: phase_is(k8s, namespace, "tj2", "Succeeded"), "phase Succeeded", 120)
    assert done["status"]["target"] == "trainjob" and cond(done, "Succeeded")["status"] == "True"
    assert done["status"]["children"][0]["kind"] == "TrainJob"


def queued_job(name: str, namespace: str) -> dict[str, Any]:
    return training_job(name, namespace, nodes=1, gpusPerNode=8, placement=dict(H100),
                        scheduling={"queue": "team-b"})


def conditions(k8s: Any, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    obj = tj(k8s, namespace, name) or {}
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def until(k8s: Any, namespace: str, name: str, kind: str, reason: str, timeout: float = 90, says: str = ""
          ) -> dict[str, Any]:
    """The TrainingJob's conditions once `kind` is True with `reason` (and a message containing `says`)."""
    def check() -> dict[str, dict[str, Any]] | None:
        found = conditions(k8s, namespace, name)
        wanted = found.get(kind) or {}
        return found if wanted.get("status") == "True" and wanted.get("reason") == reason \
            and says in wanted.get("message", "") else None

    found: dict[str, Any] = wait_for(check, f"{name}: {kind}=True ({reason})", timeout)
    return found


def test_queued_and_admitted_follow_the_workload(controlplane: Any, kueue: Any, k8s: Any, namespace: str,
                                                 start: Any) -> None:
    kueue.queues.add_local_queues(namespace)
    op = start()
    create(k8s, queued_job("first", namespace))
    first = until(k8s, namespace, "first", "Admitted", "Admitted")
    assert first["Admitted"]["message"] == "Kueue: admitted by ClusterQueue team-b (LocalQueue team-b)"
    assert (first["Queued"]["status"], first["Queued"]["reason"]) == ("False", "Admitted")

    create(k8s, queued_job("second", namespace))
    # Kueue first creates the Workload, then says why it cannot admit it: the message follows.
    second = until(k8s, namespace, "second", "Queued", "Pending", says="insufficient")
    message = second["Queued"]["message"]
    assert message.startswith("Kueue: pending in LocalQueue team-b, position 1: "), message
    assert "insufficient" in message and second["Admitted"]["status"] == "False"
    assert pytorchjob(k8s, namespace, "second")["spec"]["runPolicy"]["suspend"] is True

    # The first job goes (its child and Workload with it): Kueue admits the second, and the controller says so.
    custom(k8s).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "first")
    admitted = until(k8s, namespace, "second", "Admitted", "Admitted", timeout=150)
    assert admitted["Queued"]["status"] == "False"
    # Admitted is not the end: its pod runs, and the TrainingJob follows it to Succeeded.
    core = kubernetes.client.CoreV1Api(k8s)
    pod = wait_for(lambda: [p.metadata.name for p in core.list_namespaced_pod(
        namespace, label_selector="training.kubeflow.org/job-name=second").items if p.status.phase == "Running"],
        "the admitted job's pod Running", 90)[0]
    controlplane.set_pod_phase(namespace, pod, "Succeeded")
    wait_for(lambda: phase_is(k8s, namespace, "second", "Succeeded"), "phase Succeeded", 90)
    assert op.proc.poll() is None, op.text()



def test_queued_trainjob_gets_pods_and_succeeds(controlplane: Any, kueue: Any, k8s: Any, namespace: str,
                                                start: Any) -> None:
    # The controller renders the CLI's TrainJob: under Kueue 0.19 it must still get its JobSet's pods.
    kueue.queues.add_local_queues(namespace)
    start()
    create(k8s, training_job("tjq", namespace, nodes=2, target="trainjob", scheduling={"queue": "cpu"}))
    until(k8s, namespace, "tjq", "Admitted", "Admitted")
    core = kubernetes.client.CoreV1Api(k8s)
    running = wait_for(lambda: (names := [p.metadata.name for p in core.list_namespaced_pod(
        namespace, label_selector="jobset.sigs.k8s.io/jobset-name=tjq").items if p.status.phase == "Running"])
        and len(names) == 2 and names, "2 Running pods of the queued TrainJob", 120)
    for pod in running:
        controlplane.set_pod_phase(namespace, pod, "Succeeded")
    wait_for(lambda: phase_is(k8s, namespace, "tjq", "Succeeded"), "phase Succeeded", 120)
