"""`validate --exact` on a real local kube-apiserver (the suite's etcd and kube-apiserver binaries): the
API server's verdict on each document and on what the operators would create from it, with the server's
own message at the document's file:line; the server is started once, reused warm, and stopped cleanly."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.jobs.localapi import read_state, state_dir
from kubetrain.jobs.trainjobset import TORCH_DISTRIBUTED
from kubetrain.rules.k8s.versions import DEFAULT
from tests.conftest import LocalApiServer
from tests.validate.kubectl_cases import CASES, Case

pytestmark = pytest.mark.controlplane


@pytest.fixture
def exact(local_apiserver: LocalApiServer) -> list[str]:
    return local_apiserver.flags


@pytest.fixture(autouse=True)
def _cache_dir(local_apiserver: LocalApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBETRAIN_CACHE_DIR", local_apiserver.env["KUBETRAIN_CACHE_DIR"])


def run(flags: list[str], *args: str) -> tuple[int, dict[str, Any], str]:
    result = CliRunner().invoke(cli, ["validate", *flags, "-o", "json", *args])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else {}, result.stderr


def check(flags: list[str], tmp_path: Path, case: Case, *extra: str) -> dict[str, Any]:
    path = tmp_path / f"{case.name}.yaml"
    path.write_text(case.text)
    code, report, stderr = run(flags, *extra, str(path))
    assert code in (0, 1), stderr
    return report


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_api_servers_verdict(exact: list[str], tmp_path: Path, case: Case) -> None:
    report = check(exact, tmp_path, case)
    errors = [i for i in report["issues"] if i["severity"] == "error"]
    assert report["valid"] is case.valid, errors
    if not case.valid:
        assert any(i["path"].startswith(case.field) for i in errors), errors
        assert all(i["line"] for i in errors), errors


def test_server_side_apply_adds_no_annotation(exact: list[str], tmp_path: Path) -> None:
    case = next(c for c in CASES if c.server_side_valid is not None)
    assert check(exact, tmp_path, case, "--server-side")["valid"] is case.server_side_valid


def test_a_refusal_is_the_servers_message_at_the_documents_line(exact: list[str], tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fine}\n---\n"
                    "apiVersion: v1\nkind: Service\nmetadata: {name: svc}\nspec:\n  ports:\n  - port: 70000\n")
    code, report, _ = run(exact, str(path))
    assert code == 1
    issue = next(i for i in report["issues"] if i["path"] == "spec.ports[0].port")  # and targetPort, defaulted
    assert (issue["document"], issue["kind"], issue["line"]) == (2, "Service", 10)
    assert issue["message"] == "Invalid value: 70000: must be between 1 and 65535, inclusive"


def test_kinds_lists_and_namespaces_as_kubectl_takes_them(exact: list[str], tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n"
                    "    name: a\n    namespace: team-a\n- apiVersion: example.com/v1\n  kind: Widget\n"
                    "  metadata: {name: w}\n")
    code, report, _ = run(exact, str(path))
    assert code == 1
    [issue] = report["issues"]
    assert issue["kind"] == "Widget" and 'no matches for kind "Widget" in version "example.com/v1"' in issue["message"]


TRAINJOB = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {{name: {name}}}
spec:
  runtimeRef: {{name: {runtime}{kind}}}
  trainer:
    image: ghcr.io/example/train:1.0
    numNodes: 2
    resourcesPerNode:
{resources}
"""
# A runtime whose Job template has a pod failure policy but no restartPolicy: the runtime itself and its
# pods are valid; JobSet defaults the pods' restartPolicy to OnFailure, and the Job is refused.
RUNTIME_WITH_POLICY = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: exits}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata:
            labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
          spec:
            podFailurePolicy:
              rules:
              - action: FailJob
                onExitCodes: {operator: In, values: [42]}
            template:
              spec:
                containers:
                - {name: node, image: busybox}
---
"""


def _trainjob(name: str, resources: str, runtime: str = "torch-distributed", kind: str = "") -> str:
    return TRAINJOB.format(name=name, runtime=runtime, kind=kind and f", kind: {kind}",
                           resources="\n".join(f"      {line}" for line in resources.splitlines()))


def test_what_the_trainer_creates_is_dry_run(exact: list[str], tmp_path: Path) -> None:
    valid = tmp_path / "valid.yaml"
    valid.write_text(_trainjob("fine", "limits: {nvidia.com/gpu: 8}"))
    code, report, stderr = run(exact, str(valid))
    assert (code, report["issues"]) == (0, []), stderr

    pods = tmp_path / "pods.yaml"  # the TrainJob CRD takes any quantities; the pod refuses requests > limits
    pods.write_text(_trainjob("cpu", "requests: {cpu: 2}\nlimits: {cpu: 1}"))
    code, report, _ = run(exact, str(pods))
    [issue] = [i for i in report["issues"] if i["severity"] == "error"]
    assert code == 1 and issue["path"] == "spec.trainer" and issue["line"] == 6, issue
    assert "JobSet's Job cpu-node-0 would be refused" in issue["message"]  # the Job, before its pods
    assert "must be less than or equal to cpu limit" in issue["message"]

    job = tmp_path / "job.yaml"  # a runtime of the file's own, whose Jobs the API server refuses
    job.write_text(RUNTIME_WITH_POLICY + _trainjob("exits", "limits: {cpu: 1}", "exits", "TrainingRuntime"))
    code, report, _ = run(exact, str(job))
    [issue] = [i for i in report["issues"] if i["severity"] == "error"]
    assert code == 1 and issue["document"] == 2 and "JobSet's Job exits-node-0 would be refused" in issue["message"]
    assert "podFailurePolicy" in issue["message"], issue


# Refused only by the operators' own webhooks: the API server's schema takes both.
CHIEF = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: chief}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers: [{name: pytorch, image: busybox:1.36}]
    Chief:
      replicas: 1
      template:
        spec:
          containers: [{name: pytorch, image: busybox:1.36}]
"""
RESERVED_ENV = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: reserved}
spec:
  runtimeRef: {name: torch-distributed}
  trainer:
    image: busybox:1.36
    env:
    - {name: PET_NNODES, value: "3"}
