"""kubetrain's own TrainJob, through the real Kubeflow Trainer v2 controller and JobSet (the `trainer`
fixture): submit, status, logs and gpu from the pods JobSet really creates (kwok runs them on the GPU
nodes), then Succeeded when the pods finish, list and delete."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from click.testing import CliRunner

from kubetrain import jobs
from kubetrain.checks import OK
from kubetrain.cli.main import cli
from kubetrain.cluster import preflight
from kubetrain.jobs import apply, status, targets
from kubetrain.jobs.targets import PYTORCHJOB, TRAINJOB
from kubetrain.kube.connection import Connection, connect
from tests.harness.helpers import wait_for
from tests.testenv.specs import render, typed, write_spec

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]


@pytest.fixture
def conn(controlplane: Any, trainer: Any) -> Connection:
    return connect(kubeconfig=str(controlplane.kubeconfig))


def _running_pods(conn: Connection, namespace: str, name: str, count: int) -> list[str]:
    core = kubernetes.client.CoreV1Api(typed(conn))

    def running() -> list[str] | None:
        items = core.list_namespaced_pod(namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}").items
        names = sorted(p.metadata.name for p in items if p.status.phase == "Running")
        return names if len(names) == count else None

    return wait_for(running, f"{count} Running pods of TrainJob {name}", timeout=120)


def test_trainjob_submit_status_logs_gpu_list_delete(controlplane: Any, conn: Connection, namespace: str,
                                                     tmp_path: Path) -> None:
    assert targets.installed(conn.rest) == [PYTORCHJOB, TRAINJOB]
    assert targets.resolve(conn.rest, "auto") is PYTORCHJOB  # both installed: what `render` picks for auto
    objects = render(write_spec(tmp_path, "tj", nodes=2, gpus=8, code=True), namespace, target="trainjob")
    assert [o["kind"] for o in objects] == ["ConfigMap", "TrainJob"]
    checks = {r.name: r for r in preflight.run(conn.rest, TRAINJOB, objects, namespace)}
    assert checks["CRD"].status == OK and checks["fit"].status == OK
    assert checks["fit"].message.startswith("2 pod(s) × 8 nvidia.com/gpu fit")
    assert apply.submit(conn.rest, TRAINJOB, objects).action == apply.CREATED
    assert apply.submit(conn.rest, TRAINJOB, objects).action == apply.UNCHANGED

    pods = _running_pods(conn, namespace, "tj", 2)  # Trainer → JobSet → Jobs → pods, all real controllers
    kt = ["-n", namespace, "--kubeconfig", str(controlplane.kubeconfig)]
    report = wait_for(lambda: (r := status.job_status(conn.rest, [PYTORCHJOB, TRAINJOB], namespace, "tj"))
                      .job.state == "Running" and r, "TrainJob Running", timeout=60)
    assert (report.job.target, report.job.pods, report.job.gpus_per_pod) == ("trainjob", 2, 8)
    assert sorted(p.name for p in report.pods) == pods

    for index, pod in enumerate(pods):
        controlplane.set_pod_logs(namespace, pod, [f"rank {index} step {step}" for step in range(3)])
    logs = wait_for(lambda: (out := CliRunner().invoke(cli, ["logs", "tj", *kt])).exit_code == 0
                    and out.stdout.count("step 2") == 2 and out, "logs of both pods", timeout=60)
    assert sum("rank 0 step" in line for line in logs.stdout.splitlines()) == 3

    gpu = CliRunner().invoke(cli, ["gpu", "tj", "-o", "json", *kt])
    assert gpu.exit_code == 0, gpu.output
    # nvidia-smi ran in each pod (kwok exec)
    assert [len(pod["gpus"]) for pod in json.loads(gpu.stdout)["pods"]] == [8, 8]

    for pod in pods:
        controlplane.set_pod_phase(namespace, pod, "Succeeded")
    assert jobs.wait_finished(conn.rest, TRAINJOB, namespace, "tj", timeout=120) == "Succeeded"
    listed = CliRunner().invoke(cli, ["list", "-o", "json", *kt])
    assert listed.exit_code == 0, listed.output
    assert [(j["name"], j["target"], j["state"]) for j in json.loads(listed.stdout)] == [("tj", "trainjob",
                                                                                           "Succeeded")]
    cm = kubernetes.client.CoreV1Api(typed(conn)).read_namespaced_config_map(objects[0]["metadata"]["name"], namespace)
    assert cm.metadata.owner_references[0].kind == "TrainJob"
    deleted = CliRunner().invoke(cli, ["delete", "tj", "--wait", *kt])
    assert deleted.exit_code == 0, deleted.output
    jobs.wait_gone(conn.rest, TRAINJOB, namespace, "tj", timeout=30)


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


def test_a_dra_trainjob_runs_on_its_derived_runtime_with_the_pods_claims(conn: Connection, namespace: str,
                                                                         tmp_path: Path) -> None:
    """Trainer v2.3.0 takes the TrainingRuntime kubetrain derives for `gpus.via: dra`: the JobSet it makes
    has the claim in the node pods, and the runtime is owned by the TrainJob."""
    path = write_spec(tmp_path, "tj-dra", nodes=2, gpus=2, target="trainjob")
    body = yaml.safe_load(path.read_text())
    body["spec"]["gpus"] = {"via": "dra", "deviceClass": "gpu.kubetrain.test"}
    path.write_text(yaml.safe_dump(body))
    apply.submit(conn.rest, TRAINJOB, render(path, namespace))

    def jobset() -> dict[str, Any] | None:
        found = conn.rest.get(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets").get("items") or []
        return next((j for j in found if j["metadata"]["name"] == "tj-dra"), None)

    made = wait_for(jobset, "the Trainer's JobSet of tj-dra", timeout=60)
    node = next(r for r in made["spec"]["replicatedJobs"] if r["name"] == "node")
    pod = node["template"]["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "tj-dra-node-gpus"}]
    container = next(c for c in pod["containers"] if c["name"] == "node")
    assert container["resources"]["claims"] == [{"name": "gpus"}]  # kept: the TrainJob has no resourcesPerNode
    assert "nvidia.com/gpu" not in str(container["resources"])
    runtime = conn.rest.get(f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainingruntimes/tj-dra-dra")
    assert [o["kind"] for o in runtime["metadata"]["ownerReferences"]] == ["TrainJob"]
