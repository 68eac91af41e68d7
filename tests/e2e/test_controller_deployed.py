"""The controller deployed the documented way, on the real node (issue 27, item 7).

Its image is built from images/Dockerfile.controller with `BASE_IMAGE` set to the suite's local Debian python
image (no registry is reachable here; pip reaches PyPI through the host's trust store, mounted into the build)
and imported into the node's containerd. `kubetrain controller install --image` applies the CRD, namespace,
ServiceAccount, RBAC and Deployment. One overlay, what a kustomize overlay for this cluster would carry: the
real node's placement, and host networking, because the test node has no kube-proxy (no Service IPs: the API
server's only address a pod can reach is the host's loopback); with host networking two replicas would share
one port, so one replica, on a free port. The pod authenticates with its ServiceAccount's projected token (the
in-cluster config), passes its probes on the pod IP, and reconciles a TrainingJob whose pods train to
Succeeded; `kubetrain controller uninstall` removes it all.
"""

from __future__ import annotations

import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from tests.controller.operator_env import create, phase_is, pytorchjob, tj
from tests.harness.helpers import wait_for
from tests.testenv import binaries
from tests.testenv import node as real
from tests.testenv.processes import free_port

from .conftest import PLACEMENT, REPO, Cli
from .test_digits import _metrics
from .test_operator import _training_job

pytestmark = [pytest.mark.slow, pytest.mark.torch]
REF = "localhost/kubetrain/controller:e2e"
NAMESPACE = "kubetrain-system"
NAME = "kubetrain-controller"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


