"""The kubetrain controller on the real node.

The controller runs as its own process under its ServiceAccount's token and exactly the manifests' RBAC
(tests/controller/operator_env.py). A TrainingJob created with the raw client (what `kubectl apply` does)
becomes a PyTorchJob whose pods really train on the node; the TrainingJob's status mirrors Running, then
Succeeded, with progress read from the real master's log; `kubetrain status` and `logs` work on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.controller.operator_env import (
    GROUP,
    PLURAL,
    VERSION,
    Operator,
    create,
    custom,
    namespaced_operator,
    phase_is,
    pytorchjob,
    tj,
)
from tests.harness.helpers import wait_for

from .conftest import Cli
from .test_digits import _metrics

pytestmark = [pytest.mark.slow, pytest.mark.torch]
NAME = "digits-op"


@pytest.fixture
def operator(controlplane: Any, real_node: Any, namespace: str, tmp_path: Path) -> Iterator[Operator]:
    op = namespaced_operator(controlplane, namespace, tmp_path, "--progress-interval", "1")
    yield op
    op.stop()


def _training_job(project: Path, image: str, namespace: str) -> dict[str, Any]:
    """The digits spec as a cluster object: the code comes from the image (a TrainingJob applied with
    kubectl cannot point at a local directory; `submit --controller` would upload it)."""
    doc = yaml.safe_load((project / "kubetrain.yaml").read_text())
    spec = doc["spec"]
    spec.pop("code")
    spec.pop("build")
    spec.update(image=image, checkpoint={"dir": f"/ckpt/{NAME}", "everySteps": 50, "keep": 1})
    spec["train"]["epochs"] = 6
    return {**doc, "metadata": {"name": NAME, "namespace": namespace}}


def test_controller_runs_a_trainingjob_on_the_real_node(k8s: Any, cli: Cli, image: str, project: Path,
                                                        namespace: str, claim: Path, operator: Operator) -> None:
    created = create(k8s, _training_job(project, image, namespace))
    child = wait_for(lambda: pytorchjob(k8s, namespace, NAME), "the child PyTorchJob", 60)
    assert child["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    # Progress read from the running master's log tail while it trains.
    running = wait_for(lambda: (o := phase_is(k8s, namespace, NAME, "Running"))
                       and (o["status"].get("progress") or {}).get("step") and o, "Running with progress", 600)
    progress = running["status"]["progress"]
    # The first read can come after the last step (the pod still Running while the process exits).
    assert progress["totalSteps"] >= progress["step"] > 0 and float(progress["loss"]) > 0, progress
    status = cli("status", NAME, "-n", namespace)
    phases = ("Running",) if progress["step"] < progress["totalSteps"] else ("Running", "Succeeded")
    assert any(f"{namespace}/{NAME}: {p}" in status.stdout for p in phases), status.stdout

    done = wait_for(lambda: phase_is(k8s, namespace, NAME, "Succeeded"), "phase Succeeded", 900)
    assert any(c["type"] == "Succeeded" and c["status"] == "True" for c in done["status"]["conditions"])
    logged = cli("logs", NAME, "-n", namespace).stdout
    end = _metrics(logged, "end")
    assert end and _metrics(logged, "start")[0]["world_size"] == 2, logged[-2000:]
    final = (tj(k8s, namespace, NAME) or {})["status"]["progress"]
    # The last eval the controller saw is one the master logged (it polls every second while Running).
    assert final["evalAccuracy"] in [r["eval_accuracy"] for r in _metrics(logged, "eval")], final
    assert final["step"] >= progress["step"] and final["totalSteps"] == progress["totalSteps"], (progress, final)
    status = cli("status", NAME, "-n", namespace)
    assert f"{namespace}/{NAME}: Succeeded" in status.stdout, status.stdout
    assert operator.proc.poll() is None, operator.text()[-3000:]


def _succeeded_child(k8s: Any, namespace: str, name: str, old_uid: str | None) -> dict[str, Any]:
    """The TrainingJob once a child other than `old_uid` has Succeeded (its status computed for the current
    generation, so the old child's Succeeded does not count)."""
    def done() -> dict[str, Any] | None:
        obj = tj(k8s, namespace, name) or {}
        status, child = obj.get("status") or {}, pytorchjob(k8s, namespace, name)
        fresh = child is not None and child["metadata"]["uid"] != old_uid
        current = status.get("observedGeneration") == obj.get("metadata", {}).get("generation")
        return obj if fresh and current and status.get("phase") == "Succeeded" else None

    return wait_for(done, "the new child Succeeded", 900)


def _patch(k8s: Any, namespace: str, name: str, epochs: int, policy: str) -> None:
    body = {"metadata": {"annotations": {"kubetrain.dev/update-policy": policy}},
            "spec": {"train": {"epochs": epochs}}}
    custom(k8s).patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, NAME, body)


def test_recreated_job_starts_fresh_and_continue_resumes_on_the_real_node(
        k8s: Any, cli: Cli, image: str, project: Path, namespace: str, claim: Path, operator: Operator) -> None:
    # A changed spec under `recreate` trains from step 0 (before, the new child resumed
    # the old run's last checkpoint and only ran the steps beyond it); under `continue` it resumes.
    job = _training_job(project, image, namespace)
    job["spec"]["train"]["epochs"] = 1
    create(k8s, job)
    first = _succeeded_child(k8s, namespace, NAME, None)
    first_end = _metrics(cli("logs", NAME, "-n", namespace).stdout, "end")[0]["step"]
    old_uid = pytorchjob(k8s, namespace, NAME)["metadata"]["uid"]
    assert list((claim / NAME).glob("step-*"))

    _patch(k8s, namespace, NAME, 2, "recreate")
    second = _succeeded_child(k8s, namespace, NAME, old_uid)
    logged = cli("logs", NAME, "-n", namespace).stdout
    spec_hash = second["status"]["specHash"]
    starts = _metrics(logged, "start")
    assert starts and not _metrics(logged, "resume") and starts[0]["start_step"] == 0, logged[-2000:]
    second_end = _metrics(logged, "end")[0]["step"]
    assert second_end == 2 * first_end, (first_end, second_end)
    assert first["status"]["checkpointDir"] == f"/ckpt/{NAME}"
    assert second["status"]["checkpointDir"] == f"/ckpt/{NAME}/run-{spec_hash}"
    assert list((claim / NAME / f"run-{spec_hash}").glob("step-*"))
    assert second["status"]["progress"]["step"] == second_end  # read once more at the end, from this child

    old_uid = pytorchjob(k8s, namespace, NAME)["metadata"]["uid"]
    _patch(k8s, namespace, NAME, 3, "continue")
    third = _succeeded_child(k8s, namespace, NAME, old_uid)
    logged = cli("logs", NAME, "-n", namespace).stdout
    assert _metrics(logged, "resume")[0]["step"] == second_end, logged[-2000:]
    assert _metrics(logged, "end")[0]["step"] == 3 * first_end
    assert third["status"]["checkpointDir"] == f"/ckpt/{NAME}/run-{spec_hash}"
