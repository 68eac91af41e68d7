"""logs, gpu and doctor through the CLI against the real control plane: stdout is data, stderr messages,
exit codes 0/1/2, one-line errors (unreachable cluster, rejected credentials, missing job or namespace)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from click.testing import CliRunner

from kubetrain.cli.logs_cmd import parse_duration
from kubetrain.cli.main import cli
from kubetrain.errors import UsageError
from tests.cli.imports import run_fresh
from tests.harness.helpers import pytorchjob, server_side_apply, wait_for
from tests.testenv.logfixtures import cri, now_stamp, serve_logs


def run(*argv: str) -> Any:
    return CliRunner().invoke(cli, list(argv), catch_exceptions=False)


@pytest.fixture
def job(controlplane, namespace, k8s, tmp_path) -> str:
    """A running PyTorchJob `cli` (master + 1 worker, 8 GPUs each) whose pods serve known lines."""
    for pod, lines in (("cli-master-0", ["master says hi"]), ("cli-worker-0", ["worker says hi", "worker done"])):
        path = tmp_path / f"{pod}.log"
        path.write_text(cri([(now_stamp(), line) for line in lines]))
        serve_logs(k8s, namespace, pod, path)
    server_side_apply(k8s, pytorchjob("cli", namespace, workers=1, gpus=8))
    core = kubernetes.client.CoreV1Api(k8s)
    wait_for(lambda: sorted(p.status.phase for p in core.list_namespaced_pod(namespace).items) == ["Running"] * 2,
             "both pods Running", interval=0.1)
    kc = str(controlplane.kubeconfig)
    wait_for(lambda: "worker done" in run("logs", "cli", "-n", namespace, "--kubeconfig", kc).stdout,
             "kwok serving the logs", interval=0.1)
    return "cli"


@pytest.mark.controlplane
def test_logs_gpu_and_follow(controlplane, namespace, job):
    kc = ("--kubeconfig", str(controlplane.kubeconfig), "-n", namespace)
    result = run("logs", job, *kc)
    assert result.exit_code == 0
    assert result.stdout.splitlines() == ["[master-0] master says hi", "[worker-0] worker says hi",
                                          "[worker-0] worker done"]
    assert result.stderr == ""
    assert run("logs", job, "--replica", "worker", "--tail", "1", *kc).stdout == "[worker-0] worker done\n"

    table = run("gpu", job, *kc)
    assert table.exit_code == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["POD", "GPU", "NAME", "UTIL", "MEMORY", "TEMP", "POWER"]
    assert len(lines) == 1 + 16
    assert lines[1].split() == ["master-0", "0", "NVIDIA", "H100", "80GB", "HBM3", "87%", "29.3/79.6", "GiB", "52°C",
                                "512", "W"]
    watched = run("gpu", job, "--watch", "--interval", "0.5", "--count", "2", "-o", "json", *kc)
    docs = [json.loads(line) for line in watched.stdout.splitlines()]
    assert len(docs) == 2, (watched.exit_code, watched.stdout, watched.stderr)
    assert [p["replica"] for p in docs[1]["pods"]] == ["master-0", "worker-0"]
    assert docs[0]["pods"][1]["gpus"][3]["utilization"] == 96.0

    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.update(result=run("logs", job, "-f", *kc)), daemon=True)
    thread.start()
    wait_for(lambda: kubernetes.client.CoreV1Api(controlplane.api_client()).read_namespaced_pod(
        "cli-master-0", namespace).status.phase == "Running", "master running")
    controlplane.set_pod_phase(namespace, "cli-worker-0", "Failed")
    controlplane.set_pod_phase(namespace, "cli-master-0", "Failed")
    thread.join(60)
    followed = outcome["result"]
    assert followed.exit_code == 1
    assert sorted(followed.stdout.splitlines()) == ["[master-0] master says hi", "[worker-0] worker done",
                                                    "[worker-0] worker says hi"]
    assert followed.stderr.strip().splitlines()[-1].startswith("error: cli failed: ")


@pytest.mark.controlplane
def test_status_list_and_logs_load_neither_the_kubernetes_package_nor_the_spec_machinery(controlplane, namespace,
                                                                                        job):
    """The cluster read paths' start-up budget: REST over http.client (kubetrain.kube.transport), and no job-spec
    model (pydantic) or templates (jinja2) to read a job by name; threads without concurrent.futures (it loads
    logging), DRA's device matching only for pods that wait for devices, and `list` without the status
    machinery (docs/performance.md)."""
    kc = ["--kubeconfig", str(controlplane.kubeconfig), "-n", namespace]
    heavy = {"urllib3", "kubernetes", "pydantic", "jinja2", "kubetrain.jobspec.model", "kubetrain.jobspec.load",
             "concurrent.futures", "logging", "kubetrain.jobs.devices", "decimal"}
    for argv, shown, more in ((["status", job], f"pytorchjob {namespace}/cli: ", set()),
                              (["list"], "cli ", {"kubetrain.jobs.status"}),
                              (["logs", job, "--tail", "1"], "[worker-0] worker done", {"kubetrain.jobs.status"})):
        result = run_fresh([*argv, *kc], heavy | more)
        assert result.exit_code == 0 and shown in result.stdout, (argv, result.stdout, result.stderr[-2000:])
        assert result.loaded == [], (argv, result.loaded)


@pytest.mark.controlplane
def test_doctor_text_and_json(controlplane, namespace):
    kc = ("--kubeconfig", str(controlplane.kubeconfig), "-n", namespace)
    text = run("doctor", *kc)
    assert text.exit_code == 0, text.output
    assert text.stdout.splitlines()[0] == f"kubetrain doctor: context kubetrain-test, namespace {namespace}"
    assert any(line.startswith("✓ cloud ") and "cloud profile gke" in line for line in text.stdout.splitlines())
    assert any(line.startswith("! training ") for line in text.stdout.splitlines())
    assert text.stderr.startswith("ready for GPU training; ")
    report = json.loads(run("doctor", "-o", "json", *kc).stdout)
    assert report["ok"] is True and report["cloud"] == "gke" and report["namespace"] == namespace
    assert {c["status"] for c in report["checks"]} <= {"ok", "warn"}

    nobody = controlplane.write_kubeconfig("cli-nobody")
    denied = run("doctor", "--kubeconfig", str(nobody), "-n", namespace)
    assert denied.exit_code == 1
    assert any(line.startswith("✗ rbac ") for line in denied.stdout.splitlines())


def _kubeconfig(tmp_path: Path, source: Path, server: str | None = None, token: str | None = None) -> str:
    config = yaml.safe_load(source.read_text())
    if server:
        config["clusters"][0]["cluster"]["server"] = server
    if token:
        config["users"][0]["user"] = {"token": token}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.mark.controlplane
@pytest.mark.parametrize("argv", [["doctor"], ["logs", "x"], ["logs", "x", "-f"], ["gpu", "x"]])
def test_unreachable_and_rejected_credentials_are_one_line_errors(controlplane, tmp_path, argv):
    down = _kubeconfig(tmp_path, controlplane.kubeconfig, server="https://127.0.0.1:1")
    result = run(*argv, "--kubeconfig", down)
    assert result.exit_code == 3 and result.stdout == ""  # could not reach the cluster (docs/cluster.md)
    assert result.stderr.splitlines() == [result.stderr.strip()] and result.stderr.startswith("error: cannot reach")
    expired = _kubeconfig(tmp_path, controlplane.kubeconfig, token="expired-token")
    result = run(*argv, "--kubeconfig", expired)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: credentials rejected (401 Unauthorized)") and result.stderr[-1] == "\n"
    assert result.stderr.count("\n") == 1


@pytest.mark.controlplane
def test_missing_job_and_namespace(controlplane, namespace):
    kc = str(controlplane.kubeconfig)
    missing = run("logs", "nope", "-n", namespace, "--kubeconfig", kc)
    assert missing.exit_code == 1
    assert missing.stderr == f"error: no PyTorchJob named nope in namespace {namespace} (list them: kubetrain list " \
                             f"-n {namespace}); if it had spec.archive, read that: --archive URL\n"
    gone = run("gpu", "nope", "-n", "no-such-namespace", "--kubeconfig", kc)
    assert gone.exit_code == 1 and gone.stderr.startswith("error: namespace no-such-namespace does not exist")


def test_usage_errors_exit_2():
    assert run("logs", "x", "-f", "--previous").exit_code == 2
    assert run("logs", "x", "--since", "5 minutes").exit_code == 2
    assert run("logs", "x", "--replica", "worker_1").exit_code == 2
    assert parse_duration("1h30m") == 5400 and parse_duration("45s") == 45
    with pytest.raises(UsageError):
        parse_duration("0s")