@pytest.fixture(scope="session")
def controller_image(real_node: real.RealNode, tmp_path_factory: pytest.TempPathFactory) -> str:
    """images/Dockerfile.controller built on the local python image and imported into the node (podman's
    layer cache keeps a rebuild with unchanged sources to seconds)."""
    env = {**os.environ, "CONTAINERS_CONF": str(real.node_bin_dir() / "containers.conf")}
    trust = ["-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"] if CA_BUNDLE.is_file() else []
    base = binaries.versions()["PYTHON_IMAGE"]
    build = ["podman", "build", "-q", "-f", "images/Dockerfile.controller", "--build-arg", f"BASE_IMAGE={base}",
             *trust, "-t", REF, "."]
    done = subprocess.run(build, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    archive = tmp_path_factory.mktemp("controller-image") / "controller.tar"
    subprocess.run(["podman", "save", "--format", "oci-archive", "-o", str(archive), REF], env=env, check=True,
                   capture_output=True, timeout=600)
    real_node.import_image(archive)
    archive.unlink()
    return REF


def _overlay(apiserver_port: int, probe_port: int) -> list[dict[str, Any]]:
    """JSON patch of the installed Deployment for this test cluster (see the module docstring)."""
    container = "/spec/template/spec/containers/0"
    env = [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
           {"name": "KUBERNETES_SERVICE_PORT", "value": str(apiserver_port)}]
    return [
        {"op": "replace", "path": "/spec/replicas", "value": 1},
        {"op": "add", "path": "/spec/template/spec/hostNetwork", "value": True},
        {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": PLACEMENT["nodeSelector"]},
        {"op": "add", "path": "/spec/template/spec/tolerations", "value": PLACEMENT["tolerations"]},
        *({"op": "add", "path": f"{container}/env/-", "value": item} for item in env),
        {"op": "replace", "path": f"{container}/args",
         "value": ["controller", "run", "--leader-elect", "--probe-address=$(POD_IP)", f"--probe-port={probe_port}"]},
        {"op": "replace", "path": f"{container}/ports/0/containerPort", "value": probe_port},
    ]


def _rolled_out(apps: Any, core: Any) -> Any:
    """The one controller pod, Ready, once the patched Deployment has fully rolled out (no old pod left)."""
    dep = apps.read_namespaced_deployment(NAME, NAMESPACE)
    status = dep.status
    if (status.observed_generation != dep.metadata.generation or status.updated_replicas != 1
            or status.ready_replicas != 1 or (status.replicas or 0) != 1):
        return None
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"app.kubernetes.io/name={NAME}").items
    ready = [p for p in pods if not p.metadata.deletion_timestamp and any(
        c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
    return ready[0] if len(pods) == 1 and ready else None


@pytest.fixture
def deployed(controlplane: Any, real_node: real.RealNode, cli: Cli, controller_image: str) -> Iterator[Any]:
    admin = controlplane.api_client()
    apps, core = kubernetes.client.AppsV1Api(admin), kubernetes.client.CoreV1Api(admin)
    installed = cli("controller", "install", "--image", controller_image).stdout.split()
    assert {"serviceaccount/kubetrain-controller", "deployment/kubetrain-controller",
            "customresourcedefinition/trainingjobs.kubetrain.dev"} <= set(installed), installed
    probe_port = free_port()
    apps.patch_namespaced_deployment(NAME, NAMESPACE, _overlay(controlplane.ports["apiserver"], probe_port))
    try:
        pod = wait_for(lambda: _rolled_out(apps, core), "the controller Deployment rolled out and Ready", 300)
        yield pod, probe_port
    finally:
        cli("controller", "uninstall", check=False)


def test_deployed_controller_reconciles_a_trainingjob_to_succeeded(
        controlplane: Any, k8s: Any, cli: Cli, image: str, project: Path, namespace: str, claim: Path,
        deployed: Any) -> None:
    pod, probe_port = deployed
    core = kubernetes.client.CoreV1Api(k8s)
    assert pod.spec.node_name == real_node_name(core) and pod.spec.service_account_name == NAME
    assert pod.spec.containers[0].image == REF and pod.status.container_statuses[0].restart_count == 0
    probes = pod.spec.containers[0]
    assert probes.liveness_probe.http_get.path == "/healthz" and probes.readiness_probe.http_get.path == "/readyz"
    with urllib.request.urlopen(f"http://{pod.status.pod_ip}:{probe_port}/healthz", timeout=10) as answer:
        assert answer.status == 200  # the address flag: the pod IP the kubelet probes

    job = _training_job(project, image, namespace)
    job["metadata"]["name"] = "digits-deployed"
    job["spec"]["checkpoint"]["dir"] = "/ckpt/digits-deployed"
    job["spec"]["train"]["epochs"] = 2
    create(k8s, job)
    wait_for(lambda: pytorchjob(k8s, namespace, "digits-deployed"), "the child PyTorchJob", 120)
    done = wait_for(lambda: phase_is(k8s, namespace, "digits-deployed", "Succeeded"), "phase Succeeded", 900)
    logged = cli("logs", "digits-deployed", "-n", namespace).stdout
    assert _metrics(logged, "end") and _metrics(logged, "start")[0]["world_size"] == 2, logged[-2000:]
    assert done["status"]["progress"]["step"] == _metrics(logged, "end")[0]["step"], done["status"]
    log = core.read_namespaced_pod_log(pod.metadata.name, NAMESPACE)
    assert "leads (Lease kubetrain-system/kubetrain-controller)" in log, log[-3000:]
    assert core.read_namespaced_pod(pod.metadata.name, NAMESPACE).status.container_statuses[0].restart_count == 0

    removed = cli("controller", "uninstall").stdout.split()
    assert {"deployment/kubetrain-controller", "namespace/kubetrain-system"} <= set(removed), removed
    wait_for(lambda: _gone(lambda: core.read_namespace(NAMESPACE)), "kubetrain-system removed", 180)
    rbac = kubernetes.client.RbacAuthorizationV1Api(k8s)
    assert _gone(lambda: rbac.read_cluster_role(NAME)) and _gone(lambda: rbac.read_cluster_role_binding(NAME))
    # Without --with-crd the CRD, and so the users' TrainingJobs, stay (docs/operator.md).
    assert tj(k8s, namespace, "digits-deployed") is not None


def real_node_name(core: Any) -> str:
    nodes = core.list_node(label_selector=f"{real.NODE_LABEL}=real").items
    return str(nodes[0].metadata.name)


def _gone(read: Any) -> bool:
    try:
        read()
    except ApiException as exc:
        return bool(exc.status == 404)
    return False
