"""`kubetrain cluster create/delete` through the CLI, against recording fakes: exact command sequences,
idempotent re-runs, a failed prerequisite and a failure in the middle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from kindhost import CTK_CONFIG, DOCKER_INFO, healthy_gpu_host, mounts, nodes_json, nothing_installed_yet

from kubetrain.cli.main import cli
from kubetrain.kind.config import render_config
from kubetrain.kind.steps import CONFIGURE_CONTAINERD, INSTALL_TOOLKIT, MASK_PARAMS, RUNTIME_CLASS

CTX = ["--context", "kind-kubetrain"]
KUSTOMIZE = "github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref=v1.9.4"
HELM_LIST = ["helm", "--kube-context", "kind-kubetrain", "list", "--namespace", "nvidia-device-plugin",
             "--filter", "^nvidia-device-plugin$", "--output", "json"]
HELM_INSTALL = ["helm", "--kube-context", "kind-kubetrain", "upgrade", "--install", "nvidia-device-plugin",
                "nvidia-device-plugin", "--repo", "https://nvidia.github.io/k8s-device-plugin",
                "--version", "0.20.0", "--namespace", "nvidia-device-plugin", "--create-namespace",
                "--set", "runtimeClassName=nvidia",
                "--wait", "--timeout", "5m"]
OPERATOR_CHECK = ["kubectl", *CTX, "--namespace", "kubeflow", "get", "deployment", "training-operator",
                  "--output", "jsonpath={.spec.template.spec.containers[0].image}"]
OPERATOR_APPLY = ["kubectl", *CTX, "apply", "--server-side", "-k", KUSTOMIZE]
CERT_WAIT = ["kubectl", *CTX, "--namespace", "kubeflow", "wait", "secret/training-operator-webhook-cert",
             "--for=jsonpath={.data.ca\\.crt}", "--timeout=120s"]
POD_RESTART = ["kubectl", *CTX, "--namespace", "kubeflow", "delete", "pod", "--selector",
               "control-plane=kubeflow-training-operator", "--wait=false"]
ROLLOUT = ["kubectl", *CTX, "--namespace", "kubeflow", "rollout", "status", "deployment/training-operator",
           "--timeout=300s"]
GET_NODES = ["kubectl", *CTX, "get", "nodes", "--output", "json"]
W = "kubetrain-worker"
WORKER_CHECKS_AND_ACTS = [
    ["docker", "exec", W, "sh", "-c", "command -v nvidia-ctk"],
    ["docker", "exec", W, "bash", "-c", INSTALL_TOOLKIT],
    ["docker", "exec", W, "sh", "-c", "containerd config dump | grep -qF 'runtimes.nvidia]'"],
    ["docker", "exec", W, "bash", "-c", CONFIGURE_CONTAINERD],
    ["docker", "exec", W, "grep", "-qx", "ModifyDeviceFiles: 0", "/proc/driver/nvidia/params"],
    ["docker", "exec", W, "bash", "-c", MASK_PARAMS],
]


def create(*args: str) -> Result:
    return CliRunner().invoke(cli, ["cluster", "create", *args])


def test_gpu_create_runs_every_step_in_order(fakebin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", "kubeconfig-test")
    healthy_gpu_host(fakebin)
    nothing_installed_yet(fakebin)
    result = create()
    assert result.exit_code == 0, result.output
    assert fakebin.argvs() == [
        ["nvidia-smi", "-L"],
        ["docker", "info", "--format", "{{json .}}"],
        ["nvidia-ctk", "config"],
        ["kind", "get", "clusters"],
        ["kind", "create", "cluster", "--name", "kubetrain", "--config=-", "--wait", "120s"],
        ["kind", "get", "nodes", "--name", "kubetrain"],
        ["docker", "inspect", "--format", "{{json .Mounts}}", "kubetrain-control-plane", W],
        *WORKER_CHECKS_AND_ACTS,
        ["kubectl", *CTX, "get", "runtimeclass", "nvidia"],
        ["kubectl", *CTX, "apply", "-f", "-"],
        HELM_LIST, HELM_INSTALL,
        OPERATOR_CHECK, OPERATOR_APPLY, CERT_WAIT, POD_RESTART,
        ROLLOUT, GET_NODES,
    ]
    calls = fakebin.calls()
    assert calls[4]["stdin"] == render_config("kubetrain", None)
    assert yaml.safe_load(calls[-9]["stdin"]) == yaml.safe_load(RUNTIME_CLASS)
    assert all(c["env"].get("KUBECONFIG") == "kubeconfig-test" for c in calls)  # kubectl conventions
    assert result.stdout.splitlines()[0] == ("kind cluster 'kubetrain' is ready: kubectl context "
                                             "kind-kubetrain, "
                                             "2 x nvidia.com/gpu allocatable")
    assert "  kubetrain-worker         worker         yes    2" in result.stdout
    assert "kubetrain build --kind kubetrain" in result.stdout
    assert "kubetrain: kubetrain-worker: install the NVIDIA Container Toolkit: done" in result.stderr


def test_rerun_on_a_complete_cluster_only_checks(fakebin: Any) -> None:
    healthy_gpu_host(fakebin, existing=True)
    fakebin.on("helm", "--kube-context", "kind-kubetrain", "list",
               stdout='[{"name": "nvidia-device-plugin", "chart": "nvidia-device-plugin-0.20.0", '
                      '"status": "deployed"}]')
    fakebin.on(*OPERATOR_CHECK, stdout="ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489")
    result = create()
    assert result.exit_code == 0, result.output
    argvs = fakebin.argvs()
    assert argvs[3:] == [
        ["kind", "get", "clusters"],
        ["kind", "get", "nodes", "--name", "kubetrain"],
        ["docker", "inspect", "--format", "{{json .Mounts}}", "kubetrain-control-plane", W],
        WORKER_CHECKS_AND_ACTS[0], WORKER_CHECKS_AND_ACTS[2], WORKER_CHECKS_AND_ACTS[4],
        ["kubectl", *CTX, "get", "runtimeclass", "nvidia"],
        HELM_LIST, OPERATOR_CHECK, ROLLOUT, GET_NODES,
    ]
    assert result.stderr.count(": already done") == 7


def test_one_worker_per_gpu_hides_the_other_gpus(fakebin: Any) -> None:
    healthy_gpu_host(fakebin, worker_mounts=("1",), allocatable=(1,))
    nothing_installed_yet(fakebin)
    result = create("--gpus", "1")
    assert result.exit_code == 0, result.output
    calls = fakebin.calls()
    assert yaml.safe_load(calls[4]["stdin"])["nodes"][1]["extraMounts"] == [
        {"hostPath": "/dev/null", "containerPath": "/var/run/nvidia-container-devices/1"}]
    argvs = [c["argv"] for c in calls]
    hide_check = ["docker", "exec", W, "sh", "-c", "for d in /dev/nvidia0; do test ! -e $d || exit 1; done"]
    hide = ["docker", "exec", W, "bash", "-c",
            "for d in /dev/nvidia0; do while umount $d 2>/dev/null; do :; done; rm -f $d; done"]
    after_mask = argvs.index(WORKER_CHECKS_AND_ACTS[-1]) + 1
    assert argvs[after_mask:after_mask + 2] == [hide_check, hide]
    assert "1 x nvidia.com/gpu allocatable" in result.stdout


def test_cpu_only_skips_every_gpu_part(fakebin: Any) -> None:
    fakebin.install("docker", "kind", "kubectl")  # no nvidia-smi, nvidia-ctk or helm on this host
    fakebin.on("docker", "info", stdout='{"DefaultRuntime": "runc"}')
    fakebin.on("kubectl", *CTX, "--namespace", "kubeflow", "get", exit=1)
    fakebin.on("kubectl", *CTX, "get", "nodes", stdout=nodes_json("kubetrain", [0]))
    result = create("--cpu-only")
    assert result.exit_code == 0, result.output
    assert fakebin.argvs() == [
        ["docker", "info", "--format", "{{json .}}"],
        ["kind", "get", "clusters"],
        ["kind", "create", "cluster", "--name", "kubetrain", "--config=-", "--wait", "120s"],
        OPERATOR_CHECK, OPERATOR_APPLY, CERT_WAIT, POD_RESTART, ROLLOUT, GET_NODES,
    ]
    assert fakebin.calls()[2]["stdin"] == render_config("kubetrain", None, cpu_only=True)
    assert "CPU only (no GPUs)" in result.stdout
    assert "spec.gpusPerNode: 0 and spec.build.variant: cpu" in result.stdout


def test_the_operator_pod_is_restarted_only_once_its_certificate_exists(fakebin: Any) -> None:
    """The first operator pod mounts its webhook cert Secret before its own cert-rotator fills it (the kubelet
    would refresh it a minute or two later): once the Secret has a CA, a new pod mounts it at once. If the
    wait fails (e.g. a kubectl that lacks value-less `--for=jsonpath`), the rollout wait still decides."""
    fakebin.install("docker", "kind", "kubectl")
    fakebin.on("docker", "info", stdout='{"DefaultRuntime": "runc"}')
    fakebin.on(*CERT_WAIT, exit=1, stderr="error: timed out waiting for the condition\n")
    fakebin.on("kubectl", *CTX, "--namespace", "kubeflow", "get", exit=1)
    fakebin.on("kubectl", *CTX, "get", "nodes", stdout=nodes_json("kubetrain", [0]))
    result = create("--cpu-only")
    assert result.exit_code == 0, result.output
    assert fakebin.argvs()[-4:] == [OPERATOR_APPLY, CERT_WAIT, ROLLOUT, GET_NODES]  # no pod deleted
    assert "restarting its pod" not in result.stderr


def test_failed_prerequisites_are_all_reported_before_anything_runs(fakebin: Any) -> None:
    fakebin.install("nvidia-smi", "docker", "nvidia-ctk", "kind", "kubectl")  # helm missing
    fakebin.on("nvidia-smi", "-L", exit=9, stderr="NVIDIA-SMI has failed because it couldn't "
                                                  "communicate with the "
                                                   "NVIDIA driver.\n")
    fakebin.on("docker", "info", stdout='{"DefaultRuntime": "runc", "Runtimes": {"nvidia": {}, "runc": {}}}')
    fakebin.on("nvidia-ctk", "config", stdout="accept-nvidia-visible-devices-as-volume-mounts = false\n")
    result = create()
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "error: `nvidia-smi -L` failed (NVIDIA-SMI has failed because it couldn't communicate with the "
        "NVIDIA "
        "driver.): check the NVIDIA driver (a reboot after installing it?), or use --cpu-only",
        "error: docker's default runtime is 'runc', not 'nvidia' (kind nodes only get GPUs through it): run "
        "`sudo nvidia-ctk runtime configure --runtime=docker --set-as-default && sudo systemctl restart "
        "docker`",
        "error: the NVIDIA Container Toolkit does not accept GPU requests as volume mounts "
        "(accept-nvidia-visible-devices-as-volume-mounts is not true): run `sudo nvidia-ctk config --set "
        "accept-nvidia-visible-devices-as-volume-mounts=true --in-place && sudo systemctl restart docker`",
        "error: helm is not installed (not on PATH): install helm: https://helm.sh/docs/intro/install/",
    ]
    assert [a[0] for a in fakebin.argvs()] == ["nvidia-smi", "docker", "nvidia-ctk"]


@pytest.mark.parametrize(("installed", "info", "message"), [
    (("kind", "kubectl"), None, "error: docker is not installed (not on PATH): install Docker Engine"),
    (("docker", "kind", "kubectl"), "down", "error: the docker daemon is not reachable (Cannot connect)"),
    (("docker", "kubectl"), "{}", "error: kind is not installed (not on PATH): install kind: https://kind"),
])
def test_cpu_only_prerequisites(fakebin: Any, installed: tuple[str, ...], info: str | None,
                                message: str) -> None:
    fakebin.install(*installed)
    if info == "down":
        fakebin.on("docker", "info", exit=1, stderr="Cannot connect\n")
    elif info:
        fakebin.on("docker", "info", stdout=info)
    result = create("--cpu-only")
    assert result.exit_code == 1
    assert result.stderr.startswith(message)
    assert "kind" not in [a[0] for a in fakebin.argvs()]


def test_missing_nvidia_runtime_and_toolkit(fakebin: Any) -> None:
    fakebin.install("nvidia-smi", "docker", "kind", "kubectl", "helm")
    fakebin.on("nvidia-smi", "-L", stdout="GPU 0: NVIDIA L4 (UUID: GPU-0aa)\n")
    fakebin.on("docker", "info", stdout='{"DefaultRuntime": "runc", "Runtimes": {"runc": {}}}')
    result = create()
    assert result.stderr.splitlines() == [
        "error: docker has no nvidia runtime: run `sudo nvidia-ctk runtime configure --runtime=docker "
        "--set-as-default && sudo systemctl restart docker`",
        "error: nvidia-ctk is not installed: install the NVIDIA Container Toolkit, "
        "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html",
    ]


def test_failure_in_the_middle_then_a_rerun_resumes(fakebin: Any) -> None:
    healthy_gpu_host(fakebin)
    fakebin.on(*HELM_INSTALL, exit=1, stdout="Error: INSTALLATION FAILED: context deadline exceeded\n")
    nothing_installed_yet(fakebin)
    result = create("--gpus", "all")
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert result.stderr.splitlines()[-3:] == [
        "error: step 'NVIDIA device plugin v0.20.0' failed: `helm --kube-context kind-kubetrain upgrade "
        "--install "
        "nvidia-device-plugin nvidia-device-plugin --repo https://nvidia.github.io/k8s-device-plugin "
        "--version "
        "0.20.0 --namespace nvidia-device-plugin --create-namespace --set runtimeClassName=nvidia "
        "--wait --timeout "
        "5m` exited 1",
        "error:   | Error: INSTALLATION FAILED: context deadline exceeded",
        "error: fix the cause and re-run `kubetrain cluster create --name kubetrain`: finished steps "
        "are skipped",
    ]
    assert fakebin.argvs()[-1] == HELM_INSTALL  # nothing after the failed step

    # The re-run: the cluster and the in-node work are there now; only the failed step and later ones act.
    fakebin.reset_log()
    fakebin.clear()
    healthy_gpu_host(fakebin, existing=True)
    fakebin.on("kubectl", *CTX, "--namespace", "kubeflow", "get", exit=1)
    fakebin.on("helm", "--kube-context", "kind-kubetrain", "list", stdout="[]")
    rerun = create()
    assert rerun.exit_code == 0, rerun.output
    acted = [a for a in fakebin.argvs() if a[:2] in (["kind", "create"], ["docker", "exec"]) and "bash" in a]
    assert acted == []
    assert fakebin.argvs()[-8:] == [HELM_LIST, HELM_INSTALL, OPERATOR_CHECK, OPERATOR_APPLY, CERT_WAIT,
                                    POD_RESTART, ROLLOUT, GET_NODES]


def test_existing_cluster_without_gpu_workers(fakebin: Any) -> None:
    healthy_gpu_host(fakebin, existing=True)
    fakebin.clear()
    healthy_gpu_host(fakebin, existing=True, worker_mounts=())
    result = create()
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        "error: kind cluster 'kubetrain' exists but has no GPU workers (created with --cpu-only?): "
        "delete it with "
        "`kubetrain cluster delete --name kubetrain` and create it again")


@pytest.mark.parametrize(("args", "message"), [
    (["--gpus", "5"], "error: --gpus: this host has no GPU 5 (nvidia-smi -L lists 0,1)"),
    (["--gpus", "0", "--cpu-only"], "error: --gpus and --cpu-only exclude each other"),
    (["--name", "Bad_Name"], "error: --name 'Bad_Name': use lower-case letters"),
])
def test_usage_errors(fakebin: Any, args: list[str], message: str) -> None:
    healthy_gpu_host(fakebin)
    result = create(*args)
    assert result.exit_code == 2
    assert result.stderr.startswith(message)
    assert "kind" not in [a[0] for a in fakebin.argvs()]


def test_delete(fakebin: Any) -> None:
    fakebin.install("kind").on("kind", "get", "clusters", stdout="kubetrain\nother\n")
    result = CliRunner().invoke(cli, ["cluster", "delete"])
    assert result.exit_code == 0, result.output
    assert fakebin.argvs() == [["kind", "get", "clusters"],
                               ["kind", "delete", "cluster", "--name", "kubetrain"],
                               ["kind", "get", "clusters"]]  # 'other' is left: so is kind's network


def test_deleting_the_last_cluster_removes_kinds_network(fakebin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIND_EXPERIMENTAL_PROVIDER", "podman")
    fakebin.install("kind", "podman").on("kind", "get", "clusters", responses=[
        {"exit": 0, "stdout": "kubetrain\n", "stderr": ""}, {"exit": 0, "stdout": "", "stderr": ""}])
    result = CliRunner().invoke(cli, ["cluster", "delete"])
    assert result.exit_code == 0, result.output
    assert fakebin.argvs()[-2:] == [["podman", "network", "inspect", "kind"], ["podman", "network", "rm", "kind"]]
    assert "removed the podman network 'kind' (no kind cluster is left)" in result.stderr


def test_delete_missing_cluster_is_not_an_error(fakebin: Any) -> None:
    fakebin.install("kind").on("kind", "get", "clusters", stdout="other\n")
    result = CliRunner().invoke(cli, ["cluster", "delete", "--name", "dev"])
    assert result.exit_code == 0
    assert "no kind cluster named 'dev'; nothing to delete" in result.stderr
    assert fakebin.argvs() == [["kind", "get", "clusters"]]


def test_delete_failure(fakebin: Any) -> None:
    fakebin.install("kind").on("kind", "get", "clusters", stdout="kubetrain\n").on(
        "kind", "delete", exit=1, stdout="ERROR: failed to delete cluster\n")
    result = CliRunner().invoke(cli, ["cluster", "delete"])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-2:] == ["error: `kind delete cluster --name kubetrain` exited 1",
                                               "error:   | ERROR: failed to delete cluster"]


def test_unused_helpers_are_consistent() -> None:
    assert "accept-nvidia-visible-devices-as-volume-mounts = true" in CTK_CONFIG
    assert "nvidia" in DOCKER_INFO
    assert mounts("all").count("/var/run/nvidia-container-devices/all") == 1
    assert Path(__file__).exists()


def test_no_nvidia_stack_is_one_line_before_anything_runs(fakebin: Any) -> None:
    fakebin.install("docker", "kind", "kubectl", "helm")  # no nvidia-smi, no nvidia-ctk
    result = create()
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error: no NVIDIA driver or Container Toolkit on this host (nvidia-smi and nvidia-ctk not found): "
        "install both (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/"
        "install-guide.html), or use --cpu-only"]
    assert fakebin.argvs() == []


def test_cpu_only_with_podman_follows_kinds_provider(fakebin: Any) -> None:
    fakebin.install("podman", "kind", "kubectl")  # no docker: kind (and kubetrain) use podman
    fakebin.on("kubectl", *CTX, "--namespace", "kubeflow", "get", exit=1)
    fakebin.on("kubectl", *CTX, "get", "nodes", stdout=nodes_json("kubetrain", []))
    result = create("--cpu-only", "--operator-manifests", "/srv/training-operator/overlays/standalone")
    assert result.exit_code == 0, result.output
    assert fakebin.argvs()[0] == ["podman", "info", "--format", "json"]
    assert ["kubectl", *CTX, "apply", "--server-side", "-k", "/srv/training-operator/overlays/standalone"] \
        in fakebin.argvs()


def test_gpu_workers_need_docker(fakebin: Any) -> None:
    healthy_gpu_host(fakebin)
    fakebin.install("podman")
    result = CliRunner().invoke(cli, ["cluster", "create"], env={"KIND_EXPERIMENTAL_PROVIDER": "podman"})
    assert result.exit_code == 1
    assert "GPU workers need docker with the nvidia runtime" in result.stderr
