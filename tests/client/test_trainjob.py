"""TrainJob (Trainer v2) paths with its CRD installed for this module. The harness runs no Trainer/JobSet
controller, so nothing turns a TrainJob into pods: apply, status (no pods, conditions set by hand),
list, delete and target resolution are covered; a TrainJob's pods are not (see docs/cluster.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from kubetrain.client import apply, jobs, preflight, status, targets
from kubetrain.client.connection import Connection, connect
from kubetrain.client.targets import PYTORCHJOB, TRAINJOB
from tests.client.specs import render, write_spec
from tests.conftest import TRAINER_DIR

CRD = TRAINER_DIR / "trainer.kubeflow.org_trainjobs.yaml"


@pytest.fixture(scope="module")
def trainjob_crd(controlplane: Any, reference_dir: Path) -> Iterator[None]:
    # reference_dir fails under CI=true (skips locally) when `make testenv` has not copied the upstream CRDs.
    ext = kubernetes.client.ApiextensionsV1Api(controlplane.api_client())
    crd = yaml.safe_load(CRD.read_text())
    try:
        ext.create_custom_resource_definition(crd)
        ours = True
    except kubernetes.client.exceptions.ApiException as exc:
        if exc.status != 409:  # 409: the harness's `trainer` stack already installed it; leave it be
            raise
        ours = False
    wait(lambda: any(c.type == "Established" and c.status == "True"
                     for c in ext.read_custom_resource_definition(crd["metadata"]["name"]).status.conditions or []))
    conn = connect(kubeconfig=str(controlplane.kubeconfig))
    wait(lambda: targets.served(conn.api, TRAINJOB))
    yield
    if ours:
        ext.delete_custom_resource_definition(crd["metadata"]["name"])
        wait(lambda: not targets.served(conn.api, TRAINJOB))


def wait(check: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.fixture
def conn(controlplane: Any, trainjob_crd: None) -> Connection:
    return connect(kubeconfig=str(controlplane.kubeconfig))


def test_trainjob_apply_status_list_delete(conn: Connection, namespace: str, tmp_path: Path) -> None:
    assert targets.installed(conn.api) == [PYTORCHJOB, TRAINJOB]
    assert targets.resolve(conn.api, "auto") is PYTORCHJOB  # both installed: what `render` picks for auto
    objects = render(write_spec(tmp_path, "tj", nodes=2, gpus=8, code=True), namespace, target="trainjob")
    assert [o["kind"] for o in objects] == ["ConfigMap", "TrainJob"]
    checks = {r.name: r for r in preflight.run(conn.api, TRAINJOB, objects, namespace)}
    assert checks["CRD"].status == preflight.OK and checks["fit"].status == preflight.OK
    assert checks["fit"].message.startswith("2 pod(s) × 8 nvidia.com/gpu fit")

    assert apply.submit(conn.api, TRAINJOB, objects).action == apply.CREATED
    assert apply.submit(conn.api, TRAINJOB, objects).action == apply.UNCHANGED
    report = status.job_status(conn.api, [PYTORCHJOB, TRAINJOB], namespace, "tj")
    assert (report.job.target, report.job.state, report.job.pods, report.job.gpus_per_pod) == ("trainjob", "Pending",
                                                                                                2, 8)
    assert report.pods == []

    # What the Trainer controller would write: Complete → Succeeded.
    custom = kubernetes.client.CustomObjectsApi(conn.api)
    condition = {"type": "Complete", "status": "True", "reason": "JobsCompleted", "message": "done",
                 "lastTransitionTime": "2025-01-01T00:00:00Z"}
    custom.patch_namespaced_custom_object_status("trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs", "tj",
                                                 {"status": {"conditions": [condition]}},
                                                 _content_type="application/merge-patch+json")
    assert jobs.wait_finished(conn.api, TRAINJOB, namespace, "tj", timeout=30) == "Succeeded"
    listed = jobs.list_jobs(conn.api, [PYTORCHJOB, TRAINJOB], namespace)
    assert [(s.name, s.target, s.state) for s in listed] == [("tj", "trainjob", "Succeeded")]

    cm = kubernetes.client.CoreV1Api(conn.api).read_namespaced_config_map(objects[0]["metadata"]["name"], namespace)
    assert cm.metadata.owner_references[0].kind == "TrainJob"
    assert jobs.delete(conn.api, TRAINJOB, namespace, "tj")
    jobs.wait_gone(conn.api, TRAINJOB, namespace, "tj", timeout=30)


def test_trainjob_state_mapping() -> None:
    def job(*conditions: str) -> dict[str, Any]:
        return {"kind": "TrainJob", "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}

    assert jobs.state(job()) == "Pending"
    assert jobs.state(job("Suspended")) == "Suspended"
    assert jobs.state(job("Complete")) == "Succeeded" and jobs.state(job("Failed")) == "Failed"
    active = {"kind": "TrainJob", "status": {"jobsStatus": [{"name": "node", "active": 2}]}}
    assert jobs.state(active) == "Running"
    assert jobs.state({"kind": "PyTorchJob", "status": {"conditions": [
        {"type": "Created", "status": "True"}, {"type": "Running", "status": "False"},
        {"type": "Restarting", "status": "True"}]}}) == "Restarting"
