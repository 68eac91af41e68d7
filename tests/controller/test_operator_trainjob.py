"""A TrainingJob with target trainjob: the controller creates a Kubeflow Trainer v2 TrainJob and mirrors it.

Separate module: the `trainer` fixture (Trainer + JobSet controllers) lives for one module.
"""

from __future__ import annotations

import kubernetes
import pytest

from tests.controller.operator_env import cond, create, get, phase_is, training_job
from tests.harness.helpers import wait_for

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
