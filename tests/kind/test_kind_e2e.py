"""A real kind cluster, driven through the kubetrain CLI as a user would.

One cluster for the module (kind's podman provider, the node image tests/testenv/prepare-kind.sh builds on
this machine): `cluster create --cpu-only` → `doctor` → `build --kind` → `submit --follow` of the digits
example to >= 0.97 held-out accuracy → `status`, `logs`, `gpu`, `delete --wait` → `cluster delete`, after
which no container, volume, network or mount of the cluster is left. Run it one at a time with the other real-node
tests: `.venv/bin/python -m pytest tests/kind/test_kind_e2e.py`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from kubetrain.kind.steps import CONFIGURE_CONTAINERD, CONTAINERD_HAS_NVIDIA, RUNTIME_CLASS
from kubetrain.metrics import parse_metrics_line
from tests.testenv import kindenv
from tests.testenv import node as real
from tests.testenv.plugin import unavailable

pytestmark = [pytest.mark.slow, pytest.mark.torch]
REPO = Path(__file__).resolve().parents[2]
NAME = "kt-e2e"
CONTEXT = f"kind-{NAME}"
ACCURACY = 0.97
KUBETRAIN = (sys.executable, "-m", "kubetrain")


@dataclass
class Kind:
    env: dict[str, str]
    kindenv: kindenv.KindEnv
    create_env: dict[str, str]  # `cluster create`'s: the node's containerd root from the cache
    store: kindenv.ImageStore  # warm: that cache holds an earlier run's image on this base
    base: str  # the training image's base image (its ID)
    volumes_before: set[str] = field(default_factory=set)

    def __call__(self, *args: str, timeout: float = 600, check: bool = True,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([*KUBETRAIN, *args], capture_output=True, text=True, timeout=timeout,
                                env=env or self.env, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"kubetrain {' '.join(args[:3])} exited {result.returncode}\n"
                                 f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}")
        return result

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env, check=check, timeout=300)


def _base_image_id() -> str:
    ref = (real.node_bin_dir() / "base-image").read_text().strip()
    return subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True,
                          text=True, check=True, timeout=60).stdout.strip()


def _volumes(kind: Kind) -> set[str]:
    return set(kind.run("podman", "volume", "ls", "--format", "{{.Name}}").stdout.split())


def _leftovers(kind: Kind) -> list[str]:
    """Containers, volumes (kind's are anonymous: new since the module began), networks and mounts of the
    cluster still on the host."""
    found = kind.run("podman", "ps", "-a", "--filter", f"label=io.x-k8s.kind.cluster={NAME}",
                     "--format", "{{.Names}}").stdout.split()
    found += [f"volume {v}" for v in sorted(_volumes(kind) - kind.volumes_before)]
    if kind.run("podman", "network", "exists", "kind", check=False).returncode == 0:
        found.append("network kind")
    found += [f"mount {line.split()[1]}" for line in Path("/proc/mounts").read_text().splitlines()
              if f"/{NAME}-" in line.split()[1]]
    return found


@pytest.fixture(scope="module")
def kind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kind]:
    try:
        prepared = kindenv.requirements()
    except kindenv.KindUnavailable as exc:
        unavailable(str(exc))
        raise
    workdir = tmp_path_factory.mktemp("kind")
    env = prepared.env(workdir / "kubeconfig")
    env["PYTHONPATH"] = str(REPO)
    base = _base_image_id()
    with kindenv.image_store(prepared, workdir, base) as store:
        runner = Kind(env, prepared, {**env, "CONTAINERS_CONF": str(store.containers_conf)}, store, base)
        runner("cluster", "delete", "--name", NAME)  # a cluster left over by an interrupted run
        runner.volumes_before = _volumes(runner)
        yield runner
        runner("cluster", "delete", "--name", NAME, check=False)


@pytest.fixture(scope="module")
def cluster(kind: Kind) -> str:
    created = kind("cluster", "create", "--name", NAME, "--cpu-only", "--node-image", kind.kindenv.node_image,
                   "--operator-manifests", str(kind.kindenv.operator_manifests), timeout=900, env=kind.create_env)
    assert created.stdout.startswith(f"kind cluster '{NAME}' is ready: kubectl context {CONTEXT}, CPU only"), \
        created.stdout + created.stderr[-3000:]
    node_row = created.stdout.splitlines()[2].split()
    assert node_row == [f"{NAME}-control-plane", "control-plane", "yes", "0"], created.stdout
    return CONTEXT


def test_create_installs_the_operator_and_a_rerun_only_checks(kind: Kind, cluster: str) -> None:
    pods = json.loads(kind.run("kubectl", "--context", cluster, "get", "pods", "-A", "-o", "json").stdout)
    phases = {p["metadata"]["name"]: p["status"]["phase"] for p in pods["items"]}
    assert all(phase == "Running" for phase in phases.values()), phases
    for prefix in ("coredns-", "kube-proxy-", "kindnet-", "training-operator-", "etcd-", "kube-apiserver-"):
        assert any(name.startswith(prefix) for name in phases), (prefix, phases)
    rerun = kind("cluster", "create", "--name", NAME, "--cpu-only", "--node-image", kind.kindenv.node_image,
                 "--operator-manifests", str(kind.kindenv.operator_manifests))
    assert rerun.stderr.count(": already done") == 2, rerun.stderr  # the cluster and the training-operator


def test_doctor_is_green_for_cpu_training(kind: Kind, cluster: str) -> None:
    doctor = kind("doctor", "--context", cluster, "--cpu", check=False)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "✗" not in doctor.stdout and "✓ cpu           CPU training: 1 Ready node(s)" in doctor.stdout, doctor.stdout
    assert "ready for CPU training" in doctor.stderr


def test_gpu_create_without_the_nvidia_toolkit_stops_at_once(kind: Kind) -> None:
    result = kind("cluster", "create", "--name", "kt-gpu", "--node-image", kind.kindenv.node_image, check=False)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "error: no NVIDIA driver or Container Toolkit on this host (nvidia-smi and nvidia-ctk not found): "
        "install both (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/"
        "install-guide.html), or use --cpu-only"], result.stderr
    assert "kt-gpu" not in kind.run("kind", "get", "clusters").stdout.split()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits example, CPU variant on the machine's local base image (no registry here)."""
    root = tmp_path_factory.mktemp("digits-kind")
    shutil.copytree(REPO / "examples" / "digits", root, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".kubetrain", "__pycache__"))
    (root / "requirements.txt").write_text("scikit-learn\n")
    # A new top layer on every run, as a user's code change makes: `build --kind` sends the node only that
    # layer, once the node's cached containerd root holds the base (kindenv.image_store).
    (root / "run-id.txt").write_text(f"{uuid.uuid4()}\n")
    spec = yaml.safe_load((root / "kubetrain.yaml").read_text())
    base = (real.node_bin_dir() / "base-image").read_text().strip()
    spec["spec"].update({"build": {"variant": "cpu", "baseImage": base}, "imagePullPolicy": "IfNotPresent",
                         "gpusPerNode": 0, "resources": {"cpu": "500m", "memory": "1Gi"}})
    (root / "kubetrain.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return root


CLAIM = """\
apiVersion: v1
kind: PersistentVolume
metadata: {name: digits-ckpt-kind}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteMany]
  storageClassName: ""
  hostPath: {path: /var/local/digits-ckpt, type: DirectoryOrCreate}
  claimRef: {namespace: default, name: digits-ckpt}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: digits-ckpt, namespace: default}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  volumeName: digits-ckpt-kind
  resources: {requests: {storage: 1Gi}}
"""


def _evals(text: str) -> list[dict[str, object]]:
    records = (parse_metrics_line(line) for line in text.splitlines())
    return [r for r in records if r is not None and r.get("kind") == "eval"]


def test_digits_builds_loads_and_trains_on_the_cluster(kind: Kind, cluster: str, project: Path) -> None:
    spec = str(project / "kubetrain.yaml")
    built = kind("build", "-f", spec, "--builder", "podman", "--kind", NAME, timeout=1800)
    image = built.stdout.strip().splitlines()[-1]
    ctr = ("podman", "exec", f"{NAME}-control-plane", "ctr", "--namespace", "k8s.io", "images")
    loaded = kind.run(*ctr, "ls", "--quiet").stdout.split()
    assert image in loaded or f"docker.io/{image}" in loaded, (image, loaded)
    sent = [line for line in built.stderr.splitlines() if "layer blob(s) already; sending" in line]
    print(sent or "the whole image: the node's containerd root was empty")
    kind.store.loaded(kind.base)
    if kind.store.warm:  # the base is in the node: only the new top layers go, not the 5 GB image again
        assert len(sent) == 1 and float(sent[0].split(", ")[-1].split()[0]) < 50, built.stderr[-3000:]
        assert "podman save" not in built.stderr, built.stderr[-3000:]
    # The node's containerd root outlives the cluster (kindenv.image_store): drop earlier runs' images there.
    stale = [ref for ref in loaded if ref.startswith(image.split(":")[0] + ":") and ref != image]
    if stale:
        kind.run(*ctr, "rm", *stale)
    # The checkpoint volume: a hostPath in the node, owned by the image's user (uid 1000), as the real-node
    # harness's volumes are.
    kind.run("podman", "exec", f"{NAME}-control-plane", "install", "-d", "-o", "1000", "-g", "1000",
             "/var/local/digits-ckpt")
    subprocess.run(["kubectl", "--context", cluster, "apply", "-f", "-"], input=CLAIM, text=True, check=True,
                   env=kind.env, capture_output=True)
    follow = subprocess.Popen([*KUBETRAIN, "submit", "-f", spec, "--context", cluster, "--image", image,
                               "--follow", "--timeout", "900"], env=kind.env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        gpu = _gpu_while_running(kind, cluster)
        _, err = follow.communicate(timeout=960)
    finally:
        follow.kill()
    assert follow.returncode == 0 and "Succeeded" in err.splitlines()[-1], err[-3000:]
    assert (gpu.stdout + gpu.stderr).count("no GPU: the pod requests no nvidia.com/gpu") == 2, gpu.stdout + gpu.stderr

    logged = kind("logs", "digits-ddp", "--context", cluster).stdout
    assert _evals(logged) and float(str(_evals(logged)[-1]["eval_accuracy"])) >= ACCURACY, logged[-2000:]
    status = kind("status", "digits-ddp", "--context", cluster)
    assert "default/digits-ddp: Succeeded" in status.stdout, status.stdout
    assert f"{NAME}-control-plane" in status.stdout, status.stdout  # the pods ran on the kind node
    checkpoints = kind.run("podman", "exec", f"{NAME}-control-plane", "ls", "/var/local/digits-ckpt/digits").stdout
    assert checkpoints.split(), "no checkpoint on the worker's hostPath volume"
    kind("delete", "digits-ddp", "--context", cluster, "--wait", "--timeout", "120")
    assert kind("status", "digits-ddp", "--context", cluster, check=False).returncode != 0


def _gpu_while_running(kind: Kind, cluster: str) -> subprocess.CompletedProcess[str]:
    """`kubetrain gpu` once both pods run (it answers only for running pods)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        pods = kind.run("kubectl", "--context", cluster, "get", "pods", "-l",
                        "training.kubeflow.org/job-name=digits-ddp", "-o",
                        "jsonpath={.items[*].status.phase}").stdout.split()
        if pods.count("Running") == 2:
            return kind("gpu", "digits-ddp", "--context", cluster, check=False)
        time.sleep(2)
    raise AssertionError("the digits pods never ran together")


def test_nvidia_runtime_configuration_is_accepted_by_the_nodes_containerd(kind: Kind, cluster: str) -> None:
    """The GPU path as far as it goes without a GPU: `cluster create`'s in-node step that configures
    containerd's nvidia runtime (the real nvidia-ctk, built by prepare-kind.sh), its done-check, and the
    RuntimeClass it applies; containerd restarts with the configuration and the node's pods keep running."""
    node = f"{NAME}-control-plane"
    kind.run("podman", "cp", str(kind.kindenv.nvidia_ctk), f"{node}:/usr/local/bin/nvidia-ctk")
    check = ["podman", "exec", node, "sh", "-c", CONTAINERD_HAS_NVIDIA]  # the step's done-check
    assert kind.run(*check, check=False).returncode != 0  # not configured yet: the step would act
    kind.run("podman", "exec", node, "bash", "-c", CONFIGURE_CONTAINERD)
    assert kind.run(*check, check=False).returncode == 0, kind.run("podman", "exec", node, "containerd",
                                                                   "config", "dump").stdout[-2000:]
    subprocess.run(["kubectl", "--context", cluster, "apply", "-f", "-"], input=RUNTIME_CLASS, text=True,
                   check=True, env=kind.env, capture_output=True)
    assert kind.run("kubectl", "--context", cluster, "get", "runtimeclass", "nvidia", "-o",
                    "jsonpath={.handler}").stdout == "nvidia"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        pods = json.loads(kind.run("kubectl", "--context", cluster, "get", "pods", "-A", "-o", "json").stdout)
        statuses = [p["status"] for p in pods["items"]]
        if all(st["phase"] == "Running" and all(c.get("ready") for c in st["containerStatuses"]) for st in statuses):
            break
        time.sleep(3)
    else:
        raise AssertionError(f"pods not ready after containerd's restart: {pods}")


def test_cluster_delete_leaves_nothing_behind(kind: Kind, cluster: str) -> None:
    assert _leftovers(kind), "the cluster should exist before it is deleted"
    kind("cluster", "delete", "--name", NAME)
    assert _leftovers(kind) == []
    assert NAME not in kind.run("kind", "get", "clusters").stdout.split()