"""


@pytest.mark.parametrize(("text", "webhook", "line", "path"), [
    (CHIEF, "validator.pytorchjob.training-operator.kubeflow.org", 11, "spec.pytorchReplicaSpecs.Chief"),
    (RESERVED_ENV, "validator.trainjob.trainer.kubeflow.org", 8, "spec.trainer.env"),
], ids=["training-operator", "trainer"])
def test_the_operators_own_webhooks_run(exact: list[str], tmp_path: Path, text: str, webhook: str, line: int,
                                        path: str) -> None:
    file = tmp_path / "job.yaml"
    file.write_text(text)
    code, report, _ = run(exact, str(file))
    [issue] = [i for i in report["issues"] if i["severity"] == "error"]
    assert code == 1 and f'admission webhook "{webhook}" denied the request' in issue["message"], issue
    assert (issue["line"], issue["path"]) == (line, path), issue
    state = read_state(state_dir(DEFAULT))  # the manager lives as long as the server
    assert state is not None and any(_running(pid) for name, pid in state.pids.items() if name.startswith("webhook:"))
    assert "with the webhooks of" in report["verdictBy"]


def test_without_the_webhooks_kubetrains_port_of_their_rules(exact: list[str], tmp_path: Path) -> None:
    file = tmp_path / "job.yaml"
    file.write_text(CHIEF)
    code, report, _ = run(exact, "--no-webhooks", str(file))
    assert code == 1 and "with the webhooks" not in report["verdictBy"]
    assert all("admission webhook" not in i["message"] for i in report["issues"]), report["issues"]
    assert any("replica type must be Master or Worker" in i["message"] for i in report["issues"]), report["issues"]
    state = read_state(state_dir(DEFAULT))  # the managers an earlier run started are stopped
    assert state is not None and not any(name.startswith("webhook:") for name in state.pids)


def test_a_runtime_of_the_files_is_kept_for_the_trainers_webhook(exact: list[str], tmp_path: Path) -> None:
    shipped = tmp_path / "shipped.yaml"  # held for real on the local server already: an update, not a conflict
    shipped.write_text(yaml.safe_dump(TORCH_DISTRIBUTED))
    own = tmp_path / "own.yaml"  # the Trainer's webhook reads the runtime a TrainJob names from the server
    runtime = {**TORCH_DISTRIBUTED, "kind": "TrainingRuntime", "metadata": {"name": "mine"}}
    own.write_text(yaml.safe_dump(runtime) + "---\n" + RESERVED_ENV.replace(
        "{name: torch-distributed}", "{name: mine, kind: TrainingRuntime}"))
    _, report, _ = run(exact, str(shipped), str(own))
    errors = [i for i in report["issues"] if i["severity"] == "error"]
    assert [(i["source"], i["document"], i["path"]) for i in errors] == [(str(own), 2, "spec.trainer.env")], errors
    assert "must not have reserved envs" in errors[0]["message"]


def test_a_runtime_the_server_lacks_is_an_error_unless_the_trainer_ships_it(exact: list[str], tmp_path: Path) -> None:
    issues = {}
    for runtime in ("no-such-runtime", "jax-distributed"):
        file = tmp_path / f"{runtime}.yaml"
        file.write_text(TRAINJOB.format(name="r", runtime=runtime, kind="", resources="      limits: {cpu: 1}"))
        _, report, _ = run(exact, str(file))
        [issues[runtime]] = [i for i in report["issues"] if "must be created before the TrainJob" in i["message"]]
    assert issues["no-such-runtime"]["severity"] == "error" and issues["jax-distributed"]["severity"] == "warning"
    assert issues["no-such-runtime"]["path"] == "spec.runtimeRef", issues


def test_warm_reuse_and_a_clean_stop(exact: list[str], tmp_path: Path) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
    run(exact, str(path))
    state = read_state(state_dir(DEFAULT))
    assert state is not None
    code, report, _ = run(exact, str(path))
    assert code == 0 and "warm" in report["verdictBy"]
    assert read_state(state_dir(DEFAULT)) == state
    result = CliRunner().invoke(cli, ["validate", "--stop-server"])
    assert result.exit_code == 0 and f"stopped the local API server of Kubernetes {DEFAULT}" in result.stderr
    assert read_state(state_dir(DEFAULT)) is None
    for pid in state.pids.values():
        assert not _running(pid), f"process {pid} still runs after --stop-server"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return not Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except OSError:
        return False
